//! The one error type of the stream store, with stable codes.

use crate::Offset;

/// Everything that can go wrong in a stream store call.
///
/// Each variant has a stable [`code`](StreamError::code) that callers (the HTTP
/// server, the CLI, the projection engine) can match on without parsing
/// messages. A call that fails with any of these has written nothing.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamError {
    /// No stream exists at the path (it never existed, or its TTL expired).
    #[error("stream `{path}` does not exist")]
    NotFound {
        /// The path that was asked for.
        path: String,
    },
    /// The stream existed and was deleted.
    #[error("stream `{path}` was deleted")]
    Gone {
        /// The path that was asked for.
        path: String,
    },
    /// The stream was deleted, or expired, while forks still read its
    /// data: the path stays reserved (neither readable nor creatable) until
    /// the last of those forks is gone.
    #[error("stream `{path}` was deleted or expired but forks still use it; delete them to free the path")]
    SoftDeleted {
        /// The path that was asked for.
        path: String,
    },
    /// A create named an existing stream with another configuration.
    #[error("stream `{path}` already exists with another configuration ({detail})")]
    ConfigConflict {
        /// The stream path.
        path: String,
        /// What differs.
        detail: String,
    },
    /// The stream is closed: nothing more can be appended.
    #[error("stream `{path}` is closed at offset {final_offset}")]
    Closed {
        /// The stream path.
        path: String,
        /// The stream's final offset.
        final_offset: Offset,
    },
    /// An optimistic append expected another tail.
    #[error("expected the tail at {expected} but it is at {actual}")]
    OffsetMismatch {
        /// The tail the caller expected.
        expected: Offset,
        /// The stream's actual tail.
        actual: Offset,
    },
    /// A `Stream-Seq` value was not greater than the last one.
    #[error("stream sequence `{received}` is not greater than the last one `{last}`")]
    StreamSeqConflict {
        /// The last accepted value.
        last: String,
        /// The value sent.
        received: String,
    },
    /// The appended content type is not the stream's.
    #[error("content type `{received}` does not match the stream's `{expected}`")]
    ContentTypeMismatch {
        /// The stream's content type.
        expected: String,
        /// The content type sent.
        received: String,
    },
    /// An offset string that is neither canonical nor a sentinel.
    #[error("malformed offset `{0}`: expected `-1`, `now` or `<16 digits>_<16 digits>`")]
    InvalidOffset(String),
    /// A read offset past the stream's tail.
    #[error("offset {offset} is beyond the tail {tail}")]
    OffsetBeyondTail {
        /// The offset asked for.
        offset: Offset,
        /// The stream tail.
        tail: Offset,
    },
    /// A stream path that breaks the path rules.
    #[error("invalid stream path `{path}`: {reason}")]
    InvalidPath {
        /// The rejected path (truncated when very long).
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A JSON stream received bytes that are not JSON.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// A JSON stream received an empty array, which would append nothing.
    #[error("an empty JSON array appends nothing; send at least one value")]
    EmptyJsonArray,
    /// An append without data that does not close the stream.
    #[error("empty append: send data or close the stream")]
    EmptyAppend,
    /// An append larger than the store's limit.
    #[error("append of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Bytes sent.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// An idempotent producer skipped sequence numbers.
    #[error("producer `{producer}` sent seq {received}, expected {expected}")]
    ProducerSeqGap {
        /// The producer id.
        producer: String,
        /// The next sequence number the store accepts.
        expected: u64,
        /// The sequence number sent.
        received: u64,
    },
    /// An idempotent producer used an epoch older than the current one.
    #[error("producer `{producer}` epoch {received} is fenced by epoch {current}")]
    ProducerFenced {
        /// The producer id.
        producer: String,
        /// The current epoch.
        current: u64,
        /// The epoch sent.
        received: u64,
    },
    /// A new producer epoch must start at sequence 0.
    #[error("producer `{producer}` started epoch {epoch} at seq {seq}; a new epoch starts at 0")]
    ProducerEpochStart {
        /// The producer id.
        producer: String,
        /// The new epoch.
        epoch: u64,
        /// The sequence number sent.
        seq: u64,
    },
    /// Bad options or arguments given to a call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A stream route or typed declaration failed to render, parse or decode.
    #[error("route `{route}`: {reason}")]
    Route {
        /// The route template.
        route: String,
        /// What went wrong.
        reason: String,
    },
    /// An item of a typed stream failed to encode or decode.
    #[error("stream `{stream}`: {reason}")]
    InvalidItem {
        /// The stream declaration id.
        stream: String,
        /// What went wrong.
        reason: String,
    },
    /// A state stream message was rejected before append.
    #[error("invalid state message: {0}")]
    InvalidState(String),
    /// The backend failed (I/O, database). Retrying may succeed.
    #[error("storage failure: {0}")]
    Storage(String),
}

impl StreamError {
    /// The stable, machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            StreamError::NotFound { .. } => "stream/not-found",
            StreamError::Gone { .. } => "stream/gone",
            StreamError::SoftDeleted { .. } => "stream/soft-deleted",
            StreamError::ConfigConflict { .. } => "stream/config-conflict",
            StreamError::Closed { .. } => "stream/closed",
            StreamError::OffsetMismatch { .. } => "append/offset-mismatch",
            StreamError::StreamSeqConflict { .. } => "append/stream-seq-conflict",
            StreamError::ContentTypeMismatch { .. } => "append/content-type-mismatch",
            StreamError::InvalidOffset(_) => "offset/invalid",
            StreamError::OffsetBeyondTail { .. } => "offset/beyond-tail",
            StreamError::InvalidPath { .. } => "path/invalid",
            StreamError::InvalidJson(_) => "json/invalid",
            StreamError::EmptyJsonArray => "json/empty-array",
            StreamError::EmptyAppend => "append/empty",
            StreamError::TooLarge { .. } => "append/too-large",
            StreamError::ProducerSeqGap { .. } => "producer/seq-gap",
            StreamError::ProducerFenced { .. } => "producer/fenced",
            StreamError::ProducerEpochStart { .. } => "producer/epoch-start",
            StreamError::InvalidArgument(_) => "invalid-argument",
            StreamError::Route { .. } => "route/invalid",
            StreamError::InvalidItem { .. } => "item/invalid",
            StreamError::InvalidState(_) => "state/invalid",
            StreamError::Storage(_) => "storage-failure",
        }
    }

    /// Whether retrying the same call may succeed (only backend failures).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StreamError::Storage(_))
    }
}

impl From<rusqlite::Error> for StreamError {
    fn from(err: rusqlite::Error) -> Self {
        StreamError::Storage(err.to_string())
    }
}

/// Shorthand for results of stream store calls.
pub type Result<T, E = StreamError> = std::result::Result<T, E>;
