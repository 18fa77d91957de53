//! The one error type of the stream store, with stable codes and kinds.

use std::fmt;
use std::sync::Arc;

use crate::Offset;

/// Everything that can go wrong in a stream store call.
///
/// Each variant has a stable [`code`](StreamError::code) that callers (the
/// HTTP server, the CLI, the projection engine) can match on without parsing
/// messages, and a [`kind`](StreamError::kind) that decides the HTTP status
/// and whether a retry may succeed. A call that fails with any of these has
/// written nothing. Backend failures keep their cause as the error's
/// [`source`](std::error::Error::source); messages never repeat it.
///
/// The serde form, `{"code": …, "details": {…}}`, is what Eddy's server
/// puts in error bodies so that its remote client rebuilds the same error;
/// the field names are part of that wire format. Causes do not travel.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "code", content = "details")]
#[non_exhaustive]
pub enum StreamError {
    /// No stream exists at the path (it never existed, or its TTL expired).
    #[error("stream `{path}` does not exist")]
    #[serde(rename = "stream/not-found")]
    NotFound {
        /// The path that was asked for.
        path: String,
    },
    /// The stream existed and was deleted.
    #[error("stream `{path}` was deleted")]
    #[serde(rename = "stream/gone")]
    Gone {
        /// The path that was asked for.
        path: String,
    },
    /// The stream was deleted, or expired, while forks still read its
    /// data: the path stays reserved (neither readable nor creatable) until
    /// the last of those forks is gone.
    #[error("stream `{path}` was deleted or expired but forks still use it; delete them to free the path")]
    #[serde(rename = "stream/soft-deleted")]
    SoftDeleted {
        /// The path that was asked for.
        path: String,
    },
    /// A create named an existing stream with another configuration.
    #[error("stream `{path}` already exists with another configuration ({detail})")]
    #[serde(rename = "stream/config-conflict")]
    ConfigConflict {
        /// The stream path.
        path: String,
        /// What differs.
        detail: String,
    },
    /// The stream is closed: nothing more can be appended.
    #[error("stream `{path}` is closed at offset {final_offset}")]
    #[serde(rename = "stream/closed")]
    Closed {
        /// The stream path.
        path: String,
        /// The stream's final offset.
        final_offset: Offset,
    },
    /// An optimistic append expected another tail.
    #[error("expected the tail at {expected} but it is at {actual}")]
    #[serde(rename = "append/offset-mismatch")]
    OffsetMismatch {
        /// The tail the caller expected.
        expected: Offset,
        /// The stream's actual tail.
        actual: Offset,
    },
    /// A `Stream-Seq` value was not greater than the last one.
    #[error("stream sequence `{received}` is not greater than the last one `{last}`")]
    #[serde(rename = "append/stream-seq-conflict")]
    StreamSeqConflict {
        /// The last accepted value.
        last: String,
        /// The value sent.
        received: String,
    },
    /// The appended content type is not the stream's.
    #[error("content type `{received}` does not match the stream's `{expected}`")]
    #[serde(rename = "append/content-type-mismatch")]
    ContentTypeMismatch {
        /// The stream's content type.
        expected: String,
        /// The content type sent.
        received: String,
    },
    /// An offset string that is neither canonical nor a sentinel.
    #[error("malformed offset `{0}`: expected `-1`, `now` or `<16 digits>_<16 digits>`")]
    #[serde(rename = "offset/invalid")]
    InvalidOffset(String),
    /// A read offset past the stream's tail.
    #[error("offset {offset} is beyond the tail {tail}")]
    #[serde(rename = "offset/beyond-tail")]
    OffsetBeyondTail {
        /// The offset asked for.
        offset: Offset,
        /// The stream tail.
        tail: Offset,
    },
    /// An offset of another stream than the one at the path now: of a
    /// stream deleted (or expired) before this one was created there, or
    /// of an unrelated stream. Its data is not this stream's, so nothing
    /// is read; read again from the beginning (`-1`).
    #[error("offset {offset} is not an offset of stream `{path}` (incarnation {incarnation}): it comes from a stream deleted or replaced since; read again from the beginning")]
    #[serde(rename = "offset/stale")]
    StaleOffset {
        /// The stream path.
        path: String,
        /// The offset asked for.
        offset: Offset,
        /// The incarnation of the stream at the path now.
        incarnation: u64,
    },
    /// An offset before the earliest message the stream keeps: its
    /// retention policy dropped the data there. Offsets never change, so
    /// reading on from `earliest` (or from the beginning, `-1`) reads
    /// what is kept.
    #[error("offset {offset} of stream `{path}` was dropped by the stream's retention policy; the earliest offset kept is {earliest}: read from there, or from the beginning (`-1`)")]
    #[serde(rename = "offset/dropped")]
    OffsetDropped {
        /// The stream path.
        path: String,
        /// The offset asked for.
        offset: Offset,
        /// The offset of the first message kept.
        earliest: Offset,
    },
    /// A retention policy that does not parse (see [`Retention`](crate::Retention)).
    #[error("{0}")]
    #[serde(rename = "retention/invalid")]
    InvalidRetention(String),
    /// A compaction policy that does not parse (see
    /// [`Compaction`](crate::Compaction)), or one on a stream that is not
    /// JSON, or on a store that does not compact.
    #[error("{0}")]
    #[serde(rename = "compaction/invalid")]
    InvalidCompaction(String),
    /// A stream path that breaks the path rules.
    #[error("invalid stream path `{path}`: {reason}")]
    #[serde(rename = "path/invalid")]
    InvalidPath {
        /// The rejected path (truncated when very long).
        path: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A JSON stream received bytes that are not JSON.
    #[error("invalid JSON: {0}")]
    #[serde(rename = "json/invalid")]
    InvalidJson(String),
    /// A JSON stream received an empty array, which would append nothing.
    #[error("an empty JSON array appends nothing; send at least one value")]
    #[serde(rename = "json/empty-array")]
    EmptyJsonArray,
    /// An append without data that does not close the stream.
    #[error("empty append: send data or close the stream")]
    #[serde(rename = "append/empty")]
    EmptyAppend,
    /// An append larger than the store's limit.
    #[error("append of {size} bytes exceeds the limit of {limit} bytes")]
    #[serde(rename = "append/too-large")]
    TooLarge {
        /// Bytes sent.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// An idempotent producer skipped sequence numbers.
    #[error("producer `{producer}` sent seq {received}, expected {expected}")]
    #[serde(rename = "producer/seq-gap")]
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
    #[serde(rename = "producer/fenced")]
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
    #[serde(rename = "producer/epoch-start")]
    ProducerEpochStart {
        /// The producer id.
        producer: String,
        /// The new epoch.
        epoch: u64,
        /// The sequence number sent.
        seq: u64,
    },
    /// A new idempotent producer on a stream that already keeps the state
    /// of as many producers as the store allows. Producers it knows may
    /// still append; the limit is the store's `max_producers_per_stream`.
    #[error("stream `{path}` already has {limit} producers, the limit (max_producers_per_stream); producer `{producer}` is refused, known producers may still append")]
    #[serde(rename = "limit/producers")]
    TooManyProducers {
        /// The stream path.
        path: String,
        /// The new producer's id.
        producer: String,
        /// The limit.
        limit: usize,
    },
    /// An append (or a create's or fork's initial data) that holds more
    /// messages than the store takes in one write: a JSON array of more
    /// elements than the store's `max_append_messages`. Send it in
    /// several appends.
    #[error("the append holds more than {limit} messages, the limit (max_append_messages); send it in several appends")]
    #[serde(rename = "append/too-many-messages")]
    TooManyMessages {
        /// The limit.
        limit: usize,
    },
    /// A fork that would copy more of its source than the store copies in
    /// one write (its `max_fork_bytes`; each message counts its length plus
    /// [`FORK_MESSAGE_COST`](crate::FORK_MESSAGE_COST) bytes). Fork at an
    /// earlier offset, or copy the data with reads and appends.
    #[error("a fork of `{source_path}` would copy up to {bytes} bytes, over the limit of {limit} (max_fork_bytes); fork at an earlier offset")]
    #[serde(rename = "fork/too-large")]
    ForkTooLarge {
        /// The fork's source.
        source_path: String,
        /// What the fork would copy (at most), as the limit counts it.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A new stream on a server that holds as many as it allows (its
    /// `max_streams`): a remote store's refusal, since stores themselves
    /// set no such limit. Streams may still be created once others are
    /// deleted.
    #[error("the server holds {limit} streams, its limit (max_streams); delete some first")]
    #[serde(rename = "limit/streams")]
    TooManyStreams {
        /// The limit.
        limit: usize,
    },
    /// Bad options or arguments given to a call.
    #[error("invalid argument: {0}")]
    #[serde(rename = "invalid-argument")]
    InvalidArgument(String),
    /// A stream route or typed declaration failed to render, parse or decode.
    #[error("route `{route}`: {reason}")]
    #[serde(rename = "route/invalid")]
    Route {
        /// The route template.
        route: String,
        /// What went wrong.
        reason: String,
    },
    /// An item of a typed stream failed to encode or decode.
    #[error("stream `{stream}`: {reason}")]
    #[serde(rename = "item/invalid")]
    InvalidItem {
        /// The stream declaration id.
        stream: String,
        /// What went wrong.
        reason: String,
    },
    /// A state stream message was rejected before append.
    #[error("invalid state message: {0}")]
    #[serde(rename = "state/invalid")]
    InvalidState(String),
    /// A read of a state stream met a message that does not decode as a
    /// state message: nothing read before it is applied in silence.
    #[error("state stream `{path}`: the message at offset {offset} does not decode ({reason})")]
    #[serde(rename = "state/undecodable")]
    UndecodableState {
        /// The stream path.
        path: String,
        /// The message's offset.
        offset: Offset,
        /// Why it does not decode.
        reason: String,
    },
    /// The caller's credentials were refused (a remote store's token).
    #[serde(rename = "auth/unauthorized")]
    #[error("{0}")]
    Unauthorized(String),
    /// The backend cannot serve now (busy, unreachable, shutting down).
    /// Retrying may succeed.
    #[serde(rename = "storage-failure")]
    #[error("{message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        #[serde(skip)]
        source: Option<Cause>,
    },
    /// The backend failed in a way retrying does not fix (corrupt data, a
    /// failed commit that poisoned the store, an answer not understood).
    #[serde(rename = "storage/internal")]
    #[error("{message}")]
    Internal {
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        #[serde(skip)]
        source: Option<Cause>,
    },
}

/// What kind of failure a [`StreamError`] is. The HTTP status and whether
/// to retry are decided from it, and only from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Nothing is at the path: never created, deleted, or expired.
    NotFound,
    /// The path is held by a deleted or expired stream that forks still
    /// read from; it cannot be read or reused yet. Or the offset asked for
    /// belongs to a stream that is gone: read the stream anew.
    Gone,
    /// The request contradicts the stream's state (its configuration, its
    /// close, its tail, its `Stream-Seq`, its content type, a producer's
    /// sequence). Read the state again and decide again.
    Conflict,
    /// The caller may no longer write this way (a fenced producer epoch).
    Forbidden,
    /// The request is malformed: fix it.
    Invalid,
    /// The request is larger than the store accepts: make it smaller.
    TooLarge,
    /// The caller's credentials were refused.
    Unauthorized,
    /// A limit on what clients may create is reached: the call fails
    /// until what counts against the limit is removed or the limit raised.
    LimitReached,
    /// The backend cannot serve now: the same call may succeed later.
    Unavailable,
    /// The backend failed in a way retrying does not fix.
    Internal,
}

impl ErrorKind {
    /// Whether the same call may succeed later.
    pub fn is_retryable(self) -> bool {
        match self {
            ErrorKind::Unavailable => true,
            ErrorKind::NotFound
            | ErrorKind::Gone
            | ErrorKind::Conflict
            | ErrorKind::Forbidden
            | ErrorKind::Invalid
            | ErrorKind::TooLarge
            | ErrorKind::Unauthorized
            | ErrorKind::LimitReached
            | ErrorKind::Internal => false,
        }
    }
}

/// The cause of a backend failure, kept as the error's source. It is shared
/// so that errors stay `Clone`; two causes are equal when they print the
/// same.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Wraps an error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(error))
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

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
            StreamError::StaleOffset { .. } => "offset/stale",
            StreamError::OffsetDropped { .. } => "offset/dropped",
            StreamError::InvalidRetention(_) => "retention/invalid",
            StreamError::InvalidCompaction(_) => "compaction/invalid",
            StreamError::InvalidPath { .. } => "path/invalid",
            StreamError::InvalidJson(_) => "json/invalid",
            StreamError::EmptyJsonArray => "json/empty-array",
            StreamError::EmptyAppend => "append/empty",
            StreamError::TooLarge { .. } => "append/too-large",
            StreamError::ProducerSeqGap { .. } => "producer/seq-gap",
            StreamError::ProducerFenced { .. } => "producer/fenced",
            StreamError::ProducerEpochStart { .. } => "producer/epoch-start",
            StreamError::TooManyProducers { .. } => "limit/producers",
            StreamError::TooManyStreams { .. } => "limit/streams",
            StreamError::TooManyMessages { .. } => "append/too-many-messages",
            StreamError::ForkTooLarge { .. } => "fork/too-large",
            StreamError::InvalidArgument(_) => "invalid-argument",
            StreamError::Route { .. } => "route/invalid",
            StreamError::InvalidItem { .. } => "item/invalid",
            StreamError::InvalidState(_) => "state/invalid",
            StreamError::UndecodableState { .. } => "state/undecodable",
            StreamError::Unauthorized(_) => "auth/unauthorized",
            StreamError::Unavailable { .. } => "storage-failure",
            StreamError::Internal { .. } => "storage/internal",
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StreamError::NotFound { .. } | StreamError::Gone { .. } => ErrorKind::NotFound,
            StreamError::SoftDeleted { .. }
            | StreamError::StaleOffset { .. }
            | StreamError::OffsetDropped { .. } => ErrorKind::Gone,
            StreamError::ConfigConflict { .. }
            | StreamError::Closed { .. }
            | StreamError::OffsetMismatch { .. }
            | StreamError::StreamSeqConflict { .. }
            | StreamError::ContentTypeMismatch { .. }
            | StreamError::ProducerSeqGap { .. } => ErrorKind::Conflict,
            StreamError::ProducerFenced { .. } => ErrorKind::Forbidden,
            StreamError::TooLarge { .. }
            | StreamError::TooManyMessages { .. }
            | StreamError::ForkTooLarge { .. } => ErrorKind::TooLarge,
            StreamError::InvalidOffset(_)
            | StreamError::OffsetBeyondTail { .. }
            | StreamError::InvalidPath { .. }
            | StreamError::InvalidJson(_)
            | StreamError::EmptyJsonArray
            | StreamError::EmptyAppend
            | StreamError::ProducerEpochStart { .. }
            | StreamError::InvalidArgument(_)
            | StreamError::InvalidRetention(_)
            | StreamError::InvalidCompaction(_)
            | StreamError::Route { .. }
            | StreamError::InvalidItem { .. }
            | StreamError::InvalidState(_)
            | StreamError::UndecodableState { .. } => ErrorKind::Invalid,
            StreamError::Unauthorized(_) => ErrorKind::Unauthorized,
            StreamError::TooManyProducers { .. } | StreamError::TooManyStreams { .. } => {
                ErrorKind::LimitReached
            }
            StreamError::Unavailable { .. } => ErrorKind::Unavailable,
            StreamError::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// Whether retrying the same call may succeed (decided by the kind).
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }

    /// A transient backend failure without a further cause.
    pub fn unavailable(message: impl Into<String>) -> Self {
        StreamError::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// A transient backend failure caused by `source`.
    pub fn unavailable_from(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StreamError::Unavailable {
            message: message.into(),
            source: Some(Cause::new(source)),
        }
    }

    /// A backend failure retrying does not fix, without a further cause.
    pub fn internal(message: impl Into<String>) -> Self {
        StreamError::Internal {
            message: message.into(),
            source: None,
        }
    }

    /// A backend failure retrying does not fix, caused by `source`.
    pub fn internal_from(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StreamError::Internal {
            message: message.into(),
            source: Some(Cause::new(source)),
        }
    }
}

impl From<crate::RetentionError> for StreamError {
    fn from(err: crate::RetentionError) -> Self {
        StreamError::InvalidRetention(err.to_string())
    }
}

impl From<crate::CompactionError> for StreamError {
    fn from(err: crate::CompactionError) -> Self {
        StreamError::InvalidCompaction(err.to_string())
    }
}

/// Shorthand for results of stream store calls.
pub type Result<T, E = StreamError> = std::result::Result<T, E>;
