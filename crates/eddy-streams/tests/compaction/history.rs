//! The body of the compaction property test, shared by every store that
//! compacts: its harness (`tests/compaction.rs` here, and
//! `eddy-streams-dynamodb`'s, which includes this file by `#[path]`)
//! opens the stores and runs [`check`] on generated histories
//! ([`policy`], [`steps`], [`probes`]).
//!
//! A history is random state changes (insert, update, upsert, delete of a few rows in two collections),
//! resets, snapshot controls and messages that are not state messages,
//! appended to a compacted stream and to a plain one alike, with
//! compaction (a pass now, or the sweep) and the clock moving at random
//! points. Then:
//!
//! - the compacted stream's messages are some of the plain one's, at the
//!   same offsets, in the same order, and its byte count is theirs;
//! - read from `-1`, whole or a small page at a time, it materializes
//!   the plain stream's rows (and snapshot state);
//! - a reader that read the plain stream up to any offset and reads on
//!   from there in the compacted one ends with the same rows, unless it
//!   is before where the stream says it dropped a delete past its
//!   lifetime (none while no delete outlived it);
//! - a reader within the lag (messages, bytes, age) sees every message.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_streams::{
    Append, Clock, Compaction, ManualClock, Materialized, Offset, Payload, ReadFrom, StateMessage,
    Storage, StreamConfig, StreamPath,
};
use proptest::prelude::*;

/// One step of a generated history.
#[derive(Clone, Debug)]
pub enum Step {
    /// A change of row `key` of collection `collection`.
    Change {
        collection: u8,
        key: u8,
        operation: &'static str,
        value: u16,
    },
    Control(&'static str),
    /// A JSON message that is not a state message.
    Junk,
    /// A compaction pass now.
    Compact,
    /// The sweep, until it is done.
    Sweep,
    /// The clock moves on.
    Advance(u64),
    /// Changes appended together, in one append (DynamoDB packs them in
    /// one item, which compaction then rewrites with holes).
    Batch(Vec<Step>),
}

fn change() -> impl Strategy<Value = Step> {
    (
        0u8..2,
        0u8..6,
        prop::sample::select(vec!["insert", "update", "upsert", "delete"]),
        any::<u16>(),
    )
        .prop_map(|(collection, key, operation, value)| Step::Change {
            collection,
            key,
            operation,
            value,
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => change(),
        2 => prop::collection::vec(change(), 2..12).prop_map(Step::Batch),
        1 => prop::sample::select(vec!["reset", "snapshot-start", "snapshot-end"]).prop_map(Step::Control),
        1 => Just(Step::Junk),
        2 => Just(Step::Compact),
        1 => Just(Step::Sweep),
        2 => (1u64..8).prop_map(Step::Advance),
    ]
}

/// A compaction policy: lags of every kind or none, short or long
/// delete lifetimes.
pub fn policy() -> impl Strategy<Value = Compaction> {
    (
        prop::option::of(1u64..6),
        prop::option::of(50u64..400),
        prop::option::of(2u64..12),
        prop::bool::ANY,
    )
        .prop_map(|(messages, bytes, age, short_deletes)| {
            let mut policy = Compaction::ON;
            if let Some(n) = messages {
                policy = policy.with_lag_messages(n);
            }
            if let Some(n) = bytes {
                policy = policy.with_lag_bytes(n);
            }
            if let Some(secs) = age {
                policy = policy.with_lag_age_secs(secs);
            }
            // A short lifetime lets deletes go within the history.
            policy.with_deletes_secs(if short_deletes { 10 } else { 1_000_000 })
        })
}

fn message(step: &Step) -> Option<String> {
    match step {
        Step::Change {
            collection,
            key,
            operation,
            value,
        } => {
            let value = if *operation == "delete" {
                String::new()
            } else {
                format!(r#","value":{{"v":{value}}}"#)
            };
            Some(format!(
                r#"{{"type":"c{collection}","key":"k{key}"{value},"headers":{{"operation":"{operation}"}}}}"#
            ))
        }
        Step::Control(control) => Some(format!(r#"{{"headers":{{"control":"{control}"}}}}"#)),
        Step::Junk => Some(r#"{"not":"a state message"}"#.to_owned()),
        _ => None,
    }
}

/// A history of up to 120 steps.
pub fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..120)
}

/// The offsets a reader starts at, as fractions of the stream.
pub fn probes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 4)
}

/// A number no earlier case of this process had: each case's streams
/// are named after it, so cases share a store.
pub fn next_case() -> u64 {
    static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A store that compacts, with its clock.
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Storage>,
    pub clock: Arc<ManualClock>,
}

/// Every message of the stream from `from`, with its offset, read a page
/// of `page` bytes at a time.
async fn read_all(
    store: &dyn Storage,
    path: &StreamPath,
    from: ReadFrom,
    page: usize,
) -> Vec<(Offset, Bytes)> {
    let mut from = from;
    let mut read = Vec::new();
    loop {
        let chunk = store.read(path, from, page).await.expect("read");
        for (index, message) in chunk.messages.iter().enumerate() {
            read.push((chunk.offset_of(index), message.clone()));
        }
        if chunk.up_to_date {
            return read;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

/// The rows `messages` describe, applied after `state`.
fn materialize<'a>(
    mut state: Materialized,
    messages: impl IntoIterator<Item = &'a Bytes>,
) -> Materialized {
    for message in messages {
        if let Ok(message) = StateMessage::decode(message) {
            state.apply(message);
        }
    }
    state
}

async fn sweep_all(store: &dyn Storage) {
    while store.sweep(64).await.expect("sweep") > 0 {}
}

/// Runs `steps` on `backend` (streams named after `case`, a number no
/// other case of the store uses) and checks the properties.
pub async fn check(
    backend: &Backend,
    case: u64,
    policy: Compaction,
    steps: &[Step],
    probes: &[u8],
) {
    let store = &*backend.store;
    let plain = StreamPath::new(format!("plain/{case}")).expect("path");
    let compacted = StreamPath::new(format!("compacted/{case}")).expect("path");
    store
        .create(&plain, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    store
        .create(
            &compacted,
            StreamConfig::json().with_compaction(policy),
            Payload::empty(),
        )
        .await
        .expect("create");
    // When each message was appended, for the age bound.
    let mut appended_ms = Vec::new();
    for step in steps {
        let batch = match step {
            Step::Batch(changes) => changes.iter().filter_map(message).collect(),
            step => message(step).into_iter().collect::<Vec<String>>(),
        };
        if !batch.is_empty() {
            let body = format!("[{}]", batch.join(","));
            for path in [&plain, &compacted] {
                store
                    .append(path, Append::body(body.clone()))
                    .await
                    .expect("append");
            }
            appended_ms.extend(batch.iter().map(|_| backend.clock.now_ms()));
            continue;
        }
        match step {
            Step::Compact => {
                store.compact(&compacted).await.expect("compact");
            }
            Step::Sweep => sweep_all(store).await,
            Step::Advance(secs) => backend.clock.advance(Duration::from_secs(*secs)),
            _ => {}
        }
    }
    store.compact(&compacted).await.expect("compact");
    let full = read_all(store, &plain, ReadFrom::Beginning, 1 << 20).await;
    let kept = read_all(store, &compacted, ReadFrom::Beginning, 1 << 20).await;
    let name = backend.name;

    // Offsets and order kept: the kept messages are some of the full ones.
    let positions: Vec<u64> = kept.iter().map(|(o, _)| o.position()).collect();
    let mut full_at = full.iter().map(|(o, m)| (o.position(), m));
    for (offset, message) in &kept {
        let found = full_at.by_ref().find(|(p, _)| *p == offset.position());
        assert_eq!(
            found.map(|(_, m)| m),
            Some(message),
            "{name}: kept message at {offset} differs"
        );
    }
    let info = store.head(&compacted).await.expect("head");
    let bytes: u64 = kept.iter().map(|(_, m)| m.len() as u64).sum();
    assert_eq!(info.bytes, bytes, "{name}: byte count");
    assert_eq!(info.tail.position(), full.len() as u64, "{name}: tail");

    // Read from -1, whole or in small pages.
    let rows = materialize(Materialized::default(), full.iter().map(|(_, m)| m));
    let compacted_rows = materialize(Materialized::default(), kept.iter().map(|(_, m)| m));
    assert_eq!(
        compacted_rows.collections, rows.collections,
        "{name}: rows from -1"
    );
    assert_eq!(
        compacted_rows.in_snapshot, rows.in_snapshot,
        "{name}: snapshot"
    );
    let paged = read_all(store, &compacted, ReadFrom::Beginning, 64).await;
    assert_eq!(paged, kept, "{name}: paged read");

    // From anywhere but before a delete the stream says it dropped.
    let dropped_before = info.dropped_deletes.map_or(0, |d| d.before.position());
    if policy.deletes_secs > 1_000 {
        assert_eq!(
            info.dropped_deletes, None,
            "{name}: no delete outlived its lifetime"
        );
    }
    {
        for probe in probes {
            let at = u64::from(*probe) % (full.len() as u64 + 1);
            if at < dropped_before {
                continue;
            }
            let before = materialize(
                Materialized::default(),
                full.iter().take(at as usize).map(|(_, m)| m),
            );
            let from = ReadFrom::Offset(info.tail.with_position(at));
            let rest = read_all(store, &compacted, from, 1 << 20).await;
            let expected: Vec<&(Offset, Bytes)> =
                kept.iter().filter(|(o, _)| o.position() >= at).collect();
            assert_eq!(
                rest.iter().collect::<Vec<_>>(),
                expected,
                "{name}: read from {at}"
            );
            let after = materialize(before, rest.iter().map(|(_, m)| m));
            assert_eq!(
                after.collections, rows.collections,
                "{name}: rows from {at}"
            );
        }
    }

    // The head is kept whole.
    let count = full.len() as u64;
    let mut head_from = count;
    if let Some(n) = policy.lag_messages {
        head_from = head_from.min(count.saturating_sub(n));
    }
    if let Some(limit) = policy.lag_bytes {
        let mut total = 0;
        for (offset, message) in full.iter().rev() {
            total += message.len() as u64;
            if total > limit {
                break;
            }
            head_from = head_from.min(offset.position());
        }
    }
    if let Some(age) = policy.lag_age_secs {
        let now = backend.clock.now_ms();
        let young = appended_ms
            .iter()
            .position(|ms| ms + (age as i64) * 1000 > now)
            .unwrap_or(appended_ms.len()) as u64;
        head_from = head_from.min(young);
    }
    let head: Vec<u64> = (head_from..count).collect();
    assert!(
        positions.ends_with(&head),
        "{name}: the head {head_from}..{count} is not kept whole: {positions:?}"
    );
}
