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

/// How a state stream is compacted, as Kafka compacts a topic: the head
/// (the newest messages within the lag) is never touched; before it, a
/// change that a later change of the same row supersedes is dropped, a
/// delete once its lifetime is over, and everything before the last
/// `reset`; a message that is not a state message always stays. Offsets
/// never change. Set at creation ([`StreamConfig::with_compaction`]), it
/// never changes.
///
/// [`StreamConfig::with_compaction`]: crate::StreamConfig::with_compaction
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Compaction {
    /// The head keeps at least the messages appended this many seconds
    /// ago or later (it may keep them up to a thirty-second part of the
    /// stream's longest age longer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_age_secs: Option<u64>,
    /// The head keeps at least this many of the newest messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_messages: Option<u64>,
    /// The head keeps at least the newest messages whose sizes add up to
    /// this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<u64>,
    /// How long a delete is kept after it was appended, in seconds.
    #[serde(default = "default_deletes")]
    pub deletes_secs: u64,
}

/// One day, as Kafka's `delete.retention.ms`.
const DEFAULT_DELETES_SECS: u64 = 86_400;

fn default_deletes() -> u64 {
    DEFAULT_DELETES_SECS
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction::ON
    }
}

/// A policy that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid compaction policy `{policy}`: {reason}; write it as `age=1h; messages=1000; bytes=10MB; deletes=1d` (any of the four, each at most once, values above 0) or `on`")]
pub struct CompactionError {
    /// The policy as given (truncated when very long).
    pub policy: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Compaction {
    /// Compacts up to the tail and keeps deletes one day.
    pub const ON: Compaction = Compaction {
        lag_age_secs: None,
        lag_messages: None,
        lag_bytes: None,
        deletes_secs: DEFAULT_DELETES_SECS,
    };

    /// This policy, keeping the messages of the last `secs` seconds in full.
    pub fn with_lag_age_secs(mut self, secs: u64) -> Self {
        self.lag_age_secs = Some(secs);
        self
    }

    /// This policy, keeping the newest `messages` messages in full.
    pub fn with_lag_messages(mut self, messages: u64) -> Self {
        self.lag_messages = Some(messages);
        self
    }

    /// This policy, keeping the newest `bytes` bytes of messages in full.
    pub fn with_lag_bytes(mut self, bytes: u64) -> Self {
        self.lag_bytes = Some(bytes);
        self
    }

    /// This policy, keeping deletes `secs` seconds.
    pub fn with_deletes_secs(mut self, secs: u64) -> Self {
        self.deletes_secs = secs;
        self
    }

    /// The lag's age in milliseconds.
    pub(crate) fn lag_age_ms(&self) -> Option<i64> {
        self.lag_age_secs.map(secs_to_ms)
    }

    /// The delete lifetime in milliseconds.
    pub(crate) fn deletes_ms(&self) -> i64 {
        secs_to_ms(self.deletes_secs)
    }

    /// The end of what may be compacted at `now_ms` as far as the message
    /// and age bounds tell (the byte bound needs the messages' sizes).
    fn end_before_bytes(&self, marks: &[AgeMark], count: u64, now_ms: i64) -> u64 {
        let by_messages = self
            .lag_messages
            .map_or(count, |keep| count.saturating_sub(keep));
        let by_age = self.lag_age_ms().map_or(count, |age_ms| {
            marks
                .iter()
                .take_while(|mark| mark.ms.saturating_add(age_ms) <= now_ms)
                .map(|mark| mark.end)
                .max()
                .unwrap_or(0)
        });
        by_messages.min(by_age).min(count)
    }
}

impl FromStr for Compaction {
    type Err = CompactionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| CompactionError {
            policy: text.chars().take(MAX_QUOTED).collect(),
            reason,
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("on") {
            return Ok(Compaction::ON);
        }
        let mut policy = Compaction::ON;
        let mut deletes = None;
        let mut any = false;
        for (key, value) in pairs(trimmed).map_err(fail)? {
            let (slot, parsed) = match key.to_ascii_lowercase().as_str() {
                "age" => (&mut policy.lag_age_secs, number(value, &AGE_UNITS)),
                "messages" => (&mut policy.lag_messages, number(value, &[("", 1)])),
                "bytes" => (&mut policy.lag_bytes, number(value, &SIZE_UNITS)),
                "deletes" => (&mut deletes, number(value, &AGE_UNITS)),
                _ => {
                    return Err(fail(format!(
                        "unknown key `{key}` (the keys are age, messages, bytes and deletes)"
                    )))
                }
            };
            set_once(slot, key, parsed).map_err(fail)?;
            any = true;
        }
        if !any {
            return Err(fail("it is empty".into()));
        }
        if let Some(secs) = deletes {
            policy.deletes_secs = secs;
        }
        Ok(policy)
    }
}

impl fmt::Display for Compaction {
    /// The canonical form: the bounds in the order age, messages, bytes,
    /// deletes, each in the largest unit that writes it exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(secs) = self.lag_age_secs {
            parts.push(format!("age={}", with_unit(secs, &AGE_UNITS[1..])));
        }
        if let Some(messages) = self.lag_messages {
            parts.push(format!("messages={messages}"));
        }
        if let Some(bytes) = self.lag_bytes {
            parts.push(format!("bytes={}", with_unit(bytes, &SIZE_UNITS)));
        }
        parts.push(format!(
            "deletes={}",
            with_unit(self.deletes_secs, &AGE_UNITS[1..])
        ));
        f.write_str(&parts.join("; "))
    }
}

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

/// What a compaction pass decides about one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It stays.
    Keep,
    /// It goes.
    Drop,
    /// It goes, and it is a delete past its lifetime: a reader that read
    /// an earlier change of its row but not it keeps the row.
    DropDelete,
}

/// Deletes past their lifetime that some drops of a pass take out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeletesDropped {
    /// How many.
    pub count: u64,
    /// The position after the highest of them.
    pub below: u64,
}

impl DeletesDropped {
    /// These and the one at `position`.
    pub fn and(self, position: u64) -> Self {
        DeletesDropped {
            count: self.count + 1,
            below: self.below.max(position + 1),
        }
    }
}

/// The part of a state message compaction looks at.
#[derive(Deserialize)]
struct Shape {
    #[serde(rename = "type")]
    collection: Option<String>,
    key: Option<String>,
    headers: Option<ShapeHeaders>,
}

#[derive(Deserialize)]
struct ShapeHeaders {
    operation: Option<String>,
    control: Option<String>,
}

/// A message as compaction sees it.
enum Kind {
    Change {
        row: (String, String),
        delete: bool,
    },
    Reset,
    SnapshotStart,
    SnapshotEnd,
    /// Anything else: never dropped.
    Other,
}

fn kind(message: &[u8]) -> Kind {
    let Ok(shape) = serde_json::from_slice::<Shape>(message) else {
        return Kind::Other;
    };
    let Some(headers) = shape.headers else {
        return Kind::Other;
    };
    match (headers.operation.as_deref(), headers.control.as_deref()) {
        (Some(operation), None) => {
            let (Some(collection), Some(key)) = (shape.collection, shape.key) else {
                return Kind::Other;
            };
            let delete = match operation {
                "delete" => true,
                "insert" | "update" | "upsert" => false,
                _ => return Kind::Other,
            };
            Kind::Change {
                row: (collection, key),
                delete,
            }
        }
        (None, Some("reset")) => Kind::Reset,
        (None, Some("snapshot-start")) => Kind::SnapshotStart,
        (None, Some("snapshot-end")) => Kind::SnapshotEnd,
        _ => Kind::Other,
    }
}

/// One compaction pass of one stream: what it learned reading the stream
/// backwards from the tail it started at.
#[derive(Debug)]
pub(crate) struct Pass {
    /// The stream's path and incarnation.
    pub path: String,
    pub incarnation: u64,
    /// The stream's count when the pass started: it looks below.
    pub tail: u64,
    /// The pass looked at every message from here to `tail`.
    pub cursor: u64,
    /// The end of what it may drop, before the byte bound.
    end: u64,
    /// The size of the messages it passed, for the byte bound.
    passed_bytes: u64,
    /// Whether the byte bound's head ended.
    past_bytes: bool,
    /// The end of what it may drop (the byte bound included), once known.
    pub compactable_end: Option<u64>,
    /// The rows met, by (collection, key).
    rows: HashSet<(String, String)>,
    /// Whether a reset was met.
    after_reset: bool,
    /// Whether the last snapshot control before the reset was met.
    snapshot_met: bool,
    /// Messages kept below `compactable_end`.
    pub kept: u64,
    /// When the oldest delete kept may go.
    pub delete_due_ms: Option<i64>,
    /// When the pass started, in unix ms: deletes age against it.
    now_ms: i64,
}

impl Pass {
    /// A pass over the stream's messages below `count` at `now_ms`.
    pub fn new(
        path: &str,
        incarnation: u64,
        policy: &Compaction,
        marks: &[AgeMark],
        count: u64,
        now_ms: i64,
    ) -> Self {
        Pass {
            path: path.to_owned(),
            incarnation,
            tail: count,
            cursor: count,
            end: policy.end_before_bytes(marks, count, now_ms),
            passed_bytes: 0,
            past_bytes: policy.lag_bytes.is_none(),
            compactable_end: None,
            rows: HashSet::new(),
            after_reset: false,
            snapshot_met: false,
            kept: 0,
            delete_due_ms: None,
            now_ms,
        }
    }

    /// The end of what the pass may drop: the byte bound's part is known
    /// once the pass went past it.
    pub fn end(&self) -> u64 {
        self.compactable_end.unwrap_or(self.end)
    }

    /// Decides about the message at `position`, the one before the last
    /// one passed. `appended_by_ms` is when it was appended at the latest
    /// (`None`: not known, taken as now).
    pub fn examine(
        &mut self,
        policy: &Compaction,
        position: u64,
        message: &[u8],
        appended_by_ms: Option<i64>,
    ) -> Verdict {
        self.cursor = position;
        self.passed_bytes = self.passed_bytes.saturating_add(message.len() as u64);
        if !self.past_bytes {
            // The byte bound keeps the newest messages up to its size.
            if policy
                .lag_bytes
                .is_some_and(|keep| self.passed_bytes > keep)
            {
                self.past_bytes = true;
                self.compactable_end = Some(self.end.min(position + 1));
            }
        } else if self.compactable_end.is_none() {
            self.compactable_end = Some(self.end);
        }
        let in_head = position >= self.end() || !self.past_bytes;
        let verdict = self.decide(policy, kind(message), in_head, appended_by_ms);
        if verdict == Verdict::Keep && !in_head {
            self.kept += 1;
        }
        verdict
    }

    fn decide(
        &mut self,
        policy: &Compaction,
        kind: Kind,
        in_head: bool,
        appended_by_ms: Option<i64>,
    ) -> Verdict {
        let keep_if = |keep: bool| {
            if keep || in_head {
                Verdict::Keep
            } else {
                Verdict::Drop
            }
        };
        if self.after_reset {
            // Before the last reset: everything but the last snapshot
            // control when it opens a snapshot (a reader's snapshot state
            // after the reset is what that one left).
            return match kind {
                Kind::Other => Verdict::Keep,
                Kind::SnapshotStart | Kind::SnapshotEnd => {
                    let last = !self.snapshot_met;
                    self.snapshot_met = true;
                    keep_if(last && matches!(kind, Kind::SnapshotStart))
                }
                Kind::Change { .. } | Kind::Reset => keep_if(false),
            };
        }
        match kind {
            Kind::Other | Kind::SnapshotStart | Kind::SnapshotEnd => Verdict::Keep,
            Kind::Reset => {
                self.after_reset = true;
                Verdict::Keep
            }
            Kind::Change { row, delete } => {
                if self.rows.contains(&row) {
                    return keep_if(false);
                }
                self.rows.insert(row);
                if !delete {
                    return Verdict::Keep;
                }
                let due = appended_by_ms
                    .unwrap_or(self.now_ms)
                    .saturating_add(policy.deletes_ms());
                if due <= self.now_ms && !in_head {
                    return Verdict::DropDelete;
                }
                if !in_head {
                    self.delete_due_ms = Some(self.delete_due_ms.map_or(due, |d| d.min(due)));
                }
                Verdict::Keep
            }
        }
    }

    /// What the stream keeps once the pass looked at every message.
    pub fn finish(&self, dropped_before: u64) -> Compacted {
        // A stream within the byte bound: nothing was compactable.
        let end = if self.past_bytes {
            self.end()
        } else {
            self.cursor.min(self.end)
        };
        Compacted {
            end,
            kept: self.kept,
            tail: self.tail,
            dropped: dropped_before,
            delete_due_ms: self.delete_due_ms,
            ..Compacted::default()
        }
    }
}

/// When the message at `position` was appended at the latest, as the age
/// marks tell (`None` past the last mark).
pub(crate) fn appended_by_ms(marks: &[AgeMark], position: u64) -> Option<i64> {
    marks
        .iter()
        .find(|mark| mark.end > position)
        .map(|mark| mark.ms)
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
