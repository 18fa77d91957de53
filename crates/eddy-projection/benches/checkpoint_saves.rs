//! Saves per second of one binding's checkpoint in its slot streams
//! ([`StreamCheckpoints`]) with a state of 10 KB, 1 MiB and 4 MiB, on
//! memory and SQLite (fsynced commits). A wrapper counts the store's
//! writes (create, append, delete) and the bytes read per save: those
//! counts do not depend on the machine's load, the saves/s do.
//!
//! `cargo bench -p eddy-projection --bench checkpoint_saves`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use eddy_projection::{Checkpoint, CheckpointKey, CheckpointStore, StreamCheckpoints, Token};
use eddy_streams::{
    Append, Appended, Created, MemoryStorage, Notifier, Offset, Payload, ReadChunk, ReadFrom,
    SqliteStorage, Storage, StreamConfig, StreamError, StreamInfo, StreamPath, Wait,
};

/// Counts writes and bytes read.
struct Counting {
    inner: Arc<dyn Storage>,
    writes: AtomicU64,
    read_bytes: AtomicU64,
}

#[async_trait]
impl Storage for Counting {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.create(path, config, initial).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.append(path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let chunk = self.inner.read(path, from, max_bytes).await?;
        let bytes: usize = chunk.messages.iter().map(|m| m.len()).sum();
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(chunk)
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.inner.head(path).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(path).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.inner.list(prefix).await
    }

    fn notifier(&self) -> &Notifier {
        self.inner.notifier()
    }

    async fn wait(
        &self,
        path: &StreamPath,
        after: Offset,
        timeout: Duration,
    ) -> Result<Wait, StreamError> {
        self.inner.wait(path, after, timeout).await
    }
}

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
        let counting = Arc::new(Counting {
            inner: store,
            writes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
        });
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
                counting.writes.load(Ordering::Relaxed),
                counting.read_bytes.load(Ordering::Relaxed),
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
            let writes = counting.writes.load(Ordering::Relaxed) - writes;
            let read = counting.read_bytes.load(Ordering::Relaxed) - read;
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
