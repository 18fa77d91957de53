//! What a stream is created with, and what the store reports about it.

use std::time::{Duration, SystemTime};

use crate::{Compaction, Offset, Retention};

/// The content type of JSON streams.
pub const JSON: &str = "application/json";

/// The default content type of byte streams.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// How long a stream lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expiry {
    /// The stream lives until deleted.
    #[default]
    Never,
    /// The stream expires this many seconds after it was last read or
    /// appended to (a sliding time to live).
    Ttl(u64),
    /// The stream expires at a fixed time.
    At(SystemTime),
}

/// The configuration a stream is created with.
///
/// Creating a stream that exists succeeds when the configurations are
/// [equivalent](StreamConfig::equivalent) and fails with a conflict otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// The MIME type of the messages; `application/json` makes a JSON stream.
    pub content_type: String,
    /// When the stream expires.
    pub expiry: Expiry,
    /// Whether the stream is closed at creation.
    pub closed: bool,
    /// How much of its history the store keeps.
    pub retention: Retention,
    /// How the store compacts it (a JSON state stream's), if it does.
    pub compaction: Option<Compaction>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig::bytes(OCTET_STREAM)
    }
}

impl StreamConfig {
    /// A JSON stream: each message is one JSON value.
    pub fn json() -> Self {
        StreamConfig::bytes(JSON)
    }

    /// A byte stream of the given content type.
    pub fn bytes(content_type: impl Into<String>) -> Self {
        StreamConfig {
            content_type: content_type.into(),
            expiry: Expiry::Never,
            closed: false,
            retention: Retention::NONE,
            compaction: None,
        }
    }

    /// This configuration with a sliding time to live.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.expiry = Expiry::Ttl(ttl.as_secs());
        self
    }

    /// This configuration with a fixed expiry time.
    pub fn with_expires_at(mut self, at: SystemTime) -> Self {
        self.expiry = Expiry::At(at);
        self
    }

    /// This configuration with a retention policy.
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// This configuration with a compaction policy (a JSON stream's only:
    /// the store refuses it on other streams).
    pub fn with_compaction(mut self, compaction: Compaction) -> Self {
        self.compaction = Some(compaction);
        self
    }

    /// This configuration, closed at creation.
    pub fn closed(mut self) -> Self {
        self.closed = true;
        self
    }

    /// Whether this stream holds JSON values.
    pub fn is_json(&self) -> bool {
        is_json(&self.content_type)
    }

    /// Whether `other` describes the same stream (content types compare
    /// case-insensitively and without parameters).
    pub fn equivalent(&self, other: &StreamConfig) -> bool {
        same_media_type(&self.content_type, &other.content_type)
            && expiry_key(self.expiry) == expiry_key(other.expiry)
            && self.closed == other.closed
            && self.retention == other.retention
            && self.compaction == other.compaction
    }
}

/// Expiry compared at the millisecond precision the backends store.
fn expiry_key(expiry: Expiry) -> (u8, i64) {
    match expiry {
        Expiry::Never => (0, 0),
        Expiry::Ttl(secs) => (1, i64::try_from(secs).unwrap_or(i64::MAX)),
        Expiry::At(at) => (2, crate::clock::unix_ms(at)),
    }
}

/// The media type without parameters, lower-cased: `Application/JSON; charset=utf-8` → `application/json`.
pub fn media_type(content_type: &str) -> String {
    essence(content_type).to_ascii_lowercase()
}

/// The media type part of a content type, as written.
fn essence(content_type: &str) -> &str {
    // A byte loop: `str::find` sets up a searcher, which costs more than
    // scanning a content type's few bytes.
    let end = content_type
        .bytes()
        .position(|b| b == b';')
        .unwrap_or(content_type.len());
    content_type[..end].trim()
}

/// Whether a content type names JSON.
pub fn is_json(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case(JSON)
}

/// Whether two content types name the same media type.
pub fn same_media_type(a: &str, b: &str) -> bool {
    // Compared without allocating: this runs on every append, which
    // nearly always sends the very content type the stream has.
    a == b || essence(a).eq_ignore_ascii_case(essence(b))
}

/// What the store knows about one live stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    /// The stream path.
    pub path: String,
    /// The configuration it was created with.
    pub config: StreamConfig,
    /// Whether the stream is closed now.
    pub closed: bool,
    /// The offset after the last message.
    pub tail: Offset,
    /// The total size of the messages kept, in bytes.
    pub bytes: u64,
    /// The offset of the first message kept: the stream's beginning
    /// unless retention dropped a prefix.
    pub earliest: Offset,
    /// Where compaction dropped deletes past their lifetime, if it did: a
    /// reader that resumes before it may have missed a delete.
    pub dropped_deletes: Option<crate::DroppedDeletes>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_compare_without_case_or_parameters() {
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(same_media_type("text/plain", "TEXT/PLAIN;charset=utf-8"));
        assert!(!same_media_type("text/plain", "text/html"));
    }
}
