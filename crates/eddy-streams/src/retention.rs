//! Retention: how much of a stream's history the store keeps.
//!
//! A [`Retention`] policy bounds a stream by its last N messages, its
//! last B bytes and the age of its data, in any combination. The store
//! drops the oldest messages past any bound in bounded background steps
//! (the sweep); offsets never change, and a read before the earliest
//! message kept is refused ([`OffsetDropped`](crate::StreamError::OffsetDropped)).
//!
//! The policy is written as `key=value` pairs separated by `;`:
//! `messages=1000; bytes=10MB; age=7d`. Sizes take `B` (or no unit),
//! `KB`, `MB`, `GB`, `TB` (powers of 1000) or `KiB`, `MiB`, `GiB`, `TiB`
//! (powers of 1024); ages need a unit: `s`, `m`, `h`, `d` or `w`. Every value is above 0.
//! `none` is the empty policy (keep everything).
//!
//! What the store keeps to apply it lives in [`Retained`]: the first
//! position kept and, for an age bound, a few marks of when the tail
//! was where.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::compaction::{Compacted, Compaction};

/// Which part of a stream's history the store keeps: everything by
/// default. Set at creation ([`StreamConfig::with_retention`]), it never
/// changes.
///
/// ```
/// use eddy_streams::Retention;
/// let policy: Retention = "messages=1000; bytes=10MB; age=7d".parse()?;
/// assert_eq!(policy.messages, Some(1000));
/// assert_eq!(policy.bytes, Some(10_000_000));
/// assert_eq!(policy.age_secs, Some(7 * 86_400));
/// assert_eq!(policy.to_string(), "messages=1000; bytes=10MB; age=7d");
/// # Ok::<(), eddy_streams::RetentionError>(())
/// ```
///
/// [`StreamConfig::with_retention`]: crate::StreamConfig::with_retention
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Retention {
    /// Keep at most this many of the newest messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
    /// Keep the newest messages whose sizes add up to at most this many
    /// bytes (and always the newest message, however large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Drop messages appended this many seconds ago or longer (the sweep
    /// may keep them up to a thirty-second part of the stream's longest
    /// age longer: this one, or its compaction policy's lag or delete
    /// lifetime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_secs: Option<u64>,
}

/// A policy that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid retention policy `{policy}`: {reason}; write it as `messages=1000; bytes=10MB; age=7d` (any of the three, each at most once, values above 0) or `none`")]
pub struct RetentionError {
    /// The policy as given (truncated when very long).
    pub policy: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Retention {
    /// Keeps everything: the default.
    pub const NONE: Retention = Retention {
        messages: None,
        bytes: None,
        age_secs: None,
    };

    /// Whether the policy keeps everything.
    pub fn is_none(&self) -> bool {
        *self == Retention::NONE
    }

    /// This policy, keeping at most `messages` messages.
    pub fn with_messages(mut self, messages: u64) -> Self {
        self.messages = Some(messages);
        self
    }

    /// This policy, keeping at most `bytes` bytes of messages.
    pub fn with_bytes(mut self, bytes: u64) -> Self {
        self.bytes = Some(bytes);
        self
    }

    /// This policy, dropping messages `secs` seconds old or older.
    pub fn with_age_secs(mut self, secs: u64) -> Self {
        self.age_secs = Some(secs);
        self
    }

    /// The age bound in milliseconds.
    pub(crate) fn age_ms(&self) -> Option<i64> {
        self.age_secs.map(secs_to_ms)
    }
}

/// Byte units; a bare number is bytes too.
pub(crate) const SIZE_UNITS: [(&str, u64); 10] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("KB", 1_000),
    ("B", 1),
    ("", 1),
];

pub(crate) const AGE_UNITS: [(&str, u64); 5] = [
    ("w", 7 * 86_400),
    ("d", 86_400),
    ("h", 3_600),
    ("m", 60),
    ("s", 1),
];

/// The longest policy text an error repeats.
pub(crate) const MAX_QUOTED: usize = 200;

impl FromStr for Retention {
    type Err = RetentionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| RetentionError {
            policy: text.chars().take(MAX_QUOTED).collect(),
            reason,
        };
        let trimmed = text.trim();
        if trimmed.eq_ignore_ascii_case("none") {
            return Ok(Retention::NONE);
        }
        let mut policy = Retention::NONE;
        for (key, value) in pairs(trimmed).map_err(fail)? {
            let (slot, parsed) = match key.to_ascii_lowercase().as_str() {
                "messages" => (&mut policy.messages, number(value, &[("", 1)])),
                "bytes" => (&mut policy.bytes, number(value, &SIZE_UNITS)),
                "age" => (&mut policy.age_secs, number(value, &AGE_UNITS)),
                _ => {
                    return Err(fail(format!(
                        "unknown key `{key}` (the keys are messages, bytes and age)"
                    )))
                }
            };
            set_once(slot, key, parsed).map_err(fail)?;
        }
        if policy.is_none() {
            return Err(fail("it sets no bound".into()));
        }
        Ok(policy)
    }
}

/// The `key=value` parts of a policy written as `key=value; …`, trimmed,
/// in order; empty parts are skipped.
pub(crate) fn pairs(text: &str) -> Result<Vec<(&str, &str)>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.split_once('=')
                .map(|(key, value)| (key.trim(), value.trim()))
                .ok_or_else(|| format!("`{part}` is not `key=value`"))
        })
        .collect()
}

/// Sets the bound `key` of a policy to `parsed`, refusing a key given
/// twice or a value that did not parse.
pub(crate) fn set_once(
    slot: &mut Option<u64>,
    key: &str,
    parsed: Result<u64, String>,
) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("`{key}` is given twice"));
    }
    *slot = Some(parsed.map_err(|reason| format!("`{key}`: {reason}"))?);
    Ok(())
}

/// Seconds as milliseconds, saturating.
pub(crate) fn secs_to_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// A positive integer with one of `units` (case-insensitive) after it.
pub(crate) fn number(value: &str, units: &[(&str, u64)]) -> Result<u64, String> {
    let digits = value.bytes().take_while(u8::is_ascii_digit).count();
    let (amount, unit) = value.split_at(digits);
    let amount: u64 = amount
        .parse()
        .map_err(|_| format!("`{value}` does not start with a whole number"))?;
    let unit = unit.trim();
    let scale = units
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|(_, scale)| *scale)
        .ok_or_else(|| {
            let names: Vec<&str> = units
                .iter()
                .map(|(name, _)| *name)
                .filter(|name| !name.is_empty())
                .collect();
            format!("unknown unit `{unit}` (use one of {})", names.join(", "))
        })?;
    match amount.checked_mul(scale) {
        Some(0) => Err("must be above 0".into()),
        Some(n) => Ok(n),
        None => Err(format!("`{value}` is too large")),
    }
}

/// `value` in the largest unit that divides it exactly.
pub(crate) fn with_unit(value: u64, units: &[(&str, u64)]) -> String {
    units
        .iter()
        .find(|(_, scale)| value % scale == 0)
        .map_or_else(
            || value.to_string(),
            |(name, scale)| format!("{}{name}", value / scale),
        )
}

impl fmt::Display for Retention {
    /// The canonical form: the bounds in the order messages, bytes, age,
    /// each in the largest unit that writes it exactly; `none` for none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(messages) = self.messages {
            parts.push(format!("messages={messages}"));
        }
        if let Some(bytes) = self.bytes {
            parts.push(format!("bytes={}", with_unit(bytes, &SIZE_UNITS)));
        }
        if let Some(secs) = self.age_secs {
            // Days at most: `7d` reads better than `1w`.
            parts.push(format!("age={}", with_unit(secs, &AGE_UNITS[1..])));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

/// The most age marks a stream keeps: past it, the oldest two merge
/// (later drops, never earlier ones).
const MAX_MARKS: usize = 64;

/// How many marks one age spans: a mark is started once per grid cell of
/// a thirty-second part of the age, so data is dropped at most that late.
const MARKS_PER_AGE: i64 = 32;

/// The shortest grid cell, in milliseconds.
const MIN_CELL_MS: i64 = 1000;

/// What the store keeps to apply a stream's retention: where its kept
/// messages start and, under an age bound, when its tail was where.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Retained {
    /// The first position kept: every message before it was dropped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first: u64,
    /// Age marks, oldest first: every message below `end` was appended
    /// at or before `ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<AgeMark>,
    /// What compaction keeps between passes (a compacted stream's; boxed,
    /// since records are moved around and most streams have none).
    #[serde(default, skip_serializing_if = "Compacted::is_empty")]
    pub compacted: Box<Compacted>,
}

/// One age mark (see [`Retained::marks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AgeMark {
    /// When, in unix milliseconds.
    pub ms: i64,
    /// The tail then.
    pub end: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Retained {
    /// Whether nothing was dropped and no mark is kept (the state of a
    /// stream without a policy).
    pub fn is_empty(&self) -> bool {
        self.first == 0 && self.marks.is_empty() && self.compacted.is_empty()
    }

    /// Notes that the tail reached `count` at `now_ms`, for the stream's
    /// ages: `age_ms` is the longest of them (retention's age, and
    /// compaction's lag and delete lifetime), whose thirty-second part is
    /// the marks' grid.
    pub fn appended(&mut self, age_ms: Option<i64>, count: u64, now_ms: i64) {
        let Some(age_ms) = age_ms else {
            return;
        };
        // Nothing appended since the last mark (or ever): nothing to date.
        if count == 0 || self.marks.last().is_some_and(|mark| mark.end == count) {
            return;
        }
        let cell_ms = (age_ms / MARKS_PER_AGE).max(MIN_CELL_MS);
        let mark = AgeMark {
            ms: now_ms,
            end: count,
        };
        match self.marks.last_mut() {
            Some(last) if last.ms.div_euclid(cell_ms) == now_ms.div_euclid(cell_ms) => {
                *last = mark;
            }
            _ => self.marks.push(mark),
        }
        if self.marks.len() > MAX_MARKS {
            self.marks.remove(0);
        }
    }

    /// The position below which the message and age bounds let messages
    /// go at `now_ms` (the byte bound needs the messages' sizes).
    pub fn droppable_below(&self, policy: &Retention, count: u64, now_ms: i64) -> u64 {
        let by_count = policy.messages.map_or(0, |keep| count.saturating_sub(keep));
        let by_age = policy.age_ms().map_or(0, |age_ms| {
            self.marks
                .iter()
                .take_while(|mark| mark.ms.saturating_add(age_ms) <= now_ms)
                .map(|mark| mark.end)
                .max()
                .unwrap_or(0)
        });
        by_count.max(by_age).min(count)
    }

    /// Records that every message below `first` is gone.
    pub fn dropped_below(&mut self, first: u64) {
        self.first = self.first.max(first);
        let first = self.first;
        self.marks.retain(|mark| mark.end > first);
    }

    /// When the sweep should next look at the stream, in unix
    /// milliseconds (`i64::MIN` for at once); `None` when nothing will be
    /// droppable until it changes. `count` and `bytes` are its messages'.
    pub fn due_ms(&self, policy: &Retention, count: u64, bytes: u64) -> Option<i64> {
        let kept = count.saturating_sub(self.first);
        let over_count = policy.messages.is_some_and(|keep| kept > keep);
        let over_bytes = policy.bytes.is_some_and(|keep| bytes > keep && kept > 1);
        if over_count || over_bytes {
            return Some(i64::MIN);
        }
        let age_ms = policy.age_ms()?;
        self.marks
            .iter()
            .find(|mark| mark.end > self.first)
            .map(|mark| mark.ms.saturating_add(age_ms))
    }
}

/// A stream's policy with what the store keeps to apply it, as the SQL
/// backends store it in one text column (JSON): `None` for a stream
/// without a policy that never dropped anything, the common case.
pub(crate) fn to_column(config: &crate::StreamConfig, retained: &Retained) -> Option<String> {
    if config.retention.is_none() && config.compaction.is_none() && retained.is_empty() {
        return None;
    }
    serde_json::to_string(&Column {
        policy: config.retention,
        compaction: config.compaction,
        retained: retained.clone(),
    })
    .ok()
}

/// The policies and state in the column written by [`to_column`].
pub(crate) type Policies = (Retention, Option<Compaction>, Retained);

/// The column written by [`to_column`], read back.
pub(crate) fn from_column(column: Option<&str>) -> Result<Policies, String> {
    match column {
        None => Ok(Default::default()),
        Some(text) => serde_json::from_str::<Column>(text)
            .map(|column| (column.policy, column.compaction, column.retained))
            .map_err(|err| format!("unreadable retention column `{text}`: {err}")),
    }
}

/// The column: retention's policy and state, and compaction's (which
/// shares the age marks and the sweep's due time).
#[derive(Serialize, Deserialize)]
struct Column {
    #[serde(default)]
    policy: Retention,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compaction: Option<Compaction>,
    #[serde(default)]
    retained: Retained,
}

/// The leading `sizes` (position, bytes) up to and with the first that
/// takes their total past `max_bytes`: what a sweep step weighs at least
/// ([`RecordReader::message_sizes`](crate::record::RecordReader::message_sizes)).
pub(crate) fn within_bytes<E>(
    sizes: impl IntoIterator<Item = Result<(u64, u64), E>>,
    max_bytes: u64,
) -> Result<Vec<(u64, u64)>, E> {
    let mut weighed = Vec::new();
    let mut total = 0u64;
    for size in sizes {
        if total > max_bytes {
            break;
        }
        let (position, bytes) = size?;
        total = total.saturating_add(bytes);
        weighed.push((position, bytes));
    }
    Ok(weighed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weigh(sizes: &[u64], max_bytes: u64) -> Vec<u64> {
        let sizes = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Ok::<_, ()>((i as u64 * 2, s)));
        let weighed = within_bytes(sizes, max_bytes).unwrap_or_default();
        weighed.into_iter().map(|(_, size)| size).collect()
    }

    /// A step that may free `max_bytes` weighs what it may drop and the
    /// message that would take it past the bound, and no further; a
    /// first message larger than the bound is weighed alone.
    #[test]
    fn weighing_stops_at_the_message_past_the_bound() {
        assert_eq!(weigh(&[4, 4, 4, 4], 8), [4, 4, 4]);
        assert_eq!(weigh(&[4, 4, 4, 4], 9), [4, 4, 4]);
        assert_eq!(weigh(&[4, 4, 4, 4], 7), [4, 4]);
        assert_eq!(weigh(&[20, 1, 1], 8), [20]);
        assert_eq!(weigh(&[1, 1], 100), [1, 1]);
        assert_eq!(weigh(&[], 100), Vec::<u64>::new());
    }

    /// A failed read of a size is the answer, not a shorter list.
    #[test]
    fn weighing_passes_on_a_failed_read() {
        let sizes = [Ok((0, 1)), Err("disk"), Ok((2, 1))];
        assert_eq!(within_bytes(sizes, 100), Err("disk"));
    }

    #[test]
    fn policies_parse_in_any_order_and_print_canonically() {
        let policy: Retention = " age = 36h ;messages=5; bytes=1MiB ;"
            .parse()
            .expect("parse");
        assert_eq!(
            policy,
            Retention::NONE
                .with_messages(5)
                .with_bytes(1 << 20)
                .with_age_secs(129_600)
        );
        assert_eq!(policy.to_string(), "messages=5; bytes=1MiB; age=36h");
        assert_eq!(
            "bytes=1500"
                .parse::<Retention>()
                .expect("parse")
                .to_string(),
            "bytes=1500B"
        );
        assert_eq!("none".parse::<Retention>(), Ok(Retention::NONE));
        assert_eq!(Retention::NONE.to_string(), "none");
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        for (text, reason) in [
            ("", "no bound"),
            ("messages", "not `key=value`"),
            ("messages=0", "above 0"),
            ("messages=5; messages=6", "twice"),
            ("size=5", "unknown key"),
            ("bytes=10XB", "unknown unit"),
            ("age=7", "unknown unit"),
            ("age=-1d", "whole number"),
            ("bytes=99999999999999999999", "whole number"),
            ("bytes=20000000TB", "too large"),
        ] {
            let err = text.parse::<Retention>().expect_err(text);
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn age_marks_stay_few_and_drop_late_never_early() {
        let policy = Retention::NONE.with_age_secs(32);
        let mut retained = Retained::default();
        // One append a tenth of a second for 100 s: one mark a second.
        for n in 1..=1000u64 {
            retained.appended(policy.age_ms(), n, n as i64 * 100);
        }
        assert!(
            retained.marks.len() <= MAX_MARKS,
            "{}",
            retained.marks.len()
        );
        let now = 100_000;
        let below = retained.droppable_below(&policy, 1000, now);
        // Messages appended at or before 68 s may go (the 680th and
        // before); none later.
        assert!((670..=680).contains(&below), "{below}");
    }
}
