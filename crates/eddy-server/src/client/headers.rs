//! Reading protocol response headers back into store types.

use eddy_streams::{
    Appended, Compaction, DroppedDeletes, Expiry, Offset, Retention, StreamConfig, StreamError,
    StreamInfo, StreamPath,
};
use reqwest::header::{HeaderMap, HeaderName};

use crate::protocol;

fn bad(name: HeaderName) -> StreamError {
    StreamError::internal(format!(
        "the server sent a missing or malformed `{name}` header"
    ))
}

/// A header as text.
pub(super) fn text(headers: &HeaderMap, name: HeaderName) -> Result<String, StreamError> {
    headers
        .get(&name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| bad(name))
}

/// A header that must be an offset.
pub(super) fn offset(headers: &HeaderMap, name: HeaderName) -> Result<Offset, StreamError> {
    text(headers, name.clone())?.parse().map_err(|_| bad(name))
}

/// A header that must be a number.
pub(super) fn number(headers: &HeaderMap, name: HeaderName) -> Result<u64, StreamError> {
    text(headers, name.clone())?.parse().map_err(|_| bad(name))
}

/// Whether a flag header is `true`.
pub(super) fn flag(headers: &HeaderMap, name: HeaderName) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The stream description of a create or HEAD response.
pub(super) fn info(path: &StreamPath, headers: &HeaderMap) -> Result<StreamInfo, StreamError> {
    let expiry = if headers.contains_key(protocol::TTL) {
        Expiry::Ttl(number(headers, protocol::TTL)?)
    } else if let Ok(at) = text(headers, protocol::EXPIRES_AT) {
        Expiry::At(crate::parse::rfc3339(&at).map_err(|_| bad(protocol::EXPIRES_AT))?)
    } else {
        Expiry::Never
    };
    let closed = flag(headers, protocol::CLOSED);
    let tail = offset(headers, protocol::NEXT_OFFSET)?;
    Ok(StreamInfo {
        path: path.to_string(),
        config: StreamConfig {
            content_type: text(headers, reqwest::header::CONTENT_TYPE)?,
            expiry,
            // The protocol reports whether the stream is closed now, not
            // whether it was created closed.
            closed,
            retention: retention(headers)?,
            compaction: compaction(headers)?,
        },
        closed,
        tail,
        bytes: number(headers, protocol::STREAM_BYTES).unwrap_or(0),
        earliest: offset(headers, protocol::EARLIEST_OFFSET).unwrap_or(tail.with_position(0)),
        dropped_deletes: dropped_deletes(headers)?,
    })
}

/// `Eddy-Deletes-Dropped-Before` with `Eddy-Deletes-Dropped`, or none
/// when absent (no delete dropped, or a server that does not say).
pub(super) fn dropped_deletes(headers: &HeaderMap) -> Result<Option<DroppedDeletes>, StreamError> {
    if !headers.contains_key(protocol::DELETES_DROPPED_BEFORE) {
        return Ok(None);
    }
    Ok(Some(DroppedDeletes {
        before: offset(headers, protocol::DELETES_DROPPED_BEFORE)?,
        count: number(headers, protocol::DELETES_DROPPED)?,
    }))
}

/// `Eddy-Compaction`, or no policy when it is absent.
pub(super) fn compaction(headers: &HeaderMap) -> Result<Option<Compaction>, StreamError> {
    match text(headers, protocol::COMPACTION) {
        Ok(policy) => policy
            .parse()
            .map(Some)
            .map_err(|_| bad(protocol::COMPACTION)),
        Err(_) => Ok(None),
    }
}

/// `Eddy-Retention`, or no policy when it is absent.
pub(super) fn retention(headers: &HeaderMap) -> Result<Retention, StreamError> {
    match text(headers, protocol::RETENTION) {
        Ok(policy) => policy.parse().map_err(|_| bad(protocol::RETENTION)),
        Err(_) => Ok(Retention::NONE),
    }
}

/// The outcome of an append response.
pub(super) fn appended(headers: &HeaderMap) -> Result<Appended, StreamError> {
    let producer = match (
        number(headers, protocol::PRODUCER_EPOCH),
        number(headers, protocol::PRODUCER_SEQ),
    ) {
        (Ok(epoch), Ok(seq)) => Some((epoch, seq)),
        _ => None,
    };
    Ok(Appended {
        next_offset: offset(headers, protocol::NEXT_OFFSET)?,
        duplicate: flag(headers, protocol::DUPLICATE),
        producer,
        closed: flag(headers, protocol::CLOSED),
    })
}
