//! Append and read throughput of the stream store backends, with 100-byte
//! JSON messages. Run with `cargo bench -p eddy-streams`.

use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use eddy_streams::{
    Append, Durability, MemoryStorage, Payload, ReadFrom, SqliteOptions, SqliteStorage, Storage,
    StreamConfig, StreamPath,
};
use tokio::runtime::Runtime;

/// A JSON message of exactly 100 bytes.
fn message(i: usize) -> Bytes {
    let text = format!("{{\"id\":\"{i:010}\",\"pad\":\"{}\"}}", "x".repeat(72));
    debug_assert_eq!(text.len(), 100);
    Bytes::from(text)
}

/// A JSON array of `n` messages: one append of `n` messages.
fn batch_body(n: usize) -> Bytes {
    let items: Vec<String> = (0..n)
        .map(|i| String::from_utf8_lossy(&message(i)).into_owned())
        .collect();
    Bytes::from(format!("[{}]", items.join(",")))
}

struct Backend {
    name: &'static str,
    store: Arc<dyn Storage>,
    _dir: Option<tempfile::TempDir>,
}

fn sqlite(name: &'static str, durability: Durability) -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions {
        durability,
        ..SqliteOptions::default()
    };
    let store = SqliteStorage::open_with(dir.path(), options).expect("open");
    Backend {
        name,
        store: Arc::new(store),
        _dir: Some(dir),
    }
}

fn backends() -> Vec<Backend> {
    vec![
        Backend {
            name: "memory",
            store: Arc::new(MemoryStorage::new()),
            _dir: None,
        },
        sqlite("sqlite", Durability::Sync),
        sqlite("sqlite-process-durability", Durability::Process),
    ]
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn create(rt: &Runtime, store: &dyn Storage, name: &str) -> StreamPath {
    let path = StreamPath::new(name).expect("path");
    rt.block_on(store.create(&path, StreamConfig::json(), Payload::empty()))
        .expect("create");
    path
}

/// One appender, one append at a time.
fn append(c: &mut Criterion) {
    let rt = runtime();
    for backend in backends() {
        let store = &*backend.store;
        let mut group = c.benchmark_group(format!("append/{}", backend.name));
        for size in [1, 100] {
            let path = create(&rt, store, &format!("sequential-{size}"));
            let body = if size == 1 {
                message(0)
            } else {
                batch_body(size)
            };
            group.throughput(Throughput::Elements(size as u64));
            group.bench_function(format!("{size} message(s) per append"), |b| {
                b.to_async(&rt).iter(|| async {
                    store
                        .append(&path, Append::body(body.clone()))
                        .await
                        .expect("append")
                });
            });
        }
        group.finish();
    }
}

/// 32 appenders at once on one stream: group commit at work.
fn concurrent(c: &mut Criterion) {
    const APPENDERS: usize = 32;
    const PER_APPENDER: usize = 50;
    let rt = runtime();
    for backend in backends() {
        let mut group = c.benchmark_group(format!("concurrent/{}", backend.name));
        group.sample_size(10);
        for size in [1, 100] {
            let path = create(&rt, &*backend.store, &format!("concurrent-{size}"));
            let body = if size == 1 {
                message(0)
            } else {
                batch_body(size)
            };
            group.throughput(Throughput::Elements(
                (APPENDERS * PER_APPENDER * size) as u64,
            ));
            group.bench_function(format!("32 appenders, {size} message(s) per append"), |b| {
                b.to_async(&rt).iter(|| {
                    let tasks: Vec<_> = (0..APPENDERS)
                        .map(|_| {
                            let (store, path, body) =
                                (Arc::clone(&backend.store), path.clone(), body.clone());
                            tokio::spawn(async move {
                                for _ in 0..PER_APPENDER {
                                    store
                                        .append(&path, Append::body(body.clone()))
                                        .await
                                        .expect("append");
                                }
                            })
                        })
                        .collect();
                    async move {
                        for task in tasks {
                            task.await.expect("join");
                        }
                    }
                });
            });
        }
        group.finish();
    }
}

/// Reading a stream of 10 000 messages from the beginning.
fn catch_up(c: &mut Criterion) {
    const MESSAGES: usize = 10_000;
    let rt = runtime();
    for backend in backends() {
        let store = &*backend.store;
        let path = create(&rt, store, "catch-up");
        let body = batch_body(1000);
        for _ in 0..MESSAGES / 1000 {
            rt.block_on(store.append(&path, Append::body(body.clone())))
                .expect("fill");
        }
        let path = &path;
        let mut group = c.benchmark_group(format!("read/{}", backend.name));
        group.throughput(Throughput::Elements(MESSAGES as u64));
        group.bench_function("catch-up of 10 000 in 1 MiB chunks", |b| {
            b.to_async(&rt).iter_batched(
                || ReadFrom::Beginning,
                |mut from| async move {
                    let mut seen = 0;
                    loop {
                        let chunk = store.read(path, from, 1 << 20).await.expect("read");
                        seen += chunk.messages.len();
                        if chunk.up_to_date {
                            break;
                        }
                        from = ReadFrom::Offset(chunk.next_offset);
                    }
                    assert_eq!(seen, MESSAGES);
                },
                BatchSize::SmallInput,
            );
        });
        group.finish();
    }
}

criterion_group!(benches, append, concurrent, catch_up);
criterion_main!(benches);
