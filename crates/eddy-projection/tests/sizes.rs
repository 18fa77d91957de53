//! Production sizes: units and outputs that do not fit one append, large
//! checkpoint state, and shared outputs with many producers.

use std::sync::Arc;

use eddy_projection::{
    wake, wake_stream, Commit, Declare, Host, Projection, RunOptions, Status, WakeRow,
    WAKE_COLLECTION,
};
use eddy_streams::{JsonStream, MemoryStorage, Route, SqliteOptions, SqliteStorage, Storage};
use serde::{Deserialize, Serialize};

use crate::support::{read_all, Faulty, Op, When};

/// Items of about 9 KB: the default 1 000 of them make a unit of 9 MB,
/// over the store's 8 MiB append limit.
fn blobs() -> JsonStream<String> {
    JsonStream::new("Test/Blobs", "blobs").expect("route")
}

fn copies() -> JsonStream<String> {
    JsonStream::new("Test/Copies", "copies").expect("route")
}

/// The `n`th blob: its number, padded to `size` bytes.
fn blob(n: usize, size: usize) -> String {
    format!("{n:08}{}", "x".repeat(size.saturating_sub(8)))
}

/// `copy`: each blob, unchanged, on `copies`, with the producer commit.
fn copy() -> Projection<(), ()> {
    let declare = Declare::<()>::new("copy");
    let input = declare.input("blobs", &blobs());
    let output = declare.output("copies", &copies());
    declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| emits.push(output, entry.item))
        .build()
        .expect("declare")
}

async fn seed_blobs(store: &dyn Storage, count: usize, size: usize) -> Vec<String> {
    let stream = blobs();
    stream.create(store, &()).await.expect("create");
    let items: Vec<String> = (0..count).map(|n| blob(n, size)).collect();
    for chunk in items.chunks((40_000 / size.max(1)).max(1)) {
        stream.append(store, &(), chunk).await.expect("append");
    }
    items
}

mod cases {
    use super::*;

    /// Issue 26: a unit of the default 1 000 items of ~9 KB wrote one
    /// append of 9 MB, refused as too large after the unit was pinned, so
    /// every later run replayed the same refused append.
    pub async fn a_unit_larger_than_one_append_is_written_whole(store: Arc<dyn Storage>) {
        let items = seed_blobs(store.as_ref(), 1_000, 9_000).await;
        let host = Host::new(store.clone());
        let bound = copy().at(()).expect("bind");
        let first = host.run(&bound, RunOptions::default()).await;
        let second = host.run(&bound, RunOptions::default()).await;
        let progress = first.or(second).expect("the run fits the store's limit");
        assert_eq!(progress.status, Status::CaughtUp);
        assert_eq!(read_all(store.as_ref(), &copies(), &()).await, items);
    }

    /// Issue 26: a checkpoint is one append to its slot stream, so a state
    /// over the store's append limit failed with the store's
    /// `append/too-large`, naming no binding, and kept failing. It is
    /// refused at its first save with `checkpoint/too-large`, naming the
    /// binding and the limit, before anything is written; a state under
    /// the limit saves.
    pub async fn a_state_over_the_checkpoint_limit_is_refused_at_its_first_save(
        store: Arc<dyn Storage>,
    ) {
        seed_blobs(store.as_ref(), 12, 1_000_000).await;
        let declare = Declare::<()>::new("hoard");
        let input = declare.input("blobs", &blobs());
        let hoard = declare
            .fold(Vec::<String>::new())
            .on(input, |mut all, entry, _| {
                all.push(entry.item.clone());
                all
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = hoard.at(()).expect("bind");
        let whole = RunOptions::default().with_unit_bytes(64 << 20);
        let five = RunOptions {
            limit: Some(1),
            ..whole.clone().with_unit_size(5)
        };
        let small = host.run(&bound, five).await;
        assert_eq!(small.expect("5 MB fits").units, 1);
        let failed = host.run(&bound, whole).await;
        let error = failed.expect_err("over the limit");
        assert_eq!(error.code(), "checkpoint/too-large", "{error}");
        let message = error.to_string();
        assert!(
            message.contains("hoard") && message.contains("8388608"),
            "{message}"
        );
        assert_eq!(
            host.read(&bound).await.expect("read").len(),
            5,
            "nothing saved"
        );
    }

    /// Forgetting a binding on purpose releases its producer on each output.
    pub async fn forget_releases_the_bindings_producers(store: Arc<dyn Storage>) {
        seed_blobs(store.as_ref(), 3, 10).await;
        let host = Host::new(store.clone());
        let bound = copy().at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        let output = copies().path(&()).expect("path");
        let producers = || async { store.snapshot(&output).await.expect("snapshot").producers };
        assert_eq!(producers().await.len(), 1);
        host.forget(&bound).await.expect("forget");
        assert!(producers().await.is_empty());
        host.run(&bound, RunOptions::default())
            .await
            .expect("rebuild");
        assert_eq!(producers().await.len(), 1, "the new generation's");
    }

    /// Each input contributes at most `unit_bytes` to a unit beyond its
    /// first item.
    pub async fn units_are_bounded_by_bytes(store: Arc<dyn Storage>) {
        let items = seed_blobs(store.as_ref(), 100, 10_000).await;
        let host = Host::new(store.clone());
        let bound = copy().at(()).expect("bind");
        let options = RunOptions::default().with_unit_bytes(25_000);
        let progress = host.run(&bound, options).await.expect("run");
        assert_eq!((progress.units, progress.items), (50, 100));
        let one_each = RunOptions::default().with_unit_bytes(1);
        let bound = copy().at(()).expect("bind");
        host.forget(&bound).await.expect("forget");
        let singles = host.run(&bound, one_each).await.expect("run");
        assert_eq!(singles.units, 100, "an item over the bound is a unit alone");
        assert_eq!(read_all(store.as_ref(), &copies(), &()).await.len(), 200);
        assert_eq!(read_all(store.as_ref(), &copies(), &()).await[..100], items);
    }

    /// A unit written in several appends that fails midway, its append
    /// landed or not, is replayed with the appends its pin recorded, even
    /// by a host with another append limit: each item once, in order.
    pub async fn an_interrupted_split_unit_replays_exactly(store: Arc<dyn Storage>) {
        let items = seed_blobs(store.as_ref(), 300, 1_000).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let output = copies().path(&()).expect("path");
        faulty.fail_nth_on(output.as_str(), Op::Append, 2, When::After);
        let small = Host::new(faulty.clone()).with_append_limit(64 << 10);
        let bound = copy().at(()).expect("bind");
        let failed = small.run(&bound, RunOptions::default()).await;
        assert_eq!(failed.expect_err("injected").code(), "storage-failure");
        faulty.fail_nth_on(output.as_str(), Op::Append, 1, When::Before);
        let failed = small.run(&bound, RunOptions::default()).await;
        assert_eq!(failed.expect_err("injected").code(), "storage-failure");
        let large = Host::new(faulty.clone());
        let progress = large
            .run(&bound, RunOptions::default())
            .await
            .expect("replay");
        assert_eq!(progress.status, Status::CaughtUp);
        assert_eq!(read_all(store.as_ref(), &copies(), &()).await, items);
        let appends = store.head(&output).await.expect("head");
        assert_eq!(appends.tail.position(), 300);
    }

    /// An item that no append can carry fails its unit with
    /// `pin/invalid-output` before anything is pinned or written.
    pub async fn an_item_over_the_append_limit_fails_before_the_pin(store: Arc<dyn Storage>) {
        seed_blobs(store.as_ref(), 3, 2_000).await;
        let host = Host::new(store.clone()).with_append_limit(1_000);
        let bound = copy().at(()).expect("bind");
        let failed = host.run(&bound, RunOptions::default()).await;
        let error = failed.expect_err("too large");
        assert_eq!(error.code(), "pin/invalid-output", "{error}");
        let loaded = host
            .checkpoints()
            .load(bound.checkpoint_key())
            .await
            .expect("load");
        assert!(loaded.checkpoint.is_none(), "nothing pinned");
        assert!(read_all(store.as_ref(), &copies(), &()).await.is_empty());
    }
}

crate::on_backends!(
    a_unit_larger_than_one_append_is_written_whole,
    units_are_bounded_by_bytes,
    forget_releases_the_bindings_producers,
    a_state_over_the_checkpoint_limit_is_refused_at_its_first_save,
    an_interrupted_split_unit_replays_exactly,
    an_item_over_the_append_limit_fails_before_the_pin,
);

/// A store that refuses appends over 64 KiB teaches a host that assumed
/// 8 MiB: the unit's output is split again, pinned again and written once.
#[test]
fn a_store_with_a_lower_limit_teaches_the_host_its_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions {
        max_append_bytes: 64 << 10,
        ..SqliteOptions::default()
    };
    let sqlite = SqliteStorage::open_with(dir.path(), options).expect("open");
    let stores: [(&str, Arc<dyn Storage>); 2] = [
        (
            "memory",
            Arc::new(MemoryStorage::with_max_append_bytes(64 << 10)),
        ),
        ("sqlite", Arc::new(sqlite)),
    ];
    let runtime = crate::support::runtime();
    for (backend, store) in stores {
        eprintln!("on {backend}");
        runtime.block_on(async {
            let items = seed_blobs(store.as_ref(), 300, 1_000).await;
            let host = Host::new(store.clone());
            let bound = copy().at(()).expect("bind");
            let progress = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!((progress.units, progress.status), (1, Status::CaughtUp));
            assert_eq!(read_all(store.as_ref(), &copies(), &()).await, items);
        });
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct File {
    file_id: String,
}

/// A wake projection over `files/:fileId` sources: `sources` files come
/// and go `live` at a time, each written once and then deleted, each
/// binding run after each change. Every binding is its own producer on the
/// shared wake stream.
async fn wake_over_files(store: Arc<dyn Storage>, sources: usize, live: usize) {
    let wakes = wake_stream("Files/Wake", "files-wake").expect("wake stream");
    let route = Route::new("files/:fileId").expect("route");
    let projection = wake::<File>("files-wake", route, &wakes).expect("declare");
    let file = JsonStream::<u64>::new("Files/File", "files/:fileId").expect("route");
    let host = Host::new(store.clone());
    for batch in 0..sources.div_ceil(live) {
        let ids = (batch * live..sources.min(batch * live + live)).map(|n| File {
            file_id: format!("f{n}"),
        });
        let bounds: Vec<_> = ids.map(|p| projection.at(p).expect("bind")).collect();
        for bound in &bounds {
            file.create(store.as_ref(), bound.params())
                .await
                .expect("create");
            file.append(store.as_ref(), bound.params(), &[1])
                .await
                .expect("append");
            let run = host.run(bound, RunOptions::default()).await;
            let progress = run.unwrap_or_else(|e| panic!("{:?}: {e}", bound.params()));
            assert_eq!(progress.units, 1);
        }
        for bound in &bounds {
            store.delete(&bound.input_paths()[0]).await.expect("delete");
            let run = host.run(bound, RunOptions::default()).await;
            let progress = run.unwrap_or_else(|e| panic!("{:?}: {e}", bound.params()));
            assert_eq!(progress.status, Status::Forgotten);
        }
    }
    let rows = wakes
        .materialize(store.as_ref(), &())
        .await
        .expect("materialize");
    assert!(rows
        .rows::<WakeRow>(WAKE_COLLECTION)
        .expect("rows")
        .is_empty());
}

/// Issue 26: each binding of a wake projection is a producer on the
/// shared wake stream, and the store kept every producer's state, forgotten
/// bindings' included: at the store's 10 000-producer cap, new sources
/// failed with `limit/producers`. A binding forgotten after its source is
/// gone releases its producer state, so 20 000 files over time keep working.
#[test]
fn a_wake_over_twenty_thousand_files_over_time_keeps_working_on_memory() {
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    crate::support::runtime().block_on(wake_over_files(store, 20_000, 100));
}

/// The same on SQLite, with a cap of 50 producers per stream and 300
/// files, 20 at a time.
#[test]
fn a_wake_over_more_files_than_the_producer_cap_keeps_working_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions {
        max_producers_per_stream: 50,
        ..SqliteOptions::default()
    };
    let store = SqliteStorage::open_with(dir.path(), options).expect("open");
    crate::support::runtime().block_on(wake_over_files(Arc::new(store), 300, 20));
}
