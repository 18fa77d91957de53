//! Throughput of `fold` (checkpoint per unit of 1 000 items) and of `emit`
//! with one JSON output (producer commit), on memory and SQLite, and of
//! `process` with `Commit::transaction` inserting each unit's rows into a
//! table in the unit's transaction on SQLite; with the feature `postgres`
//! and `DATABASE_URL` set, also `fold` and the transaction on PostgreSQL.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_projection::{Commit, Declare, Host, RunOptions, SqliteHost};
use eddy_streams::rusqlite::Transaction;
use eddy_streams::{JsonStream, MemoryStorage, SqliteStorage, Storage, StreamError};
use serde::{Deserialize, Serialize};

const ITEMS: usize = 200_000;
const UNIT: usize = 1_000;

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Order {
    id: u64,
    amount: f64,
}

static VERSION: AtomicU32 = AtomicU32::new(1);

fn orders() -> JsonStream<Order> {
    JsonStream::new("Bench/Orders", "orders").expect("route")
}

async fn seed(store: &dyn Storage) {
    orders().create(store, &()).await.expect("create");
    let all: Vec<Order> = (0..ITEMS as u64)
        .map(|id| Order { id, amount: 1.5 })
        .collect();
    for chunk in all.chunks(10_000) {
        orders().append(store, &(), chunk).await.expect("append");
    }
}

async fn fold_once(host: &Host) -> Duration {
    let version = VERSION.fetch_add(1, Ordering::Relaxed);
    let declare = Declare::<()>::new("bench-fold").with_version(version);
    let input = declare.input("orders", &orders());
    let bound = declare
        .fold(0.0)
        .on(input, |sum: f64, entry, _| sum + entry.item.amount)
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let start = Instant::now();
    let progress = host
        .run(&bound, RunOptions::default().with_unit_size(UNIT))
        .await
        .expect("run");
    assert_eq!(progress.items, ITEMS as u64);
    start.elapsed()
}

async fn emit_once(host: &Host) -> Duration {
    let version = VERSION.fetch_add(1, Ordering::Relaxed);
    let out =
        JsonStream::<f64>::new("Bench/Amounts", &format!("amounts-{version}")).expect("route");
    let declare = Declare::<()>::new("bench-emit").with_version(version);
    let input = declare.input("orders", &orders());
    let amounts = declare.output("amounts", &out);
    let bound = declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(amounts, entry.item.amount)
        })
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let start = Instant::now();
    host.run(&bound, RunOptions::default().with_unit_size(UNIT))
        .await
        .expect("run");
    start.elapsed()
}

/// A `process` on SQLite that inserts each unit's orders into
/// `bench_rows` (one cached statement, a row at a time) in the unit's
/// transaction.
async fn transaction_sqlite_once(host: &SqliteHost) -> Duration {
    let version = VERSION.fetch_add(1, Ordering::Relaxed);
    let declare = Declare::<()>::new("bench-rows").with_version(version);
    let input = declare.input("orders", &orders());
    let bound = declare
        .process_sqlite(Commit::transaction(), move |tx: &Transaction<'_>, work| {
            let mut insert =
                tx.prepare_cached("INSERT INTO bench_rows (id, amount) VALUES (?1, ?2)")?;
            for order in work.batch.items(input) {
                insert.execute((order.id as i64, order.amount))?;
            }
            Ok(())
        })
        .expect("declare")
        .at(())
        .expect("bind");
    let start = Instant::now();
    let progress = host
        .run(&bound, RunOptions::default().with_unit_size(UNIT))
        .await
        .expect("run");
    assert_eq!(progress.items, ITEMS as u64);
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Arc::new(SqliteStorage::open(dir.path()).expect("sqlite"));
    let backends: Vec<(&str, Arc<dyn Storage>)> = vec![
        ("memory", Arc::new(MemoryStorage::new())),
        ("sqlite", sqlite.clone()),
    ];
    let mut group = c.benchmark_group("projection");
    group.throughput(Throughput::Elements(ITEMS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for (name, store) in backends {
        runtime.block_on(seed(store.as_ref()));
        let host = Host::new(store);
        group.bench_function(format!("fold/{name}"), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let host = host.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += fold_once(&host).await;
                    }
                    total
                }
            })
        });
        group.bench_function(format!("emit/{name}"), |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let host = host.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += emit_once(&host).await;
                    }
                    total
                }
            })
        });
    }
    runtime.block_on(async {
        sqlite
            .transaction(|tx| {
                tx.sql().execute_batch(
                    "CREATE TABLE bench_rows (id INTEGER NOT NULL, amount REAL NOT NULL)",
                )?;
                Ok::<_, StreamError>(())
            })
            .await
            .expect("create bench_rows");
    });
    let host = SqliteHost::new(sqlite);
    group.bench_function("transaction/sqlite", |b| {
        timed(b, &runtime, || {
            let host = host.clone();
            async move { transaction_sqlite_once(&host).await }
        })
    });
    #[cfg(feature = "postgres")]
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        postgres::bench(&mut group, &runtime, &url);
    }
    group.finish();
}

/// Runs `once` for each iteration and sums its durations.
fn timed<F, Fut>(b: &mut criterion::Bencher<'_>, runtime: &tokio::runtime::Runtime, once: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    b.to_async(runtime).iter_custom(|iters| {
        let runs: Vec<Fut> = (0..iters).map(|_| once()).collect();
        async move {
            let mut total = Duration::ZERO;
            for run in runs {
                total += run.await;
            }
            total
        }
    })
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use criterion::measurement::WallTime;
    use criterion::BenchmarkGroup;
    use eddy_projection::{Commit, Declare, Host, PgHost, PgTx, RunOptions};
    use eddy_streams::sqlx::{self, Executor};
    use eddy_streams::{PgOptions, PgStorage};

    use super::{fold_once, orders, seed, timed, ITEMS, UNIT, VERSION};

    /// A `process` that inserts each unit's orders into `bench_rows` (one
    /// statement per unit) in the unit's transaction.
    async fn transaction_once(host: &PgHost, table: &str) -> Duration {
        let version = VERSION.fetch_add(1, Ordering::Relaxed);
        let declare = Declare::<()>::new("bench-rows").with_version(version);
        let input = declare.input("orders", &orders());
        let insert = format!(
            "INSERT INTO {table} (id, amount) SELECT * FROM UNNEST($1::bigint[], $2::float8[])"
        );
        let bound = declare
            .process_transaction(Commit::transaction(), async move |tx: &mut PgTx, work| {
                let items = work.batch.items(input);
                let ids: Vec<i64> = items.iter().map(|o| o.id as i64).collect();
                let amounts: Vec<f64> = items.iter().map(|o| o.amount).collect();
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(ids)
                    .bind(amounts)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            })
            .expect("declare")
            .at(())
            .expect("bind");
        let start = Instant::now();
        let progress = host
            .run(&bound, RunOptions::default().with_unit_size(UNIT))
            .await
            .expect("run");
        assert_eq!(progress.items, ITEMS as u64);
        start.elapsed()
    }

    pub(super) fn bench(
        group: &mut BenchmarkGroup<'_, WallTime>,
        runtime: &tokio::runtime::Runtime,
        url: &str,
    ) {
        let schema = format!("bench_{}", std::process::id());
        let (store, host) = runtime.block_on(async {
            let options = PgOptions::new(url).with_schema(&schema);
            let store = Arc::new(PgStorage::open(options).await.expect("postgres"));
            seed(store.as_ref()).await;
            let host = PgHost::open(Arc::clone(&store));
            (store, host)
        });
        let table = format!("\"{schema}\".bench_rows");
        runtime.block_on(async {
            store
                .pool()
                .execute(sqlx::AssertSqlSafe(format!(
                    "CREATE TABLE {table} (id bigint NOT NULL, amount float8 NOT NULL)"
                )))
                .await
                .expect("create bench_rows");
        });
        let plain = Host::new(store.clone());
        group.bench_function("fold/postgres", |b| {
            timed(b, runtime, || {
                let plain = plain.clone();
                async move { fold_once(&plain).await }
            })
        });
        group.bench_function("transaction/postgres", |b| {
            timed(b, runtime, || {
                let (host, table) = (host.clone(), table.clone());
                async move { transaction_once(&host, &table).await }
            })
        });
        runtime.block_on(async {
            store
                .pool()
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA \"{schema}\" CASCADE"
                )))
                .await
                .expect("drop the schema");
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
