//! Where a change-feed consumer of a DynamoDB stream is: one position per
//! shard. DynamoDB Streams orders records within a shard only (sequence
//! numbers of two shards say nothing about which came first), so the
//! position a `Follower` saves names, for every shard it has read, the last
//! record it finished there and whether the shard (closed) is done.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{TableError, ValidationError};

/// How far a consumer got in one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ShardMark {
    /// The sequence number of the last record done in the shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The shard is closed and every record of it is done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// A consumer's position in a stream: its text is JSON,
/// `{"shards":{"<shard id>":{"after":"<sequence>","done":true}}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StreamPosition {
    #[serde(default)]
    shards: BTreeMap<String, ShardMark>,
    /// A position saved by an older eddy, one sequence number for the
    /// whole stream: a shard without a mark starts after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    floor: Option<String>,
}

impl StreamPosition {
    /// Reads a saved position: this JSON, or a bare sequence number (an
    /// older eddy's position for the whole stream).
    pub fn parse(text: Option<&str>) -> Result<Self, TableError> {
        let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(Self::default());
        };
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Self {
                floor: Some(text.to_owned()),
                ..Self::default()
            });
        }
        serde_json::from_str(text).map_err(|e| {
            ValidationError::InvalidQuery(format!(
                "{text:?} is not a position in a DynamoDB stream: {e}"
            ))
            .into()
        })
    }

    /// The position's text.
    pub fn render(&self) -> String {
        // A map of strings and booleans always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Where reading `shard` starts: after this sequence number (`None`:
    /// from the oldest record kept), and whether a record must be above the
    /// floor of an older position to count (`Some(floor)`).
    pub fn start(&self, shard: &str) -> (Option<&str>, Option<u128>) {
        match self.shards.get(shard) {
            Some(mark) => (mark.after.as_deref(), None),
            None => (None, self.floor.as_deref().and_then(|f| f.parse().ok())),
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
        let listed: std::collections::HashSet<&str> = listed.into_iter().collect();
        self.shards.retain(|id, _| listed.contains(id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_round_trips_and_an_older_one_is_a_floor() {
        let mut p = StreamPosition::default();
        p.advance("shard-a", "300");
        p.finish("shard-a");
        p.advance("shard-b", "200");
        let text = p.render();
        assert_eq!(
            text,
            r#"{"shards":{"shard-a":{"after":"300","done":true},"shard-b":{"after":"200"}}}"#
        );
        let back = StreamPosition::parse(Some(&text)).unwrap();
        assert_eq!(back, p);
        assert!(back.done("shard-a") && !back.done("shard-b"));
        assert_eq!(back.start("shard-b"), (Some("200"), None));
        assert_eq!(back.start("shard-c"), (None, None));

        let older = StreamPosition::parse(Some("4421584500000000017450439091")).unwrap();
        assert_eq!(
            older.start("shard-x"),
            (None, Some(4421584500000000017450439091))
        );
        assert_eq!(
            StreamPosition::parse(None).unwrap(),
            StreamPosition::default()
        );
        assert_eq!(
            StreamPosition::parse(Some("shard=1")).unwrap_err().code(),
            "ValidationException"
        );
    }

    #[test]
    fn shards_the_stream_no_longer_lists_are_forgotten() {
        let mut p = StreamPosition::default();
        p.advance("old", "1");
        p.advance("new", "2");
        p.keep_only(["new"]);
        assert_eq!(p.start("old"), (None, None));
        assert_eq!(p.start("new"), (Some("2"), None));
    }
}
