//! Compaction of state streams: the latest change of every row forever,
//! and the recent history in full.
//!
//! A JSON stream created with a [`Compaction`] policy is compacted as
//! Kafka compacts a topic, with the state protocol's messages (see
//! [`state`](crate::state)) as its records:
//!
//! - The *head*, the newest messages within the policy's lag (an age, a
//!   number of messages and/or bytes: the union of what each keeps), is
//!   never touched: a reader at most the lag behind sees every message.
//! - Before the head, a change of a row (`type`, `key`) that a later
//!   change of the same row supersedes is dropped. Every operation of the
//!   protocol (insert, update, upsert, delete) writes the whole row, in
//!   `@durable-streams/state`'s `MaterializedState` as in
//!   [`Materialized`](crate::Materialized), so the latest change alone
//!   gives the row.
//! - A delete is kept for the policy's delete lifetime after it was
//!   appended (so that readers within that time of the tail remove the
//!   row), then dropped: the row's older changes went before it.
//! - Everything before the last `reset` control is dropped, except the
//!   last snapshot control before it when that is a `snapshot-start`
//!   (a snapshot still open at the reset stays open for every reader).
//! - A message that is not a state change or control is never dropped.
//!
//! Offsets never change and order is kept: a read at an offset of a
//! dropped message returns the kept messages after it. So a reader from
//! the beginning materializes the rows a reader of the full history
//! does, and a reader at any offset ends with the same rows too, unless
//! it was more than the delete lifetime behind (a dropped delete then
//! leaves it a row that is gone). Reads and heads say where deletes were
//! dropped ([`DroppedDeletes`]), so such a reader can tell.
//!
//! The store compacts in passes, each in bounded steps of the sweep
//! ([`Storage::sweep`](crate::Storage::sweep)) or at once
//! ([`Storage::compact`](crate::Storage::compact)). A pass reads the
//! stream backwards from the tail it started at, remembering each row it
//! met (so a pass holds every row key of the stream once, in memory),
//! and drops what it passed that a later message supersedes. A stream
//! is due for a pass once the messages past the lag since the last pass
//! are half as many as that pass kept (Kafka's dirty ratio, at one
//! third), so it holds at most about 1.5 times its working set past the
//! head, or when a delete it kept outlives its lifetime.
//!
//! The policy is written as `key=value` pairs separated by `;`, like a
//! retention policy: `age=1h; messages=1000; bytes=10MB; deletes=1d`.
//! `age`, `messages` and `bytes` bound the head (none: compact up to the
//! tail); `deletes` is how long a delete is kept (one day by default, as
//! Kafka's `delete.retention.ms`). `on` is the policy with every default.
//!
//! A compacted stream, with a pass run at once:
//!
//! ```
//! use eddy_streams::{Append, Compaction, MemoryStorage, Payload, ReadFrom, Storage, StreamConfig, StreamPath};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStorage::new();
//! let path = StreamPath::new("carts/42")?;
//! let config = StreamConfig::json().with_compaction(Compaction::ON);
//! store.create(&path, config, Payload::empty()).await?;
//! for total in [10, 20, 30] {
//!     let change = format!(
//!         r#"{{"type":"cart","key":"c1","value":{{"total":{total}}},"headers":{{"operation":"upsert"}}}}"#
//!     );
//!     store.append(&path, Append::body(change)).await?;
//! }
//! assert_eq!(store.compact(&path).await?, 2);
//! let chunk = store.read(&path, ReadFrom::Beginning, 1 << 20).await?;
//! assert_eq!(chunk.messages.len(), 1, "the latest change of the row");
//! assert_eq!(chunk.offset_of(0).position(), 2, "at its own offset");
//! assert_eq!(chunk.next_offset.position(), 3);
//! # Ok::<(), eddy_streams::StreamError>(())
//! # }).unwrap();
//! ```
//!
//! The policy's grammar:
//!
//! ```
//! use eddy_streams::Compaction;
//! let policy: Compaction = "age=1h; deletes=7d".parse()?;
//! assert_eq!(policy.lag_age_secs, Some(3_600));
//! assert_eq!(policy.deletes_secs, 7 * 86_400);
//! assert_eq!(policy.to_string(), "age=1h; deletes=7d");
//! assert_eq!("on".parse::<Compaction>()?.to_string(), "deletes=1d");
//! # Ok::<(), eddy_streams::CompactionError>(())
//! ```

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::retention::{
    number, pairs, secs_to_ms, set_once, with_unit, AgeMark, AGE_UNITS, MAX_QUOTED, SIZE_UNITS,
};

mod pass;
mod policy;

pub(crate) use pass::*;
pub use policy::*;

/// Where compaction dropped deletes past their lifetime, as readers see
/// it: a reader that resumes before [`before`](Self::before), having read
/// an earlier change of a row, may have missed the row's delete and keep
/// a row that is gone. A reader that saw the same [`count`](Self::count)
/// on its previous read missed none since (the count only grows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DroppedDeletes {
    /// The offset after the highest delete compaction dropped.
    pub before: crate::Offset,
    /// How many deletes compaction dropped past their lifetime, over the
    /// stream's life (a restored stream or a fork starts from its
    /// source's).
    pub count: u64,
}

/// What the store keeps between compaction passes of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Compacted {
    /// Where the last finished pass ended: it looked at every message
    /// below.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub end: u64,
    /// How many messages below `end` that pass kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kept: u64,
    /// The stream's count when that pass started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tail: u64,
    /// How many messages compaction dropped, over all passes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
    /// When the oldest delete that pass kept may go, in unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_due_ms: Option<i64>,
    /// The position after the highest delete dropped past its lifetime,
    /// over all passes (see [`DroppedDeletes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes_dropped_below: Option<u64>,
    /// How many deletes were dropped past their lifetime, over all passes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deletes_dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Compacted {
    /// Whether no pass ever finished (and so nothing was dropped).
    pub fn is_empty(&self) -> bool {
        *self == Compacted::default()
    }

    /// Notes `deletes` (see [`DeletesDropped`]) that a write drops.
    pub fn note_deletes(&mut self, deletes: DeletesDropped) {
        if deletes.count > 0 {
            self.deletes_dropped = self.deletes_dropped.saturating_add(deletes.count);
            self.deletes_dropped_below = self.deletes_dropped_below.max(Some(deletes.below));
        }
    }

    /// The dropped deletes as readers see them, with offsets of
    /// `incarnation`.
    pub fn dropped_deletes(&self, incarnation: u64) -> Option<DroppedDeletes> {
        self.deletes_dropped_below.map(|below| DroppedDeletes {
            before: crate::Offset::new(incarnation, below),
            count: self.deletes_dropped,
        })
    }

    /// When the sweep should start the next pass, in unix ms (`i64::MIN`
    /// for at once); `None` when nothing will be due until the stream
    /// changes.
    pub fn due_ms(&self, policy: &Compaction, marks: &[AgeMark], count: u64) -> Option<i64> {
        // Half what the last pass kept: at rest a stream holds at most
        // about 1.5 times its working set past the head.
        let threshold = (self.kept / 2).max(1);
        // Without a byte bound, where a pass would end is known; with one
        // it is at most that, so new messages must have come too (else
        // every sweep would start a pass that ends where the last did).
        let appended_enough =
            policy.lag_bytes.is_none() || count.saturating_sub(self.tail) >= threshold;
        let dirty_at = |end: u64| end.saturating_sub(self.end) >= threshold && appended_enough;
        let by_messages = policy
            .lag_messages
            .map_or(count, |keep| count.saturating_sub(keep));
        let by_dirt = match policy.lag_age_ms() {
            None => dirty_at(by_messages).then_some(i64::MIN),
            // The age bound moves with time: the pass is due when the
            // first mark that makes the dirty part large enough ages out
            // of the lag.
            Some(age_ms) => marks
                .iter()
                .find(|mark| dirty_at(mark.end.min(by_messages)))
                .map(|mark| mark.ms.saturating_add(age_ms)),
        };
        match (by_dirt, self.delete_due_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_in_any_order_and_print_canonically() {
        let policy: Compaction = " deletes = 2h ;bytes=1MiB; messages=5; age=36h"
            .parse()
            .expect("parse");
        assert_eq!(
            policy,
            Compaction::ON
                .with_lag_age_secs(129_600)
                .with_lag_messages(5)
                .with_lag_bytes(1 << 20)
                .with_deletes_secs(7_200)
        );
        assert_eq!(
            policy.to_string(),
            "age=36h; messages=5; bytes=1MiB; deletes=2h"
        );
        assert_eq!("ON".parse::<Compaction>(), Ok(Compaction::ON));
        assert_eq!(
            "messages=10".parse::<Compaction>().map(|p| p.to_string()),
            Ok("messages=10; deletes=1d".to_owned())
        );
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        for (text, reason) in [
            ("", "empty"),
            ("none", "not `key=value`"),
            ("messages=0", "above 0"),
            ("age=1h; age=2h", "twice"),
            ("lag=5", "unknown key"),
            ("bytes=10XB", "unknown unit"),
            ("deletes=7", "unknown unit"),
        ] {
            let err = text.parse::<Compaction>().expect_err(text);
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }

    fn change(key: &str, op: &str) -> Vec<u8> {
        format!(r#"{{"type":"t","key":"{key}","value":1,"headers":{{"operation":"{op}"}}}}"#)
            .into_bytes()
    }

    fn control(name: &str) -> Vec<u8> {
        format!(r#"{{"headers":{{"control":"{name}"}}}}"#).into_bytes()
    }

    /// The positions a whole pass keeps of `messages` (no marks: every
    /// delete is as young as the pass).
    fn kept(policy: &Compaction, messages: &[Vec<u8>]) -> Vec<usize> {
        let mut pass = Pass::new("p", 1, policy, &[], messages.len() as u64, 0);
        let mut kept: Vec<usize> = (0..messages.len())
            .rev()
            .filter(|&i| pass.examine(policy, i as u64, &messages[i], None) == Verdict::Keep)
            .collect();
        kept.reverse();
        kept
    }

    #[test]
    fn the_latest_change_of_each_row_stays() {
        let messages = [
            change("a", "insert"),
            change("b", "insert"),
            change("a", "update"),
            b"not json".to_vec(),
            change("b", "delete"),
            change("a", "upsert"),
        ];
        assert_eq!(kept(&Compaction::ON, &messages), [3, 4, 5]);
        let lagged = Compaction::ON.with_lag_messages(4);
        assert_eq!(kept(&lagged, &messages), [2, 3, 4, 5]);
        let by_bytes = Compaction::ON.with_lag_bytes(1);
        assert_eq!(kept(&by_bytes, &messages), [3, 4, 5]);
    }

    #[test]
    fn before_the_last_reset_only_open_snapshots_stay() {
        let messages = [
            change("a", "insert"),
            control("snapshot-start"),
            change("b", "insert"),
            control("snapshot-end"),
            control("snapshot-start"),
            control("reset"),
            change("c", "insert"),
            control("snapshot-end"),
        ];
        assert_eq!(kept(&Compaction::ON, &messages), [4, 5, 6, 7]);
    }

    #[test]
    fn old_deletes_go() {
        let policy = Compaction::ON.with_deletes_secs(10);
        let messages = [
            change("a", "insert"),
            change("a", "delete"),
            change("b", "delete"),
        ];
        let marks = [AgeMark { ms: 0, end: 2 }, AgeMark { ms: 9_000, end: 3 }];
        let mut pass = Pass::new("p", 1, &policy, &marks, 3, 10_000);
        let verdicts: Vec<Verdict> = (0..3u64)
            .rev()
            .map(|i| pass.examine(&policy, i, &messages[i as usize], appended_by_ms(&marks, i)))
            .collect();
        assert_eq!(
            verdicts,
            [Verdict::Keep, Verdict::DropDelete, Verdict::Drop]
        );
        assert_eq!(pass.delete_due_ms, Some(19_000));
    }
}
