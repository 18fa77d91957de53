//! The outbox's drain throughput, measured with criterion
//! (`cargo bench -p eddy-dynamo --bench outbox`): 10 000 pending effects
//! over 1 000 rows (10 per row, committed with their rows), delivered by
//! `drain_pending` to a consumer that accepts everything, on the embedded
//! memory and SQLite tables (durable commits). Throughput is in effects
//! per second. Each effect costs a head query, a claim and a delete.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_dynamo::{
    n, AppSchema, BoxError, Effect, EmbeddedTable, Entity, KeyComposite, Outbox, PendingEffect,
    Put, StreamId, Table, TableSchema, TableWrite,
};
use serde::{Deserialize, Serialize};

const ROWS: usize = 1_000;
const EFFECTS_PER_ROW: u64 = 10;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    id: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn schema() -> TableSchema {
    TableSchema::single_table("bench").with_index("gsi1", "gsi1pk", Some("gsi1sk"))
}

/// The read model and its outbox (items in the row's partition, listed by
/// the sparse index `gsi1`).
fn outbox(table: &EmbeddedTable) -> (Entity<Row>, Outbox) {
    let rows = Entity::new(
        Arc::new(table.clone()) as Arc<dyn Table>,
        AppSchema::new("bench", 1),
        "Row",
        KeyComposite::new(&["id"], &[]),
    );
    let outbox = Outbox::new(&rows)
        .and_then(|o| o.with_index("gsi1"))
        .expect("outbox");
    (rows, outbox)
}

/// Commits every row with its effects, one transaction per row.
async fn fill(table: &EmbeddedTable, rows: &Entity<Row>, outbox: &Outbox) {
    let writes = (0..ROWS).map(|i| async move {
        let id = format!("row-{i}");
        let mut item = rows.to_item(&Row { id: id.clone() }).expect("row");
        item.insert("revision".into(), n(1));
        let row_key = rows.key(&[id.as_str()]).expect("key");
        let effects: Vec<PendingEffect> = (1..=EFFECTS_PER_ROW)
            .map(|version| PendingEffect {
                source: "bench".into(),
                stream_id: StreamId::new([("id", id.as_str())]),
                version,
                payload: n(version),
            })
            .collect();
        let mut all = vec![TableWrite::new("bench", Put::new(item))];
        all.extend(outbox.commit_items(&row_key, 1, &effects).expect("effects"));
        table.transact_write_tables(all).await.expect("write");
    });
    futures::future::join_all(writes).await;
}

async fn accept(_: Effect) -> Result<(), BoxError> {
    Ok(())
}

fn drain_pending(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("drain_pending");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(ROWS as u64 * EFFECTS_PER_ROW));
    group.bench_function("memory", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let table = EmbeddedTable::memory(schema());
                let (rows, outbox) = outbox(&table);
                rt.block_on(fill(&table, &rows, &outbox));
                let start = Instant::now();
                let report = rt.block_on(outbox.drain_pending(&accept)).expect("drain");
                total += start.elapsed();
                assert_eq!(report.delivered, ROWS * EFFECTS_PER_ROW as usize);
            }
            total
        })
    });
    group.bench_function("sqlite", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let dir = tempfile::tempdir().expect("dir");
                let table = EmbeddedTable::open_sqlite(dir.path().join("bench.db"), schema())
                    .expect("open");
                let (rows, outbox) = outbox(&table);
                rt.block_on(fill(&table, &rows, &outbox));
                let start = Instant::now();
                let report = rt.block_on(outbox.drain_pending(&accept)).expect("drain");
                total += start.elapsed();
                assert_eq!(report.delivered, ROWS * EFFECTS_PER_ROW as usize);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, drain_pending);
criterion_main!(benches);
