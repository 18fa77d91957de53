//! The freight fold through `process_batch` (`cargo bench -p eddy-dynamo
//! --bench freight`): three sources (orders, scans, weighings) feeding 100
//! shipment rows, 1 000 change records delivered in batches of 100, on the
//! embedded memory and SQLite tables. Throughput is in records per second;
//! the write requests per batch are printed once per backend (target: one
//! write per touched row, plus outbox items in the same transaction).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_dynamo::{
    process_batch, BatchProjection, ChangeFeed, ChangeRecord, EmbeddedTable, StreamId, Table,
    TableSchema,
};

#[path = "../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod freight;

use freight::{Freight, OrderEvent, ScanEvent, WeighEvent};

const SHIPMENTS: usize = 100;
const BATCH: usize = 100;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Appends, per shipment, 4 order events (one order feeds two shipments),
/// 3 scans and 3 weighings (one of them a tare): 1 000 records.
async fn seed(f: &Freight) -> usize {
    let mut appended = 0;
    for s in 0..SHIPMENTS {
        let shipment_id = format!("sh-{s}");
        let order: StreamId = f
            .orders
            .id([("orderId", format!("o-{}", s / 2))])
            .expect("id");
        let at = f.orders.current_version(&order).await.expect("version");
        let parcels: Vec<OrderEvent> = (0..4)
            .map(|p| OrderEvent::ParcelAdded {
                shipment_id: shipment_id.clone(),
                parcels: p + 1,
            })
            .collect();
        f.orders.append(&order, &parcels, at).await.expect("orders");
        let scan = f
            .scans
            .id([("shipmentId", shipment_id.clone())])
            .expect("id");
        let scans: Vec<ScanEvent> = ["A", "B", "C"]
            .iter()
            .map(|l| ScanEvent::Scanned {
                location: (*l).into(),
            })
            .collect();
        f.scans.append(&scan, &scans, 0).await.expect("scans");
        let session = f
            .weighings
            .id([("sessionId", format!("w-{s}"))])
            .expect("id");
        let weighings: Vec<WeighEvent> = [0, 5, 7]
            .iter()
            .map(|kg| WeighEvent::Weighed {
                shipment_id: shipment_id.clone(),
                kg: *kg,
            })
            .collect();
        f.weighings
            .append(&session, &weighings, 0)
            .await
            .expect("weighings");
        appended += 10;
    }
    appended
}

async fn seeded(table: EmbeddedTable) -> (Arc<dyn Table>, Vec<ChangeRecord>) {
    let shared: Arc<dyn Table> = Arc::new(table.clone());
    let f = Freight::new(Arc::clone(&shared)).expect("freight");
    let appended = seed(&f).await;
    let records = table
        .read_changes(None, 100_000)
        .await
        .expect("records")
        .into_records();
    assert_eq!(records.len(), appended);
    (shared, records)
}

fn open(backend: &str, dir: &tempfile::TempDir) -> EmbeddedTable {
    let schema = TableSchema::single_table("freight");
    match backend {
        "memory" => EmbeddedTable::memory(schema),
        _ => EmbeddedTable::open_sqlite(dir.path().join("t.db"), schema).expect("open"),
    }
}

/// Folds `records` in batches; returns the time taken and the write
/// requests (single writes + transactions) made.
async fn fold(table: &Arc<dyn Table>, records: &[ChangeRecord]) -> (Duration, u64, usize) {
    let f = Freight::new(Arc::clone(table)).expect("freight");
    let shipments = f.projection(None).expect("projection");
    let projections: [&dyn BatchProjection; 1] = [&shipments];
    let before = table.request_stats();
    let (mut rows, start) = (0, Instant::now());
    for batch in records.chunks(BATCH) {
        let result = process_batch(batch, &projections).await;
        assert!(result.failures.is_empty(), "{:?}", result.failures.first());
        rows += result.rows.iter().filter(|r| r.written).count();
    }
    let elapsed = start.elapsed();
    let used = table.request_stats() - before;
    (elapsed, used.writes + used.transactions, rows)
}

fn bench_freight(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("freight process_batch");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(1_000));
    for backend in ["memory", "sqlite"] {
        // Once, outside the timing: the write requests per batch.
        let dir = tempfile::tempdir().expect("tempdir");
        let (table, records) = rt.block_on(seeded(open(backend, &dir)));
        let (_, writes, rows) = rt.block_on(fold(&table, &records));
        let batches = records.len().div_ceil(BATCH);
        eprintln!(
            "freight {backend}: {} records in {batches} batches of {BATCH}: {writes} write requests for {rows} written rows ({:.1} per batch)",
            records.len(),
            writes as f64 / batches as f64
        );
        group.bench_function(
            format!("1000 records, 3 sources, 100 rows, batches of 100, {backend}"),
            |b| {
                b.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let dir = tempfile::tempdir().expect("tempdir");
                        let (table, records) = rt.block_on(seeded(open(backend, &dir)));
                        total += rt.block_on(fold(&table, &records)).0;
                    }
                    total
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_freight);
criterion_main!(benches);
