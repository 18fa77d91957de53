//! eddy-dynamo's metrics: a batch moves the record, partial-failure,
//! conflict and outbox series by exactly what happened, the backlog gauges
//! follow `pending_rows`, and the page parses as the Prometheus text
//! format with help text for every family.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use eddy_dynamo::{
    get_str, process_batch_delivering, BatchProjection, BoxError, ChangeFeed, Effect, Item, Outbox,
    Put, Query, QueryPage, Table, TableError, TransactWriteItem,
};
use futures::future::BoxFuture;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use prometheus_parse::{Scrape, Value};

use crate::freight::{shipment, Freight};
use crate::multi::{append, parcels, scan_id, scanned};

/// The memory table, where the first put of a summary row loses a race
/// (a failed condition, as if another writer had just written it).
struct LoseOnce {
    table: Arc<dyn Table>,
    lost: AtomicBool,
}

#[async_trait::async_trait]
impl Table for LoseOnce {
    fn schema(&self) -> &eddy_dynamo::TableSchema {
        self.table.schema()
    }
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        self.table.query(query).await
    }
    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        self.table.transact_write_items(items).await
    }
    async fn transact_write_tables(
        &self,
        items: Vec<eddy_dynamo::TableWrite>,
    ) -> Result<(), TableError> {
        self.table.transact_write_tables(items).await
    }
    async fn put_item(&self, put: Put) -> Result<(), TableError> {
        let summary = get_str(&put.item, "__edd_e__") == Some("ShipmentSummary");
        if summary && !self.lost.swap(true, Ordering::SeqCst) {
            return Err(TableError::ConditionalCheckFailed { item: None });
        }
        self.table.put_item(put).await
    }
}

fn scrape(handle: &PrometheusHandle) -> Scrape {
    let page = handle.render();
    Scrape::parse(page.lines().map(|line| Ok(line.to_owned()))).expect("a Prometheus text page")
}

/// The sum of the samples of `name` whose labels include `labels`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a counter or gauge: {other:?}"),
        })
        .sum()
}

#[test]
fn batches_conflicts_and_the_outbox_move_their_series() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // A current-thread runtime keeps every task on this thread, where the
    // local recorder is installed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        eddy_dynamo::describe_metrics();
        runtime.block_on(batches(&handle));
    });
    let scrape = scrape(&handle);
    for family in [
        "eddy_dynamo_records_total",
        "eddy_dynamo_partial_batch_failures_total",
        "eddy_dynamo_write_conflicts_total",
        "eddy_dynamo_outbox_enqueued_total",
        "eddy_dynamo_outbox_delivered_total",
        "eddy_dynamo_outbox_delivery_failures_total",
        "eddy_dynamo_outbox_pending_effects",
        "eddy_dynamo_outbox_oldest_pending_age_seconds",
    ] {
        let help = scrape.docs.get(family).map_or("", String::as_str);
        assert!(help.len() > 20, "no help text for {family}");
    }
}

async fn batches(handle: &PrometheusHandle) {
    let t = crate::common::table();
    let table: Arc<dyn Table> = Arc::new(LoseOnce {
        table: t.table.clone(),
        lost: AtomicBool::new(false),
    });
    let f = Freight::new(table).unwrap();
    let clock = Arc::new(AtomicU64::new(1_000));
    let now = clock.clone();
    let outbox = Outbox::new(&f.summaries)
        .and_then(|o| o.with_index("gsi1"))
        .unwrap()
        .with_clock(move || now.load(Ordering::SeqCst));
    let projection = f.projection(Some(Arc::new(outbox.clone()))).unwrap();
    let projections: [&dyn BatchProjection; 1] = [&projection];
    let down = Arc::new(AtomicBool::new(false));
    let deliver = {
        let down = down.clone();
        move |_: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
            let down = down.load(Ordering::SeqCst);
            Box::pin(async move {
                match down {
                    true => Err("the consumer is down".into()),
                    false => Ok(()),
                }
            })
        }
    };

    // Two scans of sh-1, parcels for sh-2, and an event no source decodes.
    append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
    append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("truck")]).await;
    let o = crate::multi::order_id(&f, "o-1");
    append(&f.orders, &o, &[parcels("sh-2", 1)]).await;
    let other: eddy_dynamo::EventStream<Teleport> = eddy_dynamo::make_stream(
        t.table.clone(),
        crate::freight::app(),
        "Scan",
        &["shipmentId"],
    )
    .unwrap();
    append(&other, &scan_id(&f, "sh-9"), &[Teleport::Teleported]).await;
    let records = t.read_changes(None, 100).await.unwrap().into_records();
    assert_eq!(records.len(), 4);
    let result = process_batch_delivering(&records, &projections, &deliver).await;
    assert_eq!(result.failures.len(), 1, "{:?}", result.failures);

    let page = scrape(handle);
    let records_of = |outcome| value(&page, "eddy_dynamo_records_total", &[("outcome", outcome)]);
    assert_eq!(
        (
            records_of("applied"),
            records_of("failed"),
            records_of("ignored")
        ),
        (3.0, 1.0, 0.0)
    );
    assert_eq!(
        value(&page, "eddy_dynamo_partial_batch_failures_total", &[]),
        1.0
    );
    let conflicts = value(
        &page,
        "eddy_dynamo_write_conflicts_total",
        &[("projection", "shipments")],
    );
    assert_eq!(conflicts, 1.0, "the lost race is counted, and retried");
    let summary = [("read_model", "ShipmentSummary")];
    // Latest mode: one notice for sh-1's two scans in one batch.
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_enqueued_total", &summary),
        1.0
    );
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_delivered_total", &summary),
        1.0
    );

    // The consumer goes down: a delivery fails, the notice waits.
    down.store(true, Ordering::SeqCst);
    let next = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("door")]).await;
    let out = projection
        .apply_batch_delivering(next, &deliver)
        .await
        .unwrap();
    assert!(out[0].undelivered().is_some());
    clock.store(6_500, Ordering::SeqCst);
    let waiting = projection.pending_rows().await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        waiting[0].head_age,
        Some(std::time::Duration::from_millis(5_500))
    );
    let page = scrape(handle);
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_enqueued_total", &summary),
        2.0
    );
    assert_eq!(
        value(
            &page,
            "eddy_dynamo_outbox_delivery_failures_total",
            &summary
        ),
        1.0
    );
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_pending_effects", &summary),
        1.0
    );
    assert_eq!(
        value(
            &page,
            "eddy_dynamo_outbox_oldest_pending_age_seconds",
            &summary
        ),
        5.5
    );

    down.store(false, Ordering::SeqCst);
    projection.drain(&shipment("sh-1"), &deliver).await.unwrap();
    projection.pending_rows().await.unwrap();
    let page = scrape(handle);
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_delivered_total", &summary),
        2.0
    );
    assert_eq!(
        value(&page, "eddy_dynamo_outbox_pending_effects", &summary),
        0.0
    );
    assert_eq!(
        value(
            &page,
            "eddy_dynamo_outbox_oldest_pending_age_seconds",
            &summary
        ),
        0.0
    );
}

/// An event type the scan source does not know.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Teleport {
    Teleported,
}
