//! [`FeedPosition`]: where a consumer of a change feed is, as the feed
//! handed it out. A position is a type of its own, never a record's
//! sequence number: the embedded table's log is one order, so a position
//! there is the last record done; DynamoDB Streams orders records within a
//! shard only, so a position there names the last record done in every
//! shard.
//!
//! See [`FeedPosition`] for its text form and the upgrade path.

mod shards;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[cfg_attr(not(feature = "aws"), allow(unused_imports))]
pub(crate) use shards::{at_or_below, ShardPositions};

/// Where a consumer of a [`ChangeFeed`](crate::ChangeFeed) is: the
/// position after a record, as the feed handed it out with the record
/// ([`FeedRead`](crate::FeedRead)). Save it with its text form
/// (`to_string`, serde) and pass it back to read on.
///
/// # Text form
///
/// A position's text (its `Display`, `FromStr` and serde form) is a JSON
/// object whose `feed` says which kind of feed it belongs to:
///
/// - `{"feed":"embedded","after":42}`: after record 42 of an embedded
///   table's log;
/// - `{"feed":"dynamodb-streams","shards":{"<shard id>":{"after":"<sequence>","done":true}}}`:
///   per shard of a DynamoDB stream, the last record done and whether the
///   (closed) shard is finished; shards the stream no longer lists are
///   dropped as the position moves on;
/// - `{"feed":"upgraded","after":"<sequence>"}`: a sequence number saved
///   by an older eddy (below).
///
/// # Upgrading a position saved by an older eddy
///
/// Before positions had a type, eddy saved a record's sequence number.
/// [`FeedPosition::upgrade`] reads such a value (and a DynamoDB stream's
/// per-shard JSON written before positions named their feed) explicitly;
/// the strict parse refuses it. An upgraded sequence number is a floor: the embedded table
/// reads after it (its sequence numbers are its order); DynamoDB Streams
/// reads each shard it has no mark for from its oldest record, skipping
/// the records numbered at or below the floor before the batch limit
/// counts. Sequence numbers of different shards say nothing about which
/// record came first, so on a stream of several shards the floor can skip
/// records of another shard that an older eddy had not read (as that eddy
/// itself would have); the first record read in a shard replaces the floor
/// there with an exact mark.
///
/// ```
/// use eddy_dynamo::FeedPosition;
///
/// let saved = r#"{"feed":"embedded","after":42}"#;
/// let position: FeedPosition = saved.parse()?;
/// assert_eq!(position.to_string(), saved);
///
/// // A bare sequence number is not a position…
/// let err = "000000000000000000042".parse::<FeedPosition>().unwrap_err();
/// assert_eq!(err.code(), "feed-position/invalid");
/// // …unless it is read on purpose as an older eddy's saved value.
/// let upgraded = FeedPosition::upgrade("000000000000000000042")?;
/// assert_eq!(upgraded.to_string(), r#"{"feed":"upgraded","after":"000000000000000000042"}"#);
/// # Ok::<(), eddy_dynamo::PositionError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedPosition(Kind);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "feed", deny_unknown_fields)]
enum Kind {
    /// After this record of an embedded table's log.
    #[serde(rename = "embedded")]
    Embedded { after: u64 },
    /// Per shard of a DynamoDB stream.
    #[serde(rename = "dynamodb-streams")]
    Streams(ShardPositions),
    /// An older eddy's saved sequence number: a floor.
    #[serde(rename = "upgraded")]
    Upgraded { after: String },
}

/// A position that cannot be read, or not by this feed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PositionError {
    /// The text is not a position.
    #[error("{text:?} is not a change-feed position ({reason}); save the position a feed hands out with each record")]
    Invalid {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The position belongs to another kind of feed.
    #[error("a position in {position} cannot be read by {feed}: each feed reads only the positions it handed out (a consumer moved to another feed starts over, or from a position of that feed)")]
    OtherFeed {
        /// The kind of feed the position belongs to.
        position: &'static str,
        /// The kind of feed it was given to.
        feed: &'static str,
    },
}

impl PositionError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            PositionError::Invalid { .. } => "feed-position/invalid",
            PositionError::OtherFeed { .. } => "feed-position/other-feed",
        }
    }
}

/// The feed kinds, as errors name them.
const EMBEDDED: &str = "an embedded table's change feed";
const STREAMS: &str = "a DynamoDB stream";

impl FeedPosition {
    /// Reads a saved position: its text form, or a value an older eddy
    /// saved — a record's sequence number (a floor, see
    /// [above](FeedPosition#upgrading-a-position-saved-by-an-older-eddy))
    /// or a DynamoDB stream's per-shard JSON without `feed`.
    pub fn upgrade(saved: &str) -> Result<Self, PositionError> {
        let text = saved.trim();
        if is_sequence_number(text) {
            return Ok(Self(Kind::Upgraded {
                after: text.to_owned(),
            }));
        }
        text.parse().or_else(|e| {
            serde_json::from_str::<ShardPositions>(text)
                .map(|shards| Self(Kind::Streams(shards)))
                .map_err(|_| e)
        })
    }

    /// The position after record `sequence` of an embedded table's log.
    pub(crate) fn embedded(sequence: u64) -> Self {
        Self(Kind::Embedded { after: sequence })
    }

    /// A position in a DynamoDB stream.
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub(crate) fn streams(shards: ShardPositions) -> Self {
        Self(Kind::Streams(shards))
    }

    /// The record of an embedded table's log this position is after.
    pub(crate) fn embedded_after(&self) -> Result<u64, PositionError> {
        match &self.0 {
            Kind::Embedded { after } => Ok(*after),
            Kind::Upgraded { after } => after.parse().map_err(|_| PositionError::Invalid {
                text: after.clone(),
                reason: "not a sequence number of an embedded table's log".into(),
            }),
            Kind::Streams(_) => Err(PositionError::OtherFeed {
                position: STREAMS,
                feed: EMBEDDED,
            }),
        }
    }

    /// The per-shard position in a DynamoDB stream (an upgraded sequence
    /// number is a floor for every shard).
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub(crate) fn shard_positions(&self) -> Result<ShardPositions, PositionError> {
        match &self.0 {
            Kind::Streams(shards) => Ok(shards.clone()),
            Kind::Upgraded { after } => Ok(ShardPositions::above(after.clone())),
            Kind::Embedded { .. } => Err(PositionError::OtherFeed {
                position: EMBEDDED,
                feed: STREAMS,
            }),
        }
    }
}

/// Whether `text` is a bare decimal sequence number.
fn is_sequence_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

impl fmt::Display for FeedPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Maps of strings, numbers and booleans always serialize.
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl FromStr for FeedPosition {
    type Err = PositionError;

    /// The text form only: a bare sequence number is refused (read an
    /// older eddy's saved value with [`FeedPosition::upgrade`]).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| PositionError::Invalid {
            text: text.to_owned(),
            reason,
        };
        if is_sequence_number(text.trim()) {
            return Err(invalid(
                "a bare sequence number; a value an older eddy saved is read with FeedPosition::upgrade".into(),
            ));
        }
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(position: &FeedPosition) {
        let text = position.to_string();
        assert_eq!(&text.parse::<FeedPosition>().unwrap(), position, "{text}");
        assert_eq!(&FeedPosition::upgrade(&text).unwrap(), position, "{text}");
        let json = serde_json::to_value(position).unwrap();
        assert_eq!(
            &serde_json::from_value::<FeedPosition>(json).unwrap(),
            position
        );
    }

    #[test]
    fn every_kind_round_trips_through_its_text() {
        let embedded = FeedPosition::embedded(42);
        assert_eq!(embedded.to_string(), r#"{"feed":"embedded","after":42}"#);
        round_trip(&embedded);

        let mut shards = ShardPositions::default();
        shards.advance("shard-a", "300");
        shards.finish("shard-a");
        shards.advance("shard-b", "200");
        let streams = FeedPosition::streams(shards);
        assert_eq!(
            streams.to_string(),
            r#"{"feed":"dynamodb-streams","shards":{"shard-a":{"after":"300","done":true},"shard-b":{"after":"200"}}}"#
        );
        round_trip(&streams);

        let upgraded = FeedPosition::upgrade(" 4421584500000000017450439091 ").unwrap();
        assert_eq!(
            upgraded.to_string(),
            r#"{"feed":"upgraded","after":"4421584500000000017450439091"}"#
        );
        round_trip(&upgraded);
    }

    #[test]
    fn a_sequence_number_is_a_position_only_through_upgrade() {
        let err = "300".parse::<FeedPosition>().unwrap_err();
        assert_eq!(err.code(), "feed-position/invalid");
        assert!(err.to_string().contains("FeedPosition::upgrade"), "{err}");
        let upgraded = FeedPosition::upgrade("300").unwrap();
        assert_eq!(upgraded.embedded_after(), Ok(300));
        assert_eq!(
            upgraded.shard_positions().unwrap(),
            ShardPositions::above("300".into())
        );
    }

    #[test]
    fn per_shard_json_without_a_feed_is_upgraded_to_a_streams_position() {
        let old = r#"{"shards":{"shard-a":{"after":"300"}}}"#;
        assert_eq!(
            old.parse::<FeedPosition>().unwrap_err().code(),
            "feed-position/invalid"
        );
        let position = FeedPosition::upgrade(old).unwrap();
        let mut shards = ShardPositions::default();
        shards.advance("shard-a", "300");
        assert_eq!(position, FeedPosition::streams(shards));
    }

    #[test]
    fn a_position_of_one_kind_of_feed_is_refused_by_the_other() {
        let err = FeedPosition::embedded(7).shard_positions().unwrap_err();
        assert_eq!(err.code(), "feed-position/other-feed");
        let streams = FeedPosition::streams(ShardPositions::default());
        assert_eq!(
            streams.embedded_after().unwrap_err().code(),
            "feed-position/other-feed"
        );
    }

    #[test]
    fn malformed_text_is_invalid() {
        for text in [
            "",
            "{}",
            "shard=1",
            r#"{"feed":"kafka","after":1}"#,
            r#"{"feed":"embedded","after":-1}"#,
        ] {
            let err = text.parse::<FeedPosition>().unwrap_err();
            assert_eq!(err.code(), "feed-position/invalid", "{text}");
            assert!(FeedPosition::upgrade(text).is_err(), "{text}");
        }
        let err = FeedPosition::upgrade("12a").unwrap_err();
        assert_eq!(err.code(), "feed-position/invalid");
    }
}
