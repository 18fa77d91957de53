//! A position in a DynamoDB stream: one mark per shard. DynamoDB Streams
//! orders records within a shard only (sequence numbers of two shards say
//! nothing about which came first), so the position names, for every shard
//! read, the last record done there and whether the (closed) shard is
//! finished.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

/// How far a consumer got in one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShardMark {
    /// The sequence number of the last record done in the shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The shard is closed and every record of it is done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// A consumer's position in a DynamoDB stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ShardPositions {
    shards: BTreeMap<String, ShardMark>,
    /// An older eddy's saved sequence number: a shard without a mark
    /// starts above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    floor: Option<String>,
}

#[cfg_attr(not(feature = "aws"), allow(dead_code))]
impl ShardPositions {
    /// No shard read yet, every shard starting above `floor`.
    pub fn above(floor: String) -> Self {
        Self {
            shards: BTreeMap::new(),
            floor: Some(floor),
        }
    }

    /// Where reading `shard` starts: after this sequence number (`None`:
    /// from the oldest record kept), and the floor a record must be above
    /// to count (an older eddy's position, for a shard without a mark).
    pub fn start(&self, shard: &str) -> (Option<&str>, Option<&str>) {
        match self.shards.get(shard) {
            Some(mark) => (mark.after.as_deref(), None),
            None => (None, self.floor.as_deref()),
        }
    }

    /// Whether every record of `shard` is done.
    pub fn done(&self, shard: &str) -> bool {
        self.shards.get(shard).is_some_and(|m| m.done)
    }

    /// Records that the record `sequence` of `shard` is done.
    pub fn advance(&mut self, shard: &str, sequence: &str) {
        self.shards.entry(shard.to_owned()).or_default().after = Some(sequence.to_owned());
    }

    /// Records that the (closed) shard is read to its end.
    pub fn finish(&mut self, shard: &str) {
        self.shards.entry(shard.to_owned()).or_default().done = true;
    }

    /// Forgets the shards the stream no longer lists (trimmed after 24
    /// hours): the position stays as small as the stream.
    pub fn keep_only<'a>(&mut self, listed: impl IntoIterator<Item = &'a str>) {
        let listed: HashSet<&str> = listed.into_iter().collect();
        self.shards.retain(|id, _| listed.contains(id.as_str()));
    }
}

/// Whether the record numbered `sequence` is at or below `floor`, both
/// decimal (DynamoDB's sequence numbers have up to 40 digits). A sequence
/// number that is not decimal is never below: read again, not lost.
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
pub(crate) fn at_or_below(sequence: &str, floor: &str) -> bool {
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !decimal(sequence) || !decimal(floor) {
        return false;
    }
    let (a, b) = (
        sequence.trim_start_matches('0'),
        floor.trim_start_matches('0'),
    );
    a.len().cmp(&b.len()).then_with(|| a.cmp(b)) != Ordering::Greater
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_without_a_mark_starts_above_the_floor() {
        let mut p = ShardPositions::above("4421584500000000017450439091".into());
        p.advance("shard-b", "200");
        assert_eq!(p.start("shard-b"), (Some("200"), None));
        assert_eq!(
            p.start("shard-x"),
            (None, Some("4421584500000000017450439091"))
        );
        assert_eq!(ShardPositions::default().start("shard-x"), (None, None));
    }

    #[test]
    fn shards_the_stream_no_longer_lists_are_forgotten() {
        let mut p = ShardPositions::default();
        p.advance("old", "1");
        p.advance("new", "2");
        p.keep_only(["new"]);
        assert_eq!(p.start("old"), (None, None));
        assert_eq!(p.start("new"), (Some("2"), None));
    }

    #[test]
    fn sequence_numbers_compare_as_numbers_of_any_length() {
        assert!(at_or_below("99", "100"));
        assert!(at_or_below("100", "100"));
        assert!(at_or_below("0100", "100"));
        assert!(!at_or_below("101", "100"));
        let forty = "9".repeat(40);
        assert!(at_or_below(&"9".repeat(39), &forty));
        assert!(!at_or_below(&forty, &"9".repeat(39)));
        assert!(!at_or_below("x", "100"));
    }
}
