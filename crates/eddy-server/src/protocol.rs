//! The protocol's header names and fixed values, in one place.
//!
//! Header names are case-insensitive on the wire; the `http` crate wants
//! them lower-cased. Names are [`HeaderName`] constants, so a lookup or an
//! insert hashes them without parsing them again on every request.

use axum::http::HeaderName;

/// The offset after the data a response covers (or the tail).
pub(crate) const NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
/// `true` when a read reached the tail.
pub(crate) const UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
/// The long-poll / SSE cursor (an interval number).
pub(crate) const CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
/// `true` when a stream is closed (request: close it).
pub(crate) const CLOSED: HeaderName = HeaderName::from_static("stream-closed");
/// A sliding time to live, in decimal seconds.
pub(crate) const TTL: HeaderName = HeaderName::from_static("stream-ttl");
/// A fixed expiry time, RFC 3339.
pub(crate) const EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
/// An opaque, strictly increasing writer sequence value.
pub(crate) const STREAM_SEQ: HeaderName = HeaderName::from_static("stream-seq");
/// An optimistic append: the tail the writer expects.
pub(crate) const EXPECTED_OFFSET: HeaderName = HeaderName::from_static("stream-expected-offset");
/// The idempotent producer's id.
pub(crate) const PRODUCER_ID: HeaderName = HeaderName::from_static("producer-id");
/// The idempotent producer's epoch.
pub(crate) const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
/// The idempotent producer's sequence number.
pub(crate) const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
/// On a sequence gap: the sequence number the server expects.
pub(crate) const PRODUCER_EXPECTED_SEQ: HeaderName =
    HeaderName::from_static("producer-expected-seq");
/// On a sequence gap: the sequence number the server received.
pub(crate) const PRODUCER_RECEIVED_SEQ: HeaderName =
    HeaderName::from_static("producer-received-seq");
/// Create a fork of this stream path.
pub(crate) const FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
/// Fork at this offset.
pub(crate) const FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
/// Fork this far into the message at the fork offset.
pub(crate) const FORK_SUB_OFFSET: HeaderName = HeaderName::from_static("stream-fork-sub-offset");
/// How SSE data events of binary streams are encoded (`base64`).
pub(crate) const SSE_DATA_ENCODING: HeaderName =
    HeaderName::from_static("stream-sse-data-encoding");
/// Eddy's extension: the stable error code of a failed request.
pub(crate) const ERROR_CODE: HeaderName = HeaderName::from_static("eddy-error");
/// Eddy's extension: the bytes a stream holds (on HEAD).
pub(crate) const STREAM_BYTES: HeaderName = HeaderName::from_static("eddy-stream-bytes");
/// Eddy's extension: a stream's retention policy (on create; echoed on
/// create, HEAD and GET).
pub(crate) const RETENTION: HeaderName = HeaderName::from_static("eddy-retention");
/// Eddy's extension: a stream's compaction policy (on create; echoed on
/// create, HEAD and GET).
pub(crate) const COMPACTION: HeaderName = HeaderName::from_static("eddy-compaction");
/// Eddy's extension: the offset of the first message a stream keeps (on
/// HEAD, and with `offset/dropped`).
pub(crate) const EARLIEST_OFFSET: HeaderName = HeaderName::from_static("eddy-earliest-offset");

/// Eddy's extension (response, HEAD and GET): the offset after the
/// highest delete compaction dropped past its lifetime; a reader resuming
/// before it may have missed a delete.
pub(crate) const DELETES_DROPPED_BEFORE: HeaderName =
    HeaderName::from_static("eddy-deletes-dropped-before");
/// Eddy's extension (response, with [`DELETES_DROPPED_BEFORE`]): how many
/// deletes compaction dropped past their lifetime (it only grows).
pub(crate) const DELETES_DROPPED: HeaderName = HeaderName::from_static("eddy-deletes-dropped");

/// The path prefix reserved for Eddy's own endpoints (listing).
pub(crate) const RESERVED_PREFIX: &str = "_eddy/";

/// The stream path prefix Eddy keeps for itself (projection checkpoints):
/// only administrative requests may create, append to or delete streams
/// under it.
pub const RESERVED_STREAM_PREFIX: &str = "__eddy/";

/// Every header a browser client may need to read: the protocol's, Eddy's
/// extensions, when to retry, and the request id to quote in a report.
pub(crate) const EXPOSED_HEADERS: &str = "stream-next-offset, stream-up-to-date, stream-cursor, \
stream-closed, stream-ttl, stream-expires-at, producer-epoch, producer-seq, \
producer-expected-seq, producer-received-seq, stream-sse-data-encoding, etag, location, content-location, \
content-type, eddy-error, eddy-stream-bytes, eddy-read-start, eddy-duplicate, eddy-limit, \
eddy-retention, eddy-compaction, eddy-earliest-offset, eddy-deletes-dropped-before, \
eddy-deletes-dropped, retry-after, x-request-id";

/// Every request header a browser client may send.
pub(crate) const ALLOWED_HEADERS: &str = "authorization, content-type, if-none-match, stream-seq, \
stream-ttl, stream-expires-at, stream-closed, stream-expected-offset, producer-id, \
producer-epoch, producer-seq, stream-forked-from, stream-fork-offset, stream-fork-sub-offset, \
eddy-retention, eddy-compaction";

/// Eddy's extension (request): `messages` asks for a framed read body in
/// which every message is a 4-byte big-endian length and its bytes, so a
/// client keeps message boundaries on byte streams too.
pub(crate) const FRAMING: HeaderName = HeaderName::from_static("eddy-framing");
/// The value of [`FRAMING`] that asks for length-prefixed messages.
pub(crate) const FRAMING_MESSAGES: &str = "messages";
/// Eddy's extension (request, with [`FRAMING`]): `true` asks for each
/// frame to start with its message's position (8 bytes, big-endian), so a
/// reader of a compacted stream knows each message's offset; echoed on
/// the answer when the server did so (an older one ignores it).
pub(crate) const POSITIONS: HeaderName = HeaderName::from_static("eddy-positions");
/// Eddy's extension (request): the most bytes of messages a read returns.
pub(crate) const MAX_BYTES: HeaderName = HeaderName::from_static("eddy-max-bytes");
/// Eddy's extension (response): the offset of the first message of a read.
pub(crate) const READ_START: HeaderName = HeaderName::from_static("eddy-read-start");
/// Eddy's extension (response): `true` when an append was a duplicate.
pub(crate) const DUPLICATE: HeaderName = HeaderName::from_static("eddy-duplicate");
/// Eddy's extension (error response): the limit that was exceeded.
pub(crate) const LIMIT: HeaderName = HeaderName::from_static("eddy-limit");
