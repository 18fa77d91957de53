//! Compaction cases: the sweep compacts a stream when it is due, keeps
//! the head whole, lets deletes outlive nothing but their lifetime, never
//! loses an append that comes during a pass, and forks of a compacted
//! stream inherit what is kept. Run on the stores that compact (memory,
//! SQLite, PostgreSQL, DynamoDB).

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{
    Append, Compaction, DroppedDeletes, Fork, ManualClock, MemoryStorage, Payload, ReadFrom,
    Storage, StreamConfig, StreamPath,
};

fn at(name: &str) -> StreamPath {
    StreamPath::new(name).expect("path")
}

fn change(key: &str, operation: &str, value: u64) -> String {
    let value = if operation == "delete" {
        String::new()
    } else {
        format!(r#","value":{value}"#)
    };
    format!(r#"{{"type":"row","key":"{key}"{value},"headers":{{"operation":"{operation}"}}}}"#)
}

async fn compacted(store: &dyn Storage, path: &StreamPath, policy: &str) {
    let policy: Compaction = policy.parse().expect("policy");
    let config = StreamConfig::json().with_compaction(policy);
    store
        .create(path, config, Payload::empty())
        .await
        .expect("create");
}

async fn append(store: &dyn Storage, path: &StreamPath, messages: &[String]) {
    let body = format!("[{}]", messages.join(","));
    store
        .append(path, Append::body(body))
        .await
        .expect("append");
}

/// Every kept message from `from`, with its position.
pub async fn kept(store: &dyn Storage, path: &StreamPath, from: ReadFrom) -> Vec<(u64, String)> {
    let mut from = from;
    let mut read = Vec::new();
    loop {
        let chunk = store.read(path, from, 1 << 20).await.expect("read");
        for (index, message) in chunk.messages.iter().enumerate() {
            let text = String::from_utf8_lossy(message).into_owned();
            read.push((chunk.offset_of(index).position(), text));
        }
        if chunk.up_to_date {
            return read;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

async fn sweep_all(store: &dyn Storage) -> usize {
    let mut swept = 0;
    loop {
        match store.sweep(64).await.expect("sweep") {
            0 => return swept,
            step => swept += step,
        }
    }
}

/// The combined policy: the last hour in full, the latest of every row
/// forever; the sweep does it when the stream is due.
pub async fn the_sweep_keeps_the_last_hour_whole_and_the_latest_of_every_row(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let path = at("compaction/hour");
    compacted(&*store, &path, "age=1h").await;
    let old: Vec<String> = (0..30)
        .map(|n| change(&format!("k{}", n % 3), "upsert", n))
        .collect();
    append(&*store, &path, &old).await;
    sweep_all(&*store).await;
    assert_eq!(
        kept(&*store, &path, ReadFrom::Beginning).await.len(),
        30,
        "nothing is older than the lag yet"
    );
    clock.advance(Duration::from_secs(2 * 3600));
    let recent: Vec<String> = (30..40).map(|n| change("k0", "upsert", n)).collect();
    append(&*store, &path, &recent).await;
    sweep_all(&*store).await;
    let after = kept(&*store, &path, ReadFrom::Beginning).await;
    let positions: Vec<u64> = after.iter().map(|(p, _)| *p).collect();
    // k1 and k2's last changes (28, 29) stay, k0's old ones are
    // superseded by the recent ones, which all stay.
    assert_eq!(positions, [28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39]);
    let info = store.head(&path).await.expect("head");
    let bytes: usize = after.iter().map(|(_, m)| m.len()).sum();
    assert_eq!(info.bytes, bytes as u64);
    assert_eq!(info.tail.position(), 40, "offsets never change");
    assert_eq!(sweep_all(&*store).await, 0, "nothing more is due");
}

/// A delete is kept for its lifetime, then goes.
pub async fn deletes_go_after_their_lifetime(store: Arc<dyn Storage>, clock: Arc<ManualClock>) {
    let path = at("compaction/deletes");
    compacted(&*store, &path, "deletes=1m").await;
    append(
        &*store,
        &path,
        &[
            change("a", "insert", 1),
            change("a", "delete", 0),
            change("b", "insert", 2),
        ],
    )
    .await;
    assert_eq!(store.compact(&path).await, Ok(1));
    let positions = |read: Vec<(u64, String)>| read.into_iter().map(|(p, _)| p).collect::<Vec<_>>();
    assert_eq!(
        positions(kept(&*store, &path, ReadFrom::Beginning).await),
        [1, 2]
    );
    clock.advance(Duration::from_secs(61));
    sweep_all(&*store).await;
    assert_eq!(
        positions(kept(&*store, &path, ReadFrom::Beginning).await),
        [2],
        "the sweep drops the delete once its lifetime is over"
    );
}

/// Where a pass dropped a delete past its lifetime, reads and heads say
/// (a reader resuming before it may have missed it), and so do a fork
/// that holds the delete's position and a restored backup; a pass that
/// drops no delete leaves it unset.
pub async fn reads_say_where_a_delete_was_dropped(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let path = at("compaction/marked");
    compacted(&*store, &path, "deletes=1m").await;
    append(
        &*store,
        &path,
        &[
            change("a", "insert", 1),
            change("b", "insert", 2),
            change("a", "delete", 0),
            change("c", "insert", 3),
        ],
    )
    .await;
    let marks = |store: Arc<dyn Storage>, path: StreamPath, from: ReadFrom| async move {
        let read = store.read(&path, from, 1 << 20).await.expect("read");
        let head = store.head(&path).await.expect("head");
        assert_eq!(
            read.dropped_deletes, head.dropped_deletes,
            "read and head agree"
        );
        head.dropped_deletes
    };
    assert_eq!(store.compact(&path).await, Ok(1), "a's insert");
    assert_eq!(
        marks(store.clone(), path.clone(), ReadFrom::Beginning).await,
        None,
        "a pass that drops no delete leaves it unset"
    );
    clock.advance(Duration::from_secs(61));
    assert_eq!(store.compact(&path).await, Ok(1), "a's delete");
    let tail = store.head(&path).await.expect("head").tail;
    let dropped = Some(DroppedDeletes {
        before: tail.with_position(3),
        count: 1,
    });
    for from in [ReadFrom::Beginning, ReadFrom::Offset(tail.with_position(3))] {
        assert_eq!(marks(store.clone(), path.clone(), from).await, dropped);
    }
    append(&*store, &path, &[change("b", "upsert", 4)]).await;
    assert_eq!(store.compact(&path).await, Ok(1), "b's insert");
    assert_eq!(
        marks(store.clone(), path.clone(), ReadFrom::Beginning).await,
        dropped,
        "later passes that drop no delete keep it"
    );
    let whole = at("compaction/marked-fork");
    let before = at("compaction/marked-fork-before");
    store
        .fork(&whole, Fork::of(path.clone()))
        .await
        .expect("fork");
    store
        .fork(&before, Fork::of(path.clone()).at(tail.with_position(2)))
        .await
        .expect("fork");
    let fork_tail = store.head(&whole).await.expect("head").tail;
    assert_eq!(
        marks(store.clone(), whole, ReadFrom::Beginning).await,
        Some(DroppedDeletes {
            before: fork_tail.with_position(3),
            count: 1
        }),
        "a fork holding the delete's position keeps it"
    );
    assert_eq!(
        marks(store.clone(), before, ReadFrom::Beginning).await,
        None,
        "a fork before the delete never held it"
    );
    // A restore as a backup's import makes it: the snapshot, then the
    // kept messages at their positions.
    let snapshot = store.snapshot(&path).await.expect("snapshot");
    let kept_now = kept(&*store, &path, ReadFrom::Beginning).await;
    assert_eq!(kept_now.first().map(|(p, _)| *p), Some(3));
    let restored: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    restored
        .restore(&snapshot, 0, Vec::new())
        .await
        .expect("restore");
    let messages = kept_now.into_iter().map(|(_, m)| m.into()).collect();
    restored
        .restore(&snapshot, 3, messages)
        .await
        .expect("restore");
    let restored_tail = restored.head(&path).await.expect("head").tail;
    assert_eq!(
        marks(restored, path, ReadFrom::Beginning).await,
        Some(DroppedDeletes {
            before: restored_tail.with_position(3),
            count: 1
        }),
        "a restored backup keeps it"
    );
}

/// Appends that come while a pass is under way (between its steps) stay,
/// and the next pass compacts them.
pub async fn appends_during_a_pass_are_kept(store: Arc<dyn Storage>, _clock: Arc<ManualClock>) {
    let path = at("compaction/during");
    compacted(&*store, &path, "on").await;
    // In batches within the contract stores' append limit.
    for round in 0..30u64 {
        let batch: Vec<String> = (0..100)
            .map(|n| change(&format!("k{}", n % 2), "upsert", round * 100 + n))
            .collect();
        append(&*store, &path, &batch).await;
    }
    // One step of the pass: 1024 of 3000 messages.
    assert!(store.sweep(64).await.expect("sweep") > 0);
    append(
        &*store,
        &path,
        &[change("k2", "insert", 7), change("k0", "upsert", 8)],
    )
    .await;
    sweep_all(&*store).await;
    store.compact(&path).await.expect("compact");
    let after = kept(&*store, &path, ReadFrom::Beginning).await;
    assert_eq!(
        after,
        [
            (2999, change("k1", "upsert", 2999)),
            (3000, change("k2", "insert", 7)),
            (3001, change("k0", "upsert", 8)),
        ]
    );
}

/// A fork of a compacted stream inherits what is kept before its branch
/// point, at the same offsets, and its source's policy.
pub async fn a_fork_of_a_compacted_stream_inherits_what_is_kept(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let source = at("compaction/source");
    compacted(&*store, &source, "on").await;
    let changes: Vec<String> = (0..6)
        .map(|n| change(&format!("k{}", n % 2), "upsert", n))
        .collect();
    append(&*store, &source, &changes).await;
    append(&*store, &source, &[change("k0", "upsert", 6)]).await;
    assert_eq!(store.compact(&source).await, Ok(5));
    let tail = store.head(&source).await.expect("head").tail;
    // At 4, after four dropped messages: it inherits none.
    let fork = at("compaction/fork");
    store
        .fork(&fork, Fork::of(source.clone()).at(tail.with_position(4)))
        .await
        .expect("fork");
    let info = store.head(&fork).await.expect("head");
    assert_eq!(info.config.compaction, Some(Compaction::ON));
    assert_eq!(info.tail.position(), 4);
    assert!(kept(&*store, &fork, ReadFrom::Beginning).await.is_empty());
    let whole = at("compaction/fork-whole");
    store
        .fork(&whole, Fork::of(source.clone()))
        .await
        .expect("fork");
    assert_eq!(
        kept(&*store, &whole, ReadFrom::Beginning).await,
        kept(&*store, &source, ReadFrom::Beginning).await
    );
    let info = store.head(&whole).await.expect("head");
    let bytes: usize = changes[5].len() + change("k0", "upsert", 6).len();
    assert_eq!(info.bytes, bytes as u64, "the fork counts what it copied");
}

/// Retention and compaction on one stream: once a pass thinned the
/// oldest messages, retention weighs the kept ones at their own
/// positions. It drops exactly what its policy lets go, and the stream's
/// byte count stays the bytes of what it keeps.
pub async fn retention_after_compaction_weighs_the_kept_messages(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let path = at("compaction/retained");
    let config = StreamConfig::json()
        .with_compaction("on".parse().expect("policy"))
        .with_retention("messages=6".parse().expect("policy"));
    store
        .create(&path, config, Payload::empty())
        .await
        .expect("create");
    // Positions 0..12: key a changes 8 times, then b and c twice each.
    let mut changes: Vec<String> = (0..8).map(|n| change("a", "upsert", n)).collect();
    changes.extend((0..4).map(|n| change(["b", "c"][n % 2], "upsert", n as u64 + 10)));
    append(&*store, &path, &changes).await;
    store.compact(&path).await.expect("compact");
    let after_compaction = kept(&*store, &path, ReadFrom::Beginning).await;
    assert_eq!(
        after_compaction.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        [7, 10, 11],
        "the latest of a, b and c"
    );
    // Retention keeps the last 6 positions (6..12): position 7 stays.
    clock.advance(Duration::from_secs(1));
    sweep_all(&*store).await;
    let after_retention = kept(&*store, &path, ReadFrom::Beginning).await;
    assert_eq!(after_retention, after_compaction, "nothing at 6.. dropped");
    let bytes: usize = after_retention.iter().map(|(_, m)| m.len()).sum();
    let head = store.head(&path).await.expect("head");
    assert_eq!(head.bytes, bytes as u64, "bytes are those kept");

    // Six more rows: retention now keeps 12..18 and drops 7, 10, 11.
    let more: Vec<String> = (0..6)
        .map(|n| change(&format!("d{n}"), "upsert", n))
        .collect();
    append(&*store, &path, &more).await;
    sweep_all(&*store).await;
    let last = kept(&*store, &path, ReadFrom::Beginning).await;
    assert_eq!(
        last.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        (12..18).collect::<Vec<_>>()
    );
    let bytes: usize = last.iter().map(|(_, m)| m.len()).sum();
    let head = store.head(&path).await.expect("head");
    assert_eq!(head.bytes, bytes as u64, "bytes are those kept");
}
