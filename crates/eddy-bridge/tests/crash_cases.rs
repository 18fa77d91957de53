//! The deliverer killed with SIGKILL at random in every lifecycle case of
//! a row (issue 33, part 2): while the test revives rows after their
//! tombstones expired and rebuilds them; while two projections deliver
//! into one stream; while permanent failures are dead-lettered or parked.
//! Every effect ends up in its stream (or the dead-letter stream) once,
//! each row's in order. The deliverer is this binary's `crash::deliverer`
//! with a case name; the table is an embedded table in a SQLite file, the
//! streams a SQLite store, both shared with the test process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use eddy_bridge::{Route, StreamDelivery};
use eddy_dynamo::{BoxError, Deliver, Effect, EmbeddedTable, PendingReport};
use eddy_streams::{Append, Payload, SqliteStorage, Storage, StreamConfig, StreamPath};
use futures::future::BoxFuture;

use crate::crash::Deliverer;
use crate::orders::{added, cancelled, kinds, notices, schema, Orders};

/// The projections of a case (read model, name), where their notices go,
/// and the dead-letter stream that takes permanent failures, if any.
struct Case {
    projections: &'static [(&'static str, &'static str)],
    by_row: bool,
    dead_letter: bool,
}

fn case(name: &str) -> Case {
    match name {
        "two" => Case {
            projections: &[("SummaryA", "shipments"), ("SummaryB", "audit")],
            by_row: false,
            dead_letter: false,
        },
        "dead" => Case {
            projections: &[("ShipmentSummary", "shipments")],
            by_row: true,
            dead_letter: true,
        },
        "park" => Case {
            projections: &[("ShipmentSummary", "shipments")],
            by_row: true,
            dead_letter: false,
        },
        _ => Case {
            projections: &[("ShipmentSummary", "shipments")],
            by_row: false,
            dead_letter: false,
        },
    }
}

fn path(p: &str) -> StreamPath {
    StreamPath::new(p).expect("path")
}

/// The delivery of projection `name` in `case`.
fn delivery(case: &Case, store: Arc<dyn Storage>, name: &str) -> StreamDelivery {
    let route = if case.by_row {
        Route::by(|effect: &Effect| {
            let notice: serde_json::Value = effect.decode()?;
            let shipment = notice["shipmentId"].as_str().unwrap_or_default();
            StreamPath::new(format!("rows/{shipment}")).map_err(BoxError::from)
        })
    } else {
        Route::Projection(path("notices"))
    };
    let delivery = StreamDelivery::new(store, route, name)
        .expect("delivery")
        .skip_to(path("dead"));
    if case.dead_letter {
        delivery.dead_letter(path("dead"))
    } else {
        delivery
    }
}

/// Says `delivered` once the bridge took an effect.
struct Announce(StreamDelivery);

impl Deliver for Announce {
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivering = self.0.deliver(effect);
        Box::pin(async move {
            delivering.await?;
            println!("delivered");
            Ok(())
        })
    }

    fn pass_done<'a>(&'a self, report: &'a PendingReport) -> BoxFuture<'a, ()> {
        self.0.pass_done(report)
    }
}

/// The deliverer of `case`: drains every projection's outbox until killed.
pub async fn run(name: &str, table_file: &str, streams: &str) -> Result<(), BoxError> {
    let table = EmbeddedTable::open_sqlite(table_file, schema())?;
    let store: Arc<dyn Storage> = Arc::new(SqliteStorage::open(streams)?);
    let case = case(name);
    let mut loops = Vec::new();
    for (read_model, projection) in case.projections {
        let orders = Orders::new(&table, read_model, projection);
        let deliver = Announce(delivery(&case, Arc::clone(&store), projection));
        loops.push(async move {
            eddy_bridge::run_until(
                &orders.outbox,
                &deliver,
                Duration::from_millis(10),
                |_| {},
                std::future::pending(),
            )
            .await
        });
    }
    futures::future::try_join_all(loops).await?;
    Ok(())
}

/// A crash test's files and the test's own view of the table.
struct Setup {
    _dir: tempfile::TempDir,
    table_file: String,
    streams: String,
    table: EmbeddedTable,
    runtime: tokio::runtime::Runtime,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let table_file = dir.path().join("table.db").to_string_lossy().into_owned();
    let streams = dir.path().join("streams").to_string_lossy().into_owned();
    let table = EmbeddedTable::open_sqlite(&table_file, schema()).expect("table");
    Setup {
        _dir: dir,
        table_file,
        streams,
        table,
        runtime: tokio::runtime::Runtime::new().expect("runtime"),
    }
}

/// What each shipment's notices must be, in order, as the test makes
/// them.
#[derive(Default)]
struct Expected(BTreeMap<String, Vec<String>>);

impl Expected {
    /// Appends `events` to order `order` of `orders`, applies them with
    /// every projection in `all`, and expects their notices.
    async fn apply(&mut self, all: &[&Orders], order: &str, events: &[crate::model::OrderEvent]) {
        let items = all[0].append(order, events).await;
        for (event, item) in events.iter().zip(&items) {
            let shipment = crate::model::order_shipment(event).shipment_id;
            let kind = match event {
                crate::model::OrderEvent::ParcelAdded { .. } => "ParcelAdded",
                crate::model::OrderEvent::OrderCancelled { .. } => "OrderCancelled",
            };
            self.0
                .entry(shipment)
                .or_default()
                .push(format!("{kind} orderId={order}@{}", item.version));
        }
        for orders in all {
            orders.apply(items.clone()).await;
        }
    }
}

/// Revivals and rebuilds under kills: each shipment's order adds parcels
/// every round; every tenth round it is cancelled, the tombstones expire
/// (the embedded table's TTL sweep), and a new order starts the row again
/// at revision 1; every seventh round the row is rebuilt from its current
/// order. Every notice is in the stream once, in order.
#[test]
fn sigkill_during_revivals_and_rebuilds_delivers_each_notice_once_in_order() {
    const SHIPMENTS: usize = 4;
    const ROUNDS: usize = 40;
    let s = setup();
    let orders = Orders::new(&s.table, "ShipmentSummary", "shipments");
    let mut expected = Expected::default();
    let mut deliverer = Deliverer::start("orders", &s.table_file, &s.streams, 10);
    let mut generation = [0usize; SHIPMENTS];
    for round in 0..ROUNDS {
        s.runtime.block_on(async {
            for (n, generation) in generation.iter_mut().enumerate() {
                let shipment = format!("sh-{n}");
                let order = format!("o-{n}-{generation}");
                expected
                    .apply(&[&orders], &order, &[added(&shipment, 1)])
                    .await;
                if round % 7 == 3 {
                    orders.rebuild(&shipment, &[&order]).await;
                }
                if round % 10 == 9 {
                    expected
                        .apply(&[&orders], &order, &[cancelled(&shipment)])
                        .await;
                    *generation += 1;
                }
            }
        });
        if round % 10 == 9 {
            // A tombstone outlives its row's pending effects (its TTL is
            // chosen longer than any delivery lag): the sweep runs once the
            // deliverer has caught up.
            let outbox = orders.outbox.clone();
            let caught_up = deliverer.wait_until(&s.runtime, async || {
                outbox.pending_rows().await.expect("pending").is_empty()
            });
            assert!(caught_up, "the deliverer did not catch up in 30 s");
            s.runtime
                .block_on(s.table.expire_items(u64::MAX / 2))
                .expect("sweep");
        }
        deliverer.maybe_kill();
    }
    let outbox = orders.outbox.clone();
    let drained = deliverer.settle(&s.runtime, async || {
        outbox.pending_rows().await.expect("pending").is_empty()
    });
    assert!(drained, "the outbox was not drained in 30 s");
    let store = SqliteStorage::open(&s.streams).expect("streams");
    let all = s.runtime.block_on(notices(&store, "notices"));
    for (shipment, want) in &expected.0 {
        assert_eq!(&kinds(&all, "shipments", shipment), want, "{shipment}");
    }
    let total: usize = expected.0.values().map(Vec::len).sum();
    assert_eq!(all.len(), total, "nothing else, nothing twice");
}

/// Two projections into one stream under kills: each one's notices once,
/// in order.
#[test]
fn sigkill_while_two_projections_share_a_stream_delivers_each_notice_once() {
    const SHIPMENTS: usize = 3;
    const ROUNDS: usize = 30;
    let s = setup();
    let a = Orders::new(&s.table, "SummaryA", "shipments");
    let b = Orders::new(&s.table, "SummaryB", "audit");
    let mut expected = Expected::default();
    let mut deliverer = Deliverer::start("two", &s.table_file, &s.streams, 10);
    for _ in 0..ROUNDS {
        s.runtime.block_on(async {
            for n in 0..SHIPMENTS {
                let event = added(&format!("sh-{n}"), 1);
                expected.apply(&[&a, &b], &format!("o-{n}"), &[event]).await;
            }
        });
        deliverer.maybe_kill();
    }
    let (outbox_a, outbox_b) = (a.outbox.clone(), b.outbox.clone());
    let drained = deliverer.settle(&s.runtime, async || {
        outbox_a.pending_rows().await.expect("pending").is_empty()
            && outbox_b.pending_rows().await.expect("pending").is_empty()
    });
    assert!(drained, "the outboxes were not drained in 30 s");
    let store = SqliteStorage::open(&s.streams).expect("streams");
    let all = s.runtime.block_on(notices(&store, "notices"));
    for by in ["shipments", "audit"] {
        for (shipment, want) in &expected.0 {
            assert_eq!(&kinds(&all, by, shipment), want, "{by}: {shipment}");
        }
    }
    let total: usize = expected.0.values().map(Vec::len).sum();
    assert_eq!(all.len(), 2 * total, "nothing else, nothing twice");
}

/// Closes `rows/sh-0` before the deliverer starts: every notice of
/// shipment sh-0 fails for good.
fn close_sh0(s: &Setup) {
    let store = SqliteStorage::open(&s.streams).expect("streams");
    s.runtime.block_on(async {
        let target = path("rows/sh-0");
        store
            .create(&target, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store
            .append(&target, Append::close_only())
            .await
            .expect("close");
    });
}

/// Every shipment's notices, one order each, `ROUNDS` rounds.
fn load(s: &Setup, orders: &Orders, deliverer: &mut Deliverer) -> Expected {
    const SHIPMENTS: usize = 3;
    const ROUNDS: usize = 25;
    let mut expected = Expected::default();
    for _ in 0..ROUNDS {
        s.runtime.block_on(async {
            for n in 0..SHIPMENTS {
                let event = added(&format!("sh-{n}"), 1);
                expected.apply(&[orders], &format!("o-{n}"), &[event]).await;
            }
        });
        deliverer.maybe_kill();
    }
    expected
}

/// The kinds of the dead-letter records of `shipment`, in order.
fn dead_kinds(dead: &[serde_json::Value], shipment: &str) -> Vec<String> {
    dead.iter()
        .filter(|d| d["payload"]["shipmentId"] == shipment)
        .filter_map(|d| d["payload"]["kind"].as_str().map(str::to_owned))
        .collect()
}

/// Dead letters under kills: a kill between the dead-letter append and
/// the outbox's delete redelivers the effect, which the dead-letter
/// stream takes once. sh-0's notices are all there once, in order, the
/// other rows' in their streams.
#[test]
fn sigkill_while_dead_lettering_records_each_failure_once() {
    let s = setup();
    close_sh0(&s);
    let orders = Orders::new(&s.table, "ShipmentSummary", "shipments");
    let mut deliverer = Deliverer::start("dead", &s.table_file, &s.streams, 10);
    let expected = load(&s, &orders, &mut deliverer);
    let outbox = orders.outbox.clone();
    let drained = deliverer.settle(&s.runtime, async || {
        outbox.pending_rows().await.expect("pending").is_empty()
    });
    assert!(drained, "the outbox was not drained in 30 s");
    let store = SqliteStorage::open(&s.streams).expect("streams");
    s.runtime.block_on(async {
        let dead = notices(&store, "dead").await;
        assert_eq!(dead_kinds(&dead, "sh-0"), expected.0["sh-0"]);
        assert_eq!(dead.len(), expected.0["sh-0"].len(), "nothing twice");
        assert!(dead.iter().all(|d| d["error"]["code"] == "stream/closed"));
        for shipment in ["sh-1", "sh-2"] {
            let delivered = notices(&store, &format!("rows/{shipment}")).await;
            assert_eq!(
                &kinds(&delivered, "shipments", shipment),
                &expected.0[shipment]
            );
        }
    });
}

/// Parked under kills: sh-0 ends parked at its first notice (a kill
/// mid-delivery leaves a claim that expires, and the next try parks it),
/// its other notices held back, the other rows delivered; then skipped to
/// the dead-letter stream one parked head at a time (twice each, as after
/// a crash before the drop): every sh-0 notice there once, in order.
#[test]
fn sigkill_while_parking_leaves_the_row_parked_then_skipped_once() {
    let s = setup();
    close_sh0(&s);
    let orders = Orders::new(&s.table, "ShipmentSummary", "shipments");
    let mut deliverer = Deliverer::start("park", &s.table_file, &s.streams, 10);
    let expected = load(&s, &orders, &mut deliverer);
    let outbox = orders.outbox.clone();
    let settled = deliverer.settle(&s.runtime, async || {
        let rows = outbox.pending_rows().await.expect("pending");
        rows.len() == 1 && rows[0].is_parked()
    });
    assert!(settled, "the other rows were not drained in 30 s");
    let store: Arc<dyn Storage> = Arc::new(SqliteStorage::open(&s.streams).expect("streams"));
    s.runtime.block_on(async {
        for shipment in ["sh-1", "sh-2"] {
            let delivered = notices(&*store, &format!("rows/{shipment}")).await;
            assert_eq!(
                &kinds(&delivered, "shipments", shipment),
                &expected.0[shipment]
            );
        }
        let rows = orders.outbox.pending_rows().await.expect("pending");
        assert_eq!(rows[0].effects, expected.0["sh-0"].len());
        let skip = delivery(&case("park"), Arc::clone(&store), "shipments");
        let row = rows[0].row.clone();
        loop {
            let report = orders.outbox.drain(&row, &skip).await.expect("drain");
            let Some(parked) = report.parked else { break };
            for _ in 0..2 {
                skip.dead_letter_effect(&parked.effect, &parked.failure)
                    .await
                    .expect("dead letter");
            }
            assert!(orders
                .outbox
                .drop_parked(&row, &parked.effect)
                .await
                .expect("drop"));
        }
        let dead = notices(&*store, "dead").await;
        assert_eq!(dead_kinds(&dead, "sh-0"), expected.0["sh-0"]);
        assert_eq!(dead.len(), expected.0["sh-0"].len(), "nothing twice");
        assert!(orders
            .outbox
            .pending_rows()
            .await
            .expect("pending")
            .is_empty());
    });
}
