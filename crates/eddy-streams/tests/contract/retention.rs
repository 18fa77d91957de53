//! Retention cases: a stream keeps what its policy says, the sweep drops
//! the rest in steps, offsets never change, a read before the earliest
//! offset kept is refused, producers keep deduplicating and forks keep
//! what they inherited. Run on the stores that sweep their own records.

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{
    Append, Fork, ManualClock, Payload, ProducerPosition, ReadFrom, Retention, Storage,
    StreamConfig, StreamError, StreamPath,
};

fn at(name: &str) -> StreamPath {
    StreamPath::new(name).expect("path")
}

fn policy(text: &str) -> Retention {
    text.parse().expect("policy")
}

/// Sweeps until a step removes nothing; how much it removed.
async fn sweep_all(store: &dyn Storage) -> usize {
    let mut swept = 0;
    loop {
        match store.sweep(64).await.expect("sweep") {
            0 => return swept,
            step => swept += step,
        }
    }
}

/// A text stream with `policy` and the messages `0`, `1`, … `n - 1`,
/// each appended alone.
async fn numbered(store: &dyn Storage, path: &StreamPath, policy: Retention, n: usize) {
    let config = StreamConfig::bytes("text/plain").with_retention(policy);
    store
        .create(path, config, Payload::empty())
        .await
        .expect("create");
    for i in 0..n {
        store
            .append(path, Append::body(i.to_string()))
            .await
            .expect("append");
    }
}

async fn read_all(store: &dyn Storage, path: &StreamPath, from: ReadFrom) -> Vec<String> {
    let chunk = store.read(path, from, 1 << 20).await.expect("read");
    chunk
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
}

pub async fn retention_keeps_the_last_messages_and_offsets_never_change(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/count");
    numbered(&*store, &path, policy("messages=3"), 10).await;
    let before = store.head(&path).await.expect("head");
    assert_eq!(before.earliest, before.tail.with_position(0));
    assert_eq!(
        read_all(&*store, &path, ReadFrom::Beginning).await.len(),
        10
    );

    assert_eq!(sweep_all(&*store).await, 7);
    let after = store.head(&path).await.expect("head");
    assert_eq!(after.tail, before.tail, "the tail does not move");
    assert_eq!(after.earliest, before.tail.with_position(7));
    assert_eq!(after.bytes, 3);
    assert_eq!(after.config.retention, policy("messages=3"));
    assert_eq!(
        read_all(&*store, &path, ReadFrom::Beginning).await,
        ["7", "8", "9"],
        "-1 reads what is kept"
    );
    let chunk = store
        .read(&path, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    assert_eq!(chunk.start, after.earliest);
    assert_eq!(
        read_all(
            &*store,
            &path,
            ReadFrom::Offset(after.tail.with_position(8))
        )
        .await,
        ["8", "9"]
    );
    let dropped = before.tail.with_position(2);
    assert_eq!(
        store.read(&path, ReadFrom::Offset(dropped), 1 << 20).await,
        Err(StreamError::OffsetDropped {
            path: path.to_string(),
            offset: dropped,
            earliest: after.earliest,
        })
    );
    let appended = store
        .append(&path, Append::body("10"))
        .await
        .expect("append");
    assert_eq!(appended.next_offset, before.tail.with_position(11));
    assert_eq!(sweep_all(&*store).await, 1);
    assert_eq!(sweep_all(&*store).await, 0, "nothing more is due");
}

pub async fn retention_by_bytes_keeps_the_newest_within_the_bound(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/bytes");
    let config = StreamConfig::bytes("text/plain").with_retention(policy("bytes=10B"));
    store
        .create(&path, config, Payload::empty())
        .await
        .expect("create");
    for word in ["aaaa", "bbbb", "cccc", "dddd", "eeee"] {
        store
            .append(&path, Append::body(word))
            .await
            .expect("append");
    }
    sweep_all(&*store).await;
    assert_eq!(
        read_all(&*store, &path, ReadFrom::Beginning).await,
        ["dddd", "eeee"]
    );
    assert_eq!(store.head(&path).await.expect("head").bytes, 8);
    // The newest message stays, however large.
    store
        .append(&path, Append::body("a message over the bound"))
        .await
        .expect("append");
    sweep_all(&*store).await;
    assert_eq!(
        read_all(&*store, &path, ReadFrom::Beginning).await,
        ["a message over the bound"]
    );
}

pub async fn retention_by_age_drops_what_is_older(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let path = at("retention/age");
    numbered(&*store, &path, policy("age=60s"), 2).await;
    clock.advance(Duration::from_secs(30));
    store
        .append(&path, Append::body("2"))
        .await
        .expect("append");
    clock.advance(Duration::from_secs(20));
    assert_eq!(sweep_all(&*store).await, 0, "nothing is a minute old yet");
    clock.advance(Duration::from_secs(15));
    assert_eq!(sweep_all(&*store).await, 2);
    assert_eq!(read_all(&*store, &path, ReadFrom::Beginning).await, ["2"]);
    clock.advance(Duration::from_secs(60));
    assert_eq!(sweep_all(&*store).await, 1);
    let info = store.head(&path).await.expect("head");
    assert_eq!(
        (info.earliest, info.bytes),
        (info.tail, 0),
        "all of it aged"
    );
    assert!(read_all(&*store, &path, ReadFrom::Beginning)
        .await
        .is_empty());
    let appended = store
        .append(&path, Append::body("3"))
        .await
        .expect("append");
    assert_eq!(appended.next_offset, info.tail.with_position(4));
}

pub async fn idempotent_producers_deduplicate_across_a_drop(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/producer");
    numbered(&*store, &path, policy("messages=1"), 0).await;
    let write = |seq: u64| Append {
        producer: Some(ProducerPosition::new("writer", 0, seq)),
        ..Append::body(format!("p{seq}"))
    };
    for seq in 0..3 {
        store.append(&path, write(seq)).await.expect("append");
    }
    assert_eq!(sweep_all(&*store).await, 2);
    for seq in [1, 2] {
        let retried = store.append(&path, write(seq)).await.expect("retry");
        assert!(retried.duplicate, "seq {seq} is still known");
    }
    let next = store.append(&path, write(3)).await.expect("append");
    assert!(!next.duplicate);
    assert_eq!(next.next_offset.position(), 4);
}

pub async fn a_fork_keeps_what_it_inherited_when_its_source_drops(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let source = at("retention/source");
    numbered(&*store, &source, policy("messages=2"), 5).await;
    let fork = at("retention/fork");
    store
        .fork(
            &fork,
            Fork::of(source.clone()).with_retention(Retention::NONE),
        )
        .await
        .expect("fork");
    let inheriting = at("retention/inheriting");
    store
        .fork(&inheriting, Fork::of(source.clone()))
        .await
        .expect("fork");
    sweep_all(&*store).await;
    assert_eq!(
        read_all(&*store, &source, ReadFrom::Beginning).await,
        ["3", "4"]
    );
    assert_eq!(
        read_all(&*store, &fork, ReadFrom::Beginning).await,
        ["0", "1", "2", "3", "4"],
        "the fork's copy is its own"
    );
    assert_eq!(
        read_all(&*store, &inheriting, ReadFrom::Beginning).await,
        ["3", "4"],
        "a fork that inherits the policy applies it to itself"
    );
    // A fork whose branch point was dropped is refused.
    let tail = store.head(&source).await.expect("head").tail;
    let late = store
        .fork(
            &at("retention/late"),
            Fork::of(source.clone()).at(tail.with_position(1)),
        )
        .await;
    assert_eq!(late.map_err(|e| e.code()), Err("offset/dropped"));
    // One at the earliest offset kept inherits what is kept.
    let kept = at("retention/kept");
    store
        .fork(&kept, Fork::of(source.clone()).at(tail.with_position(4)))
        .await
        .expect("fork at the earliest");
    assert_eq!(read_all(&*store, &kept, ReadFrom::Beginning).await, ["3"]);
}

pub async fn a_retention_policy_is_part_of_the_config(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/config");
    let config = StreamConfig::json().with_retention(policy("messages=5; age=1h"));
    let created = store
        .create(&path, config.clone(), Payload::empty())
        .await
        .expect("create");
    assert_eq!(created.info.config.retention, config.retention);
    let again = store
        .create(&path, config.clone(), Payload::empty())
        .await
        .expect("create again");
    assert!(!again.created);
    let other = config.with_retention(policy("messages=6; age=1h"));
    let conflict = store.create(&path, other, Payload::empty()).await;
    assert_eq!(
        conflict.map_err(|e| e.code()),
        Err("stream/config-conflict")
    );
    let none = store
        .create(&path, StreamConfig::json(), Payload::empty())
        .await;
    assert_eq!(none.map_err(|e| e.code()), Err("stream/config-conflict"));
    let listed = store.list("retention/").await.expect("list");
    assert_eq!(listed[0].config.retention, policy("messages=5; age=1h"));
}

/// Appends that race the sweep's drops (on PostgreSQL, group commits
/// decided before a drop) leave the stream consistent: a read from `-1`
/// starts at the earliest offset, returns every kept message, and the
/// bytes are the kept messages' bytes.
pub async fn appends_racing_the_sweep_leave_a_consistent_stream(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/race");
    numbered(&*store, &path, policy("messages=5"), 0).await;
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (store, path) = (Arc::clone(&store), path.clone());
            tokio::spawn(async move {
                for n in 0..40 {
                    let body = format!("{writer}-{n}-{}", "x".repeat(n % 7));
                    store
                        .append(&path, Append::body(body))
                        .await
                        .expect("append");
                }
            })
        })
        .collect();
    while writers.iter().any(|writer| !writer.is_finished()) {
        store.sweep(64).await.expect("sweep");
        tokio::task::yield_now().await;
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    sweep_all(&*store).await;
    let info = store.head(&path).await.expect("head");
    let chunk = store
        .read(&path, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    assert_eq!(info.tail.position(), 160);
    assert_eq!(chunk.start, info.earliest);
    assert_eq!(chunk.messages.len(), 5);
    assert_eq!(info.earliest.position(), 155);
    let kept: u64 = chunk.messages.iter().map(|m| m.len() as u64).sum();
    assert_eq!(info.bytes, kept, "the bytes are the kept messages'");
}

/// One sweep step drops at most 1 MiB of a retained prefix (at least one
/// message), so that no step holds the store's writer for long however
/// large the messages are.
pub async fn a_sweep_step_drops_at_most_a_mebibyte(
    store: Arc<dyn Storage>,
    _clock: Arc<ManualClock>,
) {
    let path = at("retention/large");
    let config = StreamConfig::bytes("text/plain").with_retention(policy("messages=1"));
    store
        .create(&path, config, Payload::empty())
        .await
        .expect("create");
    // Under DynamoDB's 400 KB item limit.
    let large = "x".repeat(300 * 1024);
    for _ in 0..7 {
        store
            .append(&path, Append::body(large.clone()))
            .await
            .expect("append");
    }
    // Three messages are 900 KiB; a fourth would pass 1 MiB.
    assert_eq!(store.sweep(64).await.expect("sweep"), 3);
    assert_eq!(
        store.head(&path).await.expect("head").earliest.position(),
        3
    );
    assert_eq!(sweep_all(&*store).await, 3);
    let head = store.head(&path).await.expect("head");
    assert_eq!((head.earliest.position(), head.bytes), (6, 300 * 1024));
}
