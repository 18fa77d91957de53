//! The embedded table's cost shape, measured with criterion
//! (`cargo bench -p eddy-dynamo`):
//!
//! - `process_batch`: 1 000 change records over 100 rows, folded by a
//!   single-source projection, on memory and on SQLite (durable commits),
//!   as many rows at once as the table decides (the embedded table: the
//!   whole batch) and 16 at once (DynamoDB's default);
//!   throughput is in records per second. The CPU time per batch (every
//!   thread) is printed too: wall time on a busy machine says little.
//! - `query`: 100 items from a 100 000-item partition of the SQLite table,
//!   at its start and at its end (an end as cheap as the start proves the
//!   query does not scan the partition).
//! - `append`: one event appended to a stream of 10 events and to one of
//!   100 000 (the same cost proves the append does not read the stream).

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use eddy_dynamo::{
    make_stream, process_batch, s, AppSchema, BatchProjection, ChangeFeed, ChangeRecord,
    EmbeddedTable, Entity, EventStream, Item, KeyComposite, Projection, Put, Query, Table,
    TableSchema, TransactWriteItem,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Counted {
    Added { by: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Total {
    id: String,
    total: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TotalKey {
    id: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn app() -> AppSchema {
    AppSchema::new("bench", 1)
}

fn counted(table: &Arc<dyn Table>) -> EventStream<Counted> {
    make_stream(Arc::clone(table), app(), "Counted", &["id"]).expect("stream")
}

fn totals(
    table: &Arc<dyn Table>,
    rows_at_once: Option<usize>,
) -> Projection<Counted, Total, TotalKey> {
    let entity = Entity::new(
        Arc::clone(table),
        app(),
        "Total",
        KeyComposite::new(&["id"], &[]),
    );
    let builder = Projection::builder("totals", entity, counted(table))
        .key(|id, _| id.get("id").map(|id| TotalKey { id: id.to_owned() }))
        .initial(|key: &TotalKey| Total {
            id: key.id.clone(),
            total: 0,
        })
        .evolve(|mut row, event| {
            let Counted::Added { by } = event.event;
            row.total += by;
            Ok(row)
        });
    match rows_at_once {
        Some(rows) => builder.concurrency(rows),
        None => builder,
    }
    .build()
    .expect("projection")
}

/// A fresh table holding 100 streams of 10 events, and its 1 000 records.
async fn seeded(table: EmbeddedTable) -> (Arc<dyn Table>, Vec<ChangeRecord>) {
    let shared: Arc<dyn Table> = Arc::new(table.clone());
    let stream = counted(&shared);
    for row in 0..100 {
        let id = stream.id([("id", format!("r-{row}"))]).expect("id");
        let events = vec![Counted::Added { by: 1 }; 10];
        stream.append(&id, &events, 0).await.expect("append");
    }
    let records = table
        .read_changes(None, 10_000)
        .await
        .expect("records")
        .into_records();
    assert_eq!(records.len(), 1_000);
    (shared, records)
}

fn bench_process_batch(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("process_batch");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(1_000));
    // The table's default rows at once (the embedded table's: the whole
    // batch, fewer and larger group commits on SQLite), and DynamoDB's
    // default of 16 set explicitly.
    for (backend, rows_at_once) in [
        ("memory", None),
        ("memory", Some(16)),
        ("sqlite", None),
        ("sqlite", Some(16)),
    ] {
        let name = match rows_at_once {
            None => format!("1000 records over 100 rows, {backend}"),
            Some(n) => format!("1000 records over 100 rows, {backend}, {n} rows at once"),
        };
        // CPU time of every thread of the process during the batches, and
        // how many batches: wall time on a loaded machine says little.
        let mut cpu = (Duration::ZERO, 0u32);
        group.bench_function(&name, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let schema = TableSchema::single_table("bench");
                    let table = match backend {
                        "memory" => EmbeddedTable::memory(schema),
                        _ => EmbeddedTable::open_sqlite(dir.path().join("t.db"), schema)
                            .expect("open"),
                    };
                    let (shared, records) = rt.block_on(seeded(table));
                    let projection = totals(&shared, rows_at_once);
                    let (start, cpu_start) = (Instant::now(), process_cpu());
                    let result = rt.block_on(process_batch(
                        &records,
                        &[&projection as &dyn BatchProjection],
                    ));
                    total += start.elapsed();
                    cpu.0 += process_cpu().saturating_sub(cpu_start);
                    cpu.1 += 1;
                    assert!(result.failures.is_empty() && result.rows.len() == 100);
                }
                total
            })
        });
        if cpu.1 > 0 {
            let per_batch = cpu.0 / cpu.1;
            eprintln!(
                "process_batch/{name}: {:.2} ms CPU per batch over {} batches ({:.0} records per CPU-second)",
                per_batch.as_secs_f64() * 1e3,
                cpu.1,
                1_000.0 / per_batch.as_secs_f64().max(1e-9)
            );
        }
    }
    group.finish();
}

/// The CPU time every thread of this process has run so far (Linux:
/// `/proc/self/task/*/schedstat`; zero elsewhere).
fn process_cpu() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

fn item(i: usize) -> Item {
    Item::from([
        ("pk".to_owned(), s("partition")),
        ("sk".to_owned(), s(format!("item#{i:06}"))),
        ("payload".to_owned(), s("x".repeat(100))),
    ])
}

fn bench_query(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    // Seeded on first use, so a filter that skips these benches skips it.
    let seeded = OnceCell::new();
    let table = || {
        seeded.get_or_init(|| {
            let table =
                EmbeddedTable::open_sqlite(dir.path().join("q.db"), TableSchema::single_table("q"))
                    .expect("open");
            rt.block_on(async {
                for chunk in (0..100_000).collect::<Vec<_>>().chunks(100) {
                    let puts: Vec<TransactWriteItem> =
                        chunk.iter().map(|i| Put::new(item(*i)).into()).collect();
                    table.transact_write_items(puts).await.expect("seed");
                }
            });
            table
        })
    };
    let mut group = c.benchmark_group("query 100 of a 100 000-item partition, sqlite");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let start_key = |i: usize| {
        let mut key = item(i);
        key.remove("payload");
        key
    };
    for (name, start) in [("start", None), ("end", Some(start_key(99_899)))] {
        group.bench_function(name, |b| {
            let table = table();
            b.iter(|| {
                let query = Query::partition(s("partition"))
                    .limit(100)
                    .start_after(start.clone());
                let page = rt.block_on(table.query(query)).expect("query");
                assert_eq!(page.items.len(), 100);
            })
        });
    }
    group.finish();
}

fn bench_append(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let table: Arc<dyn Table> = Arc::new(
        EmbeddedTable::open_sqlite(dir.path().join("a.db"), TableSchema::single_table("a"))
            .expect("open"),
    );
    let stream = counted(&table);
    let mut group = c.benchmark_group("append one event, sqlite");
    group.sample_size(20);
    for length in [10u64, 100_000] {
        let id = stream.id([("id", format!("len-{length}"))]).expect("id");
        let mut version = 0;
        group.bench_function(format!("to a stream of {length}"), |b| {
            // Seeded on first use, so a filter that skips it skips this.
            rt.block_on(async {
                while version < length {
                    let n = (length - version).min(99) as usize;
                    let events = vec![Counted::Added { by: 1 }; n];
                    version = stream.append(&id, &events, version).await.expect("seed");
                }
            });
            b.iter_batched(
                || (),
                |()| {
                    version = rt
                        .block_on(stream.append(&id, &[Counted::Added { by: 1 }], version))
                        .expect("append");
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_process_batch, bench_query, bench_append);
criterion_main!(benches);
