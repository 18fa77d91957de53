//! The command group on the freight projection with its outbox, over the
//! embedded table: `status` with pending effects and the oldest claim,
//! `drain`, `drain-pending`, and one-line errors.

#[path = "../examples/freight/model.rs"]
#[allow(dead_code)]
mod model;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use clap::Parser;
use eddy_dynamo::{BoxError, Effect, EmbeddedTable, EventItem, MultiProjection, Outbox};
use eddy_dynamo_cli::{CliError, ProjectionCommand, RowRepair};
use futures::future::BoxFuture;
use model::{Freight, ScanEvent, ShipmentKey, ShipmentSummary};

#[derive(Parser)]
struct App {
    #[command(subcommand)]
    command: ProjectionCommand,
}

/// A clock the test moves: epoch milliseconds.
#[derive(Clone, Default)]
struct Clock(Arc<AtomicU64>);

struct Fixture {
    freight: Freight,
    outbox: Outbox,
    shipments: MultiProjection<ShipmentSummary, ShipmentKey>,
    clock: Clock,
    delivered: Arc<Mutex<Vec<String>>>,
    down: Arc<AtomicBool>,
}

impl Fixture {
    fn new() -> Self {
        let table = EmbeddedTable::memory(model::schema("freight"));
        let freight = Freight::new(Arc::new(table)).unwrap();
        let clock = Clock::default();
        let now = clock.clone();
        let outbox = freight
            .outbox()
            .unwrap()
            .with_clock(move || now.0.load(Ordering::SeqCst));
        let shipments = freight.projection(Some(Arc::new(outbox.clone()))).unwrap();
        Self {
            freight,
            outbox,
            shipments,
            clock,
            delivered: Arc::default(),
            down: Arc::default(),
        }
    }

    /// Appends a scan of `shipment` and applies it without delivering: its
    /// notice stays pending.
    async fn scan(&self, shipment: &str, location: &str) {
        let scans = &self.freight.scans;
        let id = scans.id([("shipmentId", shipment)]).unwrap();
        let at = scans.current_version(&id).await.unwrap();
        let event = ScanEvent::Scanned {
            location: location.into(),
        };
        scans.append(&id, &[event], at).await.unwrap();
        let items: Vec<EventItem> = scans.read_items_range(&id, at + 1, at + 1).await.unwrap();
        self.shipments.apply_batch(items).await.unwrap();
    }

    fn deliver(&self) -> impl Fn(Effect) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync {
        let (delivered, down) = (self.delivered.clone(), self.down.clone());
        move |effect: Effect| {
            if down.load(Ordering::SeqCst) {
                return Box::pin(async { Err("the consumer is down".into()) });
            }
            let delivered = delivered.clone();
            Box::pin(async move {
                let notice: model::ShipmentNotice = effect.decode()?;
                delivered
                    .lock()
                    .unwrap()
                    .push(format!("{} {}", notice.shipment_id, notice.kind));
                Ok(())
            })
        }
    }

    /// Runs a command line, with or without the deliver; its output and
    /// result.
    async fn run(&self, args: &[&str], with_deliver: bool) -> (String, Result<(), CliError>) {
        let app =
            App::try_parse_from(std::iter::once("freight").chain(args.iter().copied())).unwrap();
        let mounted: [&dyn RowRepair; 1] = [&self.shipments];
        let deliver = self.deliver();
        let mut out = Vec::new();
        let result = eddy_dynamo_cli::run(
            &app.command,
            &mounted,
            with_deliver.then_some(&deliver as &dyn eddy_dynamo::Deliver),
            &mut out,
        )
        .await;
        (String::from_utf8(out).unwrap(), result)
    }
}

impl Fixture {
    /// `status` of row sh-1, which must succeed.
    async fn status_of_sh1(&self) -> String {
        let args = ["status", "--projection", "shipments", "--key", SH1];
        let (out, result) = self.run(&args, false).await;
        result.unwrap();
        out
    }
}

const SH1: &str = r#"{"shipmentId":"sh-1"}"#;

/// `status` shows a row's checkpoints with its pending notices and the
/// claim a crashed drainer left; without rows it lists every row with
/// pending notices.
#[tokio::test]
async fn status_shows_pending_effects_and_the_oldest_claim() {
    let f = Fixture::new();
    f.scan("sh-1", "depot").await;
    f.scan("sh-1", "truck").await;
    f.scan("sh-2", "dock").await;
    let out = f.status_of_sh1().await;
    assert_eq!(
        out.trim(),
        format!(
            "{SH1} checkpoints: scan#shipmentId=sh-1=2; pending: 2 effect(s), head scan#shipmentId=sh-1@1 (0 s old), no claim"
        )
    );

    // A drainer claims the head and crashes.
    let (tx, mut got) = tokio::sync::mpsc::unbounded_channel();
    let crashed = {
        let outbox = f.outbox.clone();
        let row = f.freight.summaries.key(&model::shipment("sh-1")).unwrap();
        tokio::spawn(async move {
            let hang = move |effect: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
                let _ = tx.send(effect.version);
                Box::pin(futures::future::pending())
            };
            outbox.drain(&row, &hang).await.map(|_| ())
        })
    };
    assert_eq!(got.recv().await, Some(1));
    crashed.abort();
    f.clock.0.fetch_add(12_000, Ordering::SeqCst);
    let out = f.status_of_sh1().await;
    assert!(
        out.contains("pending: 2 effect(s), head scan#shipmentId=sh-1@1 (12 s old), oldest claim on scan#shipmentId=sh-1@1 held for 18 s more"),
        "{out}"
    );

    let (out, result) = f.run(&["status", "--projection", "shipments"], false).await;
    result.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines.iter().any(|l| l
            .ends_with("pending: 1 effect(s), head scan#shipmentId=sh-2@1 (12 s old), no claim")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("pending: 2 effect(s)") && l.contains("held for 18 s more")),
        "{out}"
    );

    // The claim expires: a drain takes it over and delivers in order.
    let (out, result) = f
        .run(&["drain", "--projection", "shipments", "--key", SH1], true)
        .await;
    result.unwrap();
    assert_eq!(
        out.trim(),
        format!("{SH1} drained: 0 delivered, busy (another drainer holds the head)")
    );
    f.clock.0.fetch_add(18_000, Ordering::SeqCst);
    let (out, result) = f
        .run(&["drain", "--projection", "shipments", "--key", SH1], true)
        .await;
    result.unwrap();
    assert_eq!(out.trim(), format!("{SH1} drained: 2 delivered"));
    assert_eq!(
        *f.delivered.lock().unwrap(),
        ["sh-1 at depot", "sh-1 at truck"]
    );
}

/// `drain-pending` delivers every row's notices; a failed delivery is
/// printed and fails the command with one line; the next run delivers it.
#[tokio::test]
async fn drain_pending_delivers_every_row_and_reports_what_stays() {
    let f = Fixture::new();
    f.scan("sh-1", "depot").await;
    f.scan("sh-2", "dock").await;
    f.down.store(true, Ordering::SeqCst);
    let (out, result) = f
        .run(&["drain-pending", "--projection", "shipments"], true)
        .await;
    let error = result.unwrap_err();
    assert_eq!(error.to_string(), "2 row(s) left an effect undelivered");
    assert!(
        out.contains("undelivered: scan#shipmentId=sh-1@1: the consumer is down"),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with(
            "drained 2 row(s): 0 delivered, 0 busy, 2 undelivered, 0 parked, 0 failed, 0 stale index entries"
        ),
        "{out}"
    );

    f.down.store(false, Ordering::SeqCst);
    let (out, result) = f
        .run(&["drain-pending", "--projection", "shipments"], true)
        .await;
    result.unwrap();
    assert_eq!(
        out.trim(),
        "drained 2 row(s): 2 delivered, 0 busy, 0 undelivered, 0 parked, 0 failed, 0 stale index entries"
    );
    let mut delivered = f.delivered.lock().unwrap().clone();
    delivered.sort();
    assert_eq!(delivered, ["sh-1 at depot", "sh-2 at dock"]);
    let (out, result) = f.run(&["status", "--projection", "shipments"], false).await;
    result.unwrap();
    assert_eq!(out.trim(), "no rows with pending effects");
}

/// Regression (issue 25): a row whose head does not decode stopped the
/// whole sweep. Now `drain-pending` prints that row's failure, delivers the
/// other rows, and fails with one line.
#[tokio::test]
async fn drain_pending_reports_a_failed_row_and_goes_on() {
    let f = Fixture::new();
    f.scan("sh-1", "depot").await;
    f.scan("sh-2", "dock").await;
    let table = f.freight.summaries.table().clone();
    let key = f.freight.summaries.key(&model::shipment("sh-1")).unwrap();
    let query = eddy_dynamo::Query::partition(key["pk"].clone());
    let mut items = table.query(query).await.unwrap().items;
    let mut head = items
        .drain(..)
        .find(|i| eddy_dynamo::get_str(i, "sk").is_some_and(|sk| sk.contains("$outbox")))
        .unwrap();
    head.insert("version".into(), eddy_dynamo::s("not a number"));
    table.put_item(eddy_dynamo::Put::new(head)).await.unwrap();

    let (out, result) = f
        .run(&["drain-pending", "--projection", "shipments"], true)
        .await;
    assert_eq!(result.unwrap_err().to_string(), "1 row(s) failed to drain");
    assert!(
        out.contains("shipmentId=sh-1|sk=ShipmentSummary failed: ItemDecodeError"),
        "{out}"
    );
    assert!(
        out.contains("1 delivered, 0 busy, 0 undelivered, 0 parked, 1 failed"),
        "{out}"
    );
    assert_eq!(*f.delivered.lock().unwrap(), ["sh-2 at dock"]);
}

/// Errors are one line, with what to do.
#[tokio::test]
async fn errors_are_one_line() {
    let f = Fixture::new();
    f.scan("sh-1", "depot").await;
    let cases: [(&[&str], bool, &str); 4] = [
        (
            &["drain", "--projection", "shipments", "--key", SH1],
            false,
            "drain needs a deliver, and this application mounts none",
        ),
        (
            &["drain-pending", "--projection", "shipments"],
            false,
            "drain-pending needs a deliver, and this application mounts none",
        ),
        (
            &["drain", "--projection", "parcels", "--key", SH1],
            true,
            "no projection named parcels; mounted: shipments",
        ),
        (
            &["drain", "--projection", "shipments", "--key", "[1]"],
            true,
            "invalid argument --key [1]: not a JSON object",
        ),
    ];
    for (args, with_deliver, message) in cases {
        let (_, result) = f.run(args, with_deliver).await;
        let error = result.unwrap_err().to_string();
        assert_eq!(error, message);
        assert!(!error.contains('\n'));
    }
    assert!(f.delivered.lock().unwrap().is_empty());
}

/// A scan count per shipment: a single-source projection.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScanCount {
    shipment_id: String,
    scans: u64,
}

/// Regression (issue 25): single-source projections had no repair, so the
/// command group could not mount them. Now `rebuild` (from the instance the
/// row names, or the one given) and `catch-up` work on them as on
/// multi-source rows.
#[tokio::test]
async fn single_source_projections_are_repaired_from_the_command_line() {
    let f = Fixture::new();
    let counts = eddy_dynamo::Entity::<ScanCount>::new(
        f.freight.summaries.table().clone(),
        model::app(),
        "ScanCount",
        eddy_dynamo::KeyComposite::new(&["shipmentId"], &[]),
    );
    let scan_counts =
        eddy_dynamo::Projection::builder("scan-counts", counts.clone(), f.freight.scans.clone())
            .key(|id, _| id.get("shipmentId").map(model::shipment))
            .initial(|k: &ShipmentKey| ScanCount {
                shipment_id: k.shipment_id.clone(),
                scans: 0,
            })
            .evolve(|mut row, _| {
                row.scans += 1;
                Ok(row)
            })
            .revision("revision")
            .build()
            .unwrap();
    f.scan("sh-1", "depot").await;
    f.scan("sh-1", "port").await;
    let id = f.freight.scans.id([("shipmentId", "sh-1")]).unwrap();
    scan_counts
        .apply_batch(f.freight.scans.read(&id).await.unwrap()[..1].to_vec())
        .await
        .unwrap();
    let mounted: [&dyn RowRepair; 1] = [&scan_counts];
    let run = |args: Vec<String>| {
        let app = App::try_parse_from(std::iter::once("freight".to_owned()).chain(args)).unwrap();
        async move {
            let mut out = Vec::new();
            let result = eddy_dynamo_cli::run(&app.command, &mounted, None, &mut out).await;
            (String::from_utf8(out).unwrap(), result)
        }
    };
    let args = |verb: &str| {
        [verb, "--projection", "scan-counts", "--key", SH1]
            .map(str::to_owned)
            .to_vec()
    };
    let (_, result) = run(args("catch-up")).await;
    result.unwrap();
    let count = counts.get(&model::shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(count.scans, 2, "catch-up applied the second scan");

    let (_, result) = run(args("rebuild")).await;
    result.unwrap();
    let mut named = args("rebuild");
    named.extend(["--instance".to_owned(), format!("Scan={id}")]);
    let (_, result) = run(named).await;
    result.unwrap();
    let count = counts.get(&model::shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(count.scans, 2, "rebuilt from both scans");
}

impl Fixture {
    /// Runs a command line with `deliver`; its output and result.
    async fn run_with(
        &self,
        args: &[&str],
        deliver: &dyn eddy_dynamo::Deliver,
    ) -> (String, Result<(), CliError>) {
        let app =
            App::try_parse_from(std::iter::once("freight").chain(args.iter().copied())).unwrap();
        let mounted: [&dyn RowRepair; 1] = [&self.shipments];
        let mut out = Vec::new();
        let result = eddy_dynamo_cli::run(&app.command, &mounted, Some(deliver), &mut out).await;
        (String::from_utf8(out).unwrap(), result)
    }
}

/// A row whose notice the bridge can never deliver (its stream is
/// closed) is parked: `drain-pending` and `parked` show it with its
/// error, `status` too; `retry` unparks it (still closed: parked again);
/// `skip --dead-letter` moves it to the dead-letter stream, once, and the
/// row goes on; `skip --drop` prints what it dropped; skipping a row that
/// is not parked takes nothing out.
#[tokio::test]
async fn parked_rows_are_listed_retried_and_skipped() {
    use eddy_bridge::{Route, StreamDelivery};
    use eddy_streams::{MemoryStorage, Payload, ReadFrom, Storage, StreamConfig, StreamPath};

    let f = Fixture::new();
    let store = Arc::new(MemoryStorage::new());
    let path = |p: &str| StreamPath::new(p).unwrap();
    let route = Route::by(move |effect: &Effect| {
        let notice: model::ShipmentNotice = effect.decode()?;
        Ok(StreamPath::new(format!("notices/{}", notice.shipment_id))?)
    });
    let bridge = StreamDelivery::new(store.clone(), route, "shipments")
        .unwrap()
        .skip_to(path("dead"));
    let closed = path("notices/sh-1");
    store
        .create(&closed, StreamConfig::json(), Payload::empty())
        .await
        .unwrap();
    store
        .append(&closed, eddy_streams::Append::close_only())
        .await
        .unwrap();
    f.scan("sh-1", "depot").await;
    f.scan("sh-2", "dock").await;

    let (out, result) = f
        .run_with(&["drain-pending", "--projection", "shipments"], &bridge)
        .await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "1 row(s) left an effect undelivered"
    );
    assert!(
        out.contains("parked: scan#shipmentId=sh-1@1: stream/closed: "),
        "{out}"
    );
    assert!(
        out.contains("1 delivered, 0 busy, 0 undelivered, 1 parked"),
        "{out}"
    );
    let (out, result) = f.run(&["parked", "--projection", "shipments"], false).await;
    result.unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("PARKED after 1 failure(s): stream/closed"),
        "{out}"
    );
    assert!(f.status_of_sh1().await.contains("PARKED"));

    // Retried while the stream is still closed: parked again.
    let (out, result) = f
        .run_with(
            &["retry", "--projection", "shipments", "--key", SH1],
            &bridge,
        )
        .await;
    assert!(result.is_err());
    assert!(
        out.contains("unparked scan#shipmentId=sh-1@1, then 0 delivered, parked at"),
        "{out}"
    );

    // Skipped to the dead-letter stream; a crash before the drop and a
    // second skip would append nothing twice (one producer per effect).
    f.scan("sh-1", "truck").await;
    let (out, result) = f
        .run_with(
            &[
                "skip",
                "--projection",
                "shipments",
                "--key",
                SH1,
                "--dead-letter",
            ],
            &bridge,
        )
        .await;
    result.unwrap();
    assert!(
        out.contains("skipped: moved to the dead-letter stream scan#shipmentId=sh-1@1"),
        "{out}"
    );
    assert!(
        out.contains(r#"payload {"kind":"at depot","shipmentId":"sh-1"}"#),
        "{out}"
    );
    let dead = store
        .read(&path("dead"), ReadFrom::Beginning, usize::MAX)
        .await
        .unwrap();
    assert_eq!(dead.messages.len(), 1);
    let record: serde_json::Value = serde_json::from_slice(&dead.messages[0]).unwrap();
    assert_eq!(record["error"]["code"], "stream/closed");
    assert_eq!(record["version"], 1);
    assert_eq!(record["payload"]["kind"], "at depot");
    // The row goes on: its next notice is parked in turn (still closed).
    let (out, _) = f
        .run_with(
            &["drain", "--projection", "shipments", "--key", SH1],
            &bridge,
        )
        .await;
    assert!(out.contains("parked at scan#shipmentId=sh-1@2"), "{out}");

    // Dropped, printed in full.
    let (out, result) = f
        .run(
            &["skip", "--projection", "shipments", "--key", SH1, "--drop"],
            false,
        )
        .await;
    result.unwrap();
    assert!(
        out.contains("skipped: dropped scan#shipmentId=sh-1@2"),
        "{out}"
    );
    assert!(out.contains("at truck"), "{out}");
    let (out, result) = f
        .run(
            &["skip", "--projection", "shipments", "--key", SH1, "--drop"],
            false,
        )
        .await;
    assert!(out.is_empty());
    assert!(
        matches!(result, Err(CliError::NotParked { .. })),
        "{result:?}"
    );
    let (out, result) = f.run(&["parked", "--projection", "shipments"], false).await;
    result.unwrap();
    assert_eq!(out.trim(), "no parked rows");
    assert!(
        App::try_parse_from(["freight", "skip", "--projection", "shipments", "--key", SH1])
            .is_err(),
        "skip says what becomes of the effect"
    );
}
