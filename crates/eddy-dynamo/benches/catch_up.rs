//! A long catch-up of one row (`cargo bench -p eddy-dynamo --bench
//! catch_up`): a freight shipment 1 000 weighings behind, each leaving
//! notices in the outbox (the first 50, the others one), applied by
//! `catch_up` on the embedded memory and SQLite tables. DynamoDB's limits
//! (100 items, 4 MB per transaction) split the row's write; the bench
//! prints the writes it took beside the fewest the limits allow, computed
//! from the notices, and fails if they differ. Throughput is in events per
//! second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_dynamo::{EmbeddedTable, Table};

#[path = "../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod freight;
#[path = "../tests/long_catch_up.rs"]
mod long_catch_up;

use freight::{shipment, Freight, OUTBOX_INDEX};

fn open(backend: &str, dir: &tempfile::TempDir) -> Arc<dyn Table> {
    let schema = freight::schema("freight");
    match backend {
        "memory" => Arc::new(EmbeddedTable::memory(schema)),
        _ => Arc::new(EmbeddedTable::open_sqlite(dir.path().join("t.db"), schema).expect("open")),
    }
}

/// A fresh table with the row behind, then the catch-up: its time and the
/// write requests (single writes + transactions) it made.
async fn catch_up(backend: &str) -> (Duration, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = open(backend, &dir);
    let f = Freight::new(Arc::clone(&table)).expect("freight");
    let p = long_catch_up::projection(&f, OUTBOX_INDEX);
    long_catch_up::fall_behind(&f, &p).await;
    let before = table.request_stats();
    let start = Instant::now();
    let out = p
        .catch_up(shipment(long_catch_up::SHIPMENT))
        .await
        .expect("catch-up");
    let elapsed = start.elapsed();
    assert!(out.is_applied(), "{:?}", out.first_failure());
    assert_eq!(out.instances[0].applied.len() as u64, long_catch_up::BEHIND);
    let used = table.request_stats() - before;
    (elapsed, used.writes + used.transactions)
}

fn bench_catch_up(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("catch_up");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(long_catch_up::BEHIND));
    let fewest = long_catch_up::fewest_writes();
    for backend in ["memory", "sqlite"] {
        // Once, outside the timing: the writes against the limits' fewest.
        let (_, writes) = rt.block_on(catch_up(backend));
        eprintln!(
            "catch_up {backend}: {} events, {} notices: {writes} writes, the fewest the limits allow {fewest}",
            long_catch_up::BEHIND,
            long_catch_up::notices_enqueued(),
        );
        assert_eq!(
            writes, fewest,
            "catch_up {backend} took {writes} writes where the limits allow {fewest}"
        );
        group.bench_function(
            format!(
                "{} events of one row, notices in the outbox, {backend}",
                long_catch_up::BEHIND
            ),
            |b| {
                b.iter_custom(|iterations| {
                    (0..iterations)
                        .map(|_| rt.block_on(catch_up(backend)).0)
                        .sum()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_catch_up);
criterion_main!(benches);
