//! JSON shapes of Eddy's own endpoints, shared by the server and the
//! remote client.

use std::time::{Duration, UNIX_EPOCH};

use eddy_streams::{DroppedDeletes, Expiry, Offset, StreamConfig, StreamInfo};

/// One stream in a listing.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedStream {
    /// The stream path.
    pub path: String,
    /// Its content type.
    pub content_type: String,
    /// Its sliding time to live, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Its fixed expiry, in unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// Whether it was created closed.
    pub created_closed: bool,
    /// Whether it is closed now.
    pub closed: bool,
    /// Its tail.
    pub tail: Offset,
    /// The bytes it holds.
    pub bytes: u64,
    /// Its retention policy (`Eddy-Retention`'s grammar), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
    /// Its compaction policy (`Eddy-Compaction`'s grammar), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<String>,
    /// The offset of its first message kept, when retention dropped some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest: Option<Offset>,
    /// The offset after the highest delete its compaction dropped past
    /// its lifetime (`Eddy-Deletes-Dropped-Before`), if it dropped one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes_dropped_before: Option<Offset>,
    /// How many deletes its compaction dropped past their lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes_dropped: Option<u64>,
}

/// One page of a listing (`GET /_eddy/streams?limit=N&after=PATH`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedPage {
    /// The page's streams, sorted by path.
    pub streams: Vec<ListedStream>,
    /// Where the next page starts (its `after`); `null` on the last page.
    pub next: Option<String>,
}

/// One page of a listing of paths alone
/// (`GET /_eddy/streams?paths=true&limit=N&after=PATH`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedPaths {
    /// The page's paths, sorted (see [`eddy_streams::PathPage::paths`]).
    pub paths: Vec<String>,
    /// Where the next page starts (its `after`); `null` on the last page.
    pub next: Option<String>,
}

/// The answer of a compaction pass run through the server
/// (`POST /_eddy/compact/PATH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// The messages the pass dropped.
    pub dropped: u64,
    /// The bytes the stream keeps after it.
    pub bytes: u64,
}

impl From<&StreamInfo> for ListedStream {
    fn from(info: &StreamInfo) -> Self {
        let (ttl_secs, expires_at_ms) = match info.config.expiry {
            Expiry::Never => (None, None),
            Expiry::Ttl(secs) => (Some(secs), None),
            Expiry::At(at) => (
                None,
                Some(
                    at.duration_since(UNIX_EPOCH)
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                        .unwrap_or(0),
                ),
            ),
        };
        ListedStream {
            path: info.path.clone(),
            content_type: info.config.content_type.clone(),
            ttl_secs,
            expires_at_ms,
            created_closed: info.config.closed,
            closed: info.closed,
            tail: info.tail,
            bytes: info.bytes,
            retention: (!info.config.retention.is_none())
                .then(|| info.config.retention.to_string()),
            compaction: info.config.compaction.map(|policy| policy.to_string()),
            earliest: (info.earliest.position() > 0).then_some(info.earliest),
            deletes_dropped_before: info.dropped_deletes.map(|d| d.before),
            deletes_dropped: info.dropped_deletes.map(|d| d.count),
        }
    }
}

impl From<ListedStream> for StreamInfo {
    fn from(listed: ListedStream) -> Self {
        let expiry = match (listed.ttl_secs, listed.expires_at_ms) {
            (Some(secs), _) => Expiry::Ttl(secs),
            (None, Some(ms)) => Expiry::At(UNIX_EPOCH + Duration::from_millis(ms)),
            (None, None) => Expiry::Never,
        };
        StreamInfo {
            path: listed.path,
            config: StreamConfig {
                content_type: listed.content_type,
                expiry,
                closed: listed.created_closed,
                // A policy the server wrote always parses.
                retention: listed
                    .retention
                    .and_then(|text| text.parse().ok())
                    .unwrap_or_default(),
                compaction: listed.compaction.and_then(|text| text.parse().ok()),
            },
            closed: listed.closed,
            earliest: listed.earliest.unwrap_or(listed.tail.with_position(0)),
            tail: listed.tail,
            bytes: listed.bytes,
            dropped_deletes: listed.deletes_dropped_before.map(|before| DroppedDeletes {
                before,
                count: listed.deletes_dropped.unwrap_or(0),
            }),
        }
    }
}
