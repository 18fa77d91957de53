//! Checkpoint bytes written and kept: a fold and a producer `mapAccum`
//! with units of one item, on memory and SQLite. Every store call goes
//! through a wrapper that counts the bytes appended under `__eddy/`; what
//! is kept is listed at the end. Prints one line per case.
//!
//! `cargo bench -p eddy-projection --bench checkpoint_footprint`

use std::sync::Arc;
use std::time::Instant;

use eddy_projection::{Commit, Declare, Host, Projection, RunOptions};
use eddy_streams::{Durability, JsonStream, MemoryStorage, SqliteOptions, SqliteStorage, Storage};

#[path = "support/counting.rs"]
mod counting;
use counting::Counting;

fn numbers() -> JsonStream<u64> {
    JsonStream::new("Bench/Numbers", "numbers").expect("route")
}

fn fold(id: &str) -> Projection<(), u64> {
    let declare = Declare::<()>::new(id);
    let input = declare.input("numbers", &numbers());
    declare
        .fold(0u64)
        .on(input, |sum, entry, _| sum + entry.item)
        .build()
        .expect("declare")
}

fn running_sum() -> Projection<(), u64> {
    let sums = JsonStream::<u64>::new("Bench/Sums", "sums").expect("route");
    let declare = Declare::<()>::new("footprint-map-accum");
    let input = declare.input("numbers", &numbers());
    let output = declare.output("sums", &sums);
    declare
        .map_accum(Commit::producer(), 0u64)
        .on(input, move |sum, entry, _, emits| {
            emits.push(output, sum + entry.item);
            sum + entry.item
        })
        .build()
        .expect("declare")
}

/// Runs `units` units of one item of `projection` and prints what its
/// checkpoint wrote and kept.
async fn measure(
    backend: &str,
    store: Arc<dyn Storage>,
    name: &str,
    projection: Projection<(), u64>,
    units: usize,
) {
    let counting = Arc::new(Counting::new(store.clone()));
    let host = Host::new(counting.clone());
    let bound = projection.at(()).expect("bind");
    let started = Instant::now();
    let progress = host
        .run(
            &bound,
            RunOptions::default().with_limit(units).with_unit_size(1),
        )
        .await
        .expect("run");
    let elapsed = started.elapsed();
    assert_eq!(progress.units, units as u64);
    let kept = store
        .list(&format!("{}/", bound.checkpoint_path()))
        .await
        .expect("list");
    let kept_bytes: u64 = kept.iter().map(|s| s.bytes).sum();
    let kept_records: u64 = kept.iter().map(|s| s.tail.position()).sum();
    let per_thousand = |n: u64| n * 1000 / units as u64;
    println!(
        "{backend:6} {name:10} {units:>7} units: written {:>9} B/1000 units in {:>5} records/1000 ({:>5} checkpoint calls/1000); kept {kept_bytes:>7} B in {kept_records:>3} records, {} streams; {:.1} units/ms",
        per_thousand(Counting::get(&counting.bytes)),
        per_thousand(Counting::get(&counting.records)),
        per_thousand(Counting::get(&counting.calls)),
        kept.len(),
        units as f64 / elapsed.as_secs_f64() / 1000.0,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let items: Vec<u64> = (0..100_000).collect();
        for backend in ["memory", "sqlite"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store: Arc<dyn Storage> = match backend {
                "memory" => Arc::new(MemoryStorage::new()),
                _ => Arc::new(
                    SqliteStorage::open_with(
                        dir.path(),
                        SqliteOptions {
                            durability: Durability::Process,
                            ..SqliteOptions::default()
                        },
                    )
                    .expect("sqlite"),
                ),
            };
            numbers().create(store.as_ref(), &()).await.expect("create");
            for chunk in items.chunks(10_000) {
                numbers()
                    .append(store.as_ref(), &(), chunk)
                    .await
                    .expect("append");
            }
            measure(backend, store.clone(), "fold", fold("fold-1k"), 1_000).await;
            measure(backend, store.clone(), "map_accum", running_sum(), 1_000).await;
            measure(backend, store, "fold", fold("fold-100k"), 100_000).await;
        }
    });
}
