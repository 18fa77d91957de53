//! HTTP caching of read responses: the `Cache-Control` each kind of
//! response carries, the strong `ETag` of a chunk and `If-None-Match`.
//! The rules are stated on [`CacheConfig`](crate::CacheConfig).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use eddy_streams::{Offset, ReadChunk, StreamPath};

use crate::cursor;
use crate::state::AppState;

/// What a read response is, as far as caches are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Data that ends before the tail: it never changes.
    Historical,
    /// A long-poll answer with data from the offset its URL names.
    LongPollData,
    /// The tail, a timeout, `offset=now`, `HEAD`: stale at once.
    Tail,
}

/// The request headers a catch-up response varies on besides its URL:
/// the compression the client accepts, and Eddy's framing and budget
/// extensions.
pub(crate) const READ_VARY: &str = "accept-encoding, eddy-framing, eddy-max-bytes, eddy-positions";

/// The `Cache-Control` value of a read of `path`.
pub(crate) fn control(state: &AppState, path: &StreamPath, freshness: Freshness) -> String {
    let config = &state.config.cache;
    let scope = if state.config.auth_token.is_none()
        || config
            .public_prefixes
            .iter()
            .any(|prefix| path.as_str().starts_with(prefix.as_str()))
    {
        "public"
    } else {
        "private"
    };
    match freshness {
        Freshness::Historical => {
            format!("{scope}, max-age={}, immutable", config.max_age.as_secs())
        }
        // Clients move to a new URL (cursor) every interval at the latest.
        Freshness::LongPollData => format!("{scope}, max-age={}", cursor::INTERVAL_SECS),
        Freshness::Tail => "no-store".to_owned(),
    }
}

/// The URL of the same read at the stream's own offset `start`, for a
/// catch-up read whose URL names no offset of the stream the path holds
/// now (`-1`, the zero offset, a fork source's offset): its bytes are the
/// same, and its chunk is immutable. Relative (the query alone), so it
/// keeps the path as the client sent it.
pub(crate) fn own_offset_url(query: Option<&str>, start: Offset) -> String {
    let mut location = format!("?offset={start}");
    for pair in query.unwrap_or("").split('&') {
        let key = pair.split_once('=').map_or(pair, |(key, _)| key);
        if !pair.is_empty() && key != "offset" {
            location.push('&');
            location.push_str(pair);
        }
    }
    location
}

/// A temporary redirect to `location` (see [`own_offset_url`]), never
/// stored: with [`CacheConfig::redirect_first_reads`](crate::CacheConfig),
/// a cache keeps chunks only under URLs that name one stream's bytes
/// forever.
pub(crate) fn redirect(location: String) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(location) = HeaderValue::try_from(location) {
        headers.insert(header::LOCATION, location);
    }
    response
}

/// A strong validator for exactly this range of this stream's data, and
/// whether it reached a closed tail. Offsets carry the stream's
/// incarnation, so a stream created again at the path never matches an
/// older stream's tag.
pub(crate) fn etag(chunk: &ReadChunk) -> String {
    // Pushed piece by piece: `format!` would cost more than the offsets.
    let mut tag = String::with_capacity(72);
    tag.push('"');
    tag.push_str(chunk.start.text().as_str());
    tag.push(':');
    tag.push_str(chunk.next_offset.text().as_str());
    if chunk.closed {
        tag.push_str(":c");
    }
    tag.push('"');
    tag
}

/// The tag of `if_none_match` (a comma-separated list, or `*`) that names
/// `etag`, in any content coding (see [`tag_encoding`]).
pub(crate) fn matching_tag<'a>(if_none_match: &'a str, etag: &str) -> Option<&'a str> {
    let bare = etag.trim_matches('"');
    // If-None-Match compares weakly: `W/"x"` names `"x"` too.
    if_none_match.split(',').map(str::trim).find(|sent| {
        *sent == "*"
            || sent
                .trim_start_matches("W/")
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .is_some_and(|inner| {
                    inner == bare
                        || inner
                            .strip_prefix(bare)
                            .and_then(|rest| rest.strip_prefix('-'))
                            .is_some_and(|coding| ENCODINGS.contains(&coding))
                })
    })
}

const ENCODINGS: [&str; 3] = ["gzip", "br", "zstd"];

/// Gives a compressed response its own strong `ETag` (`"…-gzip"`): a
/// strong validator names one representation, and the compressed bytes
/// are another one than the plain bytes.
pub(crate) fn tag_encoding(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let coding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|coding| ENCODINGS.contains(coding))
        .map(str::to_owned);
    let tag = headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .and_then(|tag| tag.strip_prefix('"')?.strip_suffix('"'))
        .map(str::to_owned);
    if let (Some(coding), Some(tag)) = (coding, tag) {
        if let Ok(value) = HeaderValue::try_from(format!("\"{tag}-{coding}\"")) {
            headers.insert(header::ETAG, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_names_the_tag_in_any_coding() {
        let etag = "\"a:b\"";
        assert_eq!(matching_tag("\"a:b\"", etag), Some("\"a:b\""));
        assert_eq!(
            matching_tag("\"x\", \"a:b-gzip\"", etag),
            Some("\"a:b-gzip\"")
        );
        assert_eq!(matching_tag("*", etag), Some("*"));
        assert_eq!(matching_tag("\"a:b-deflate\"", etag), None);
        assert_eq!(matching_tag("\"a:bc\"", etag), None);
        assert_eq!(matching_tag("W/\"a:b\"", etag), Some("W/\"a:b\""));
        assert_eq!(matching_tag("", etag), None);
    }
}
