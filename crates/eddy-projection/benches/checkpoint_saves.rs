//! Saves per second of one binding's checkpoint in its slot streams
//! ([`StreamCheckpoints`]) with a state of 10 KB, 1 MiB and 4 MiB, on
//! memory and SQLite (fsynced commits). A wrapper counts the store's
//! writes (create, append, delete) and the bytes read per save: those
//! counts do not depend on the machine's load, the saves/s do.
//!
//! `cargo bench -p eddy-projection --bench checkpoint_saves`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_projection::{Checkpoint, CheckpointKey, CheckpointStore, StreamCheckpoints, Token};
use eddy_streams::{MemoryStorage, SqliteStorage, Storage};

#[path = "support/counting.rs"]
mod counting;
use counting::Counting;

const SIZES: [(&str, usize); 3] = [("10KB", 10_000), ("1MiB", 1 << 20), ("4MiB", 4 << 20)];

/// A checkpoint whose state is a string of about `size` bytes.
fn checkpoint(size: usize, units: u64) -> Checkpoint {
    Checkpoint {
        state: serde_json::Value::String("s".repeat(size)),
        units,
        ..Checkpoint::default()
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let backends: Vec<(&str, Arc<dyn Storage>)> = vec![
        ("memory", Arc::new(MemoryStorage::new())),
        (
            "sqlite",
            Arc::new(SqliteStorage::open(dir.path()).expect("sqlite")),
        ),
    ];
    let mut group = c.benchmark_group("checkpoint-saves");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(1));
    for (backend, store) in backends {
        let counting = Arc::new(Counting::new(store));
        let checkpoints = StreamCheckpoints::new(counting.clone());
        for (label, size) in SIZES {
            let key = CheckpointKey::new(&format!("saves-{label}"), 1, &serde_json::Value::Null)
                .expect("key");
            let mut token = Token::NONE;
            let mut units = 0u64;
            // Warm up: past the first slot change, so the counts are the
            // steady state's.
            runtime.block_on(async {
                for _ in 0..80 {
                    units += 1;
                    token = checkpoints
                        .save(&key, token, &checkpoint(size, units))
                        .await
                        .expect("save");
                }
            });
            let (writes, read) = (
                Counting::get(&counting.writes),
                Counting::get(&counting.read_bytes),
            );
            let mut saves = 0u64;
            group.bench_function(format!("{backend}/{label}"), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    runtime.block_on(async {
                        for _ in 0..iters {
                            units += 1;
                            token = checkpoints
                                .save(&key, token, &checkpoint(size, units))
                                .await
                                .expect("save");
                        }
                    });
                    saves += iters;
                    start.elapsed()
                })
            });
            let writes = Counting::get(&counting.writes) - writes;
            let read = Counting::get(&counting.read_bytes) - read;
            println!(
                "checkpoint-saves {backend}/{label}: {:.2} store writes and {:.0} bytes read per save ({saves} saves)",
                writes as f64 / saves as f64,
                read as f64 / saves as f64,
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
