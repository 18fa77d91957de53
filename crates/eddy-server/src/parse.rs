//! Parsers for what clients send: headers, the query string, the path.
//!
//! Every parser is pure and total: bad input becomes an [`ApiError`] with a
//! message (a 400), never a panic. The property tests feed them arbitrary
//! strings.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use eddy_streams::{Expiry, Offset, ProducerPosition, ReadFrom, StreamPath};
use percent_encoding::percent_decode_str;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::protocol;

/// A header's value as text, if present.
pub(crate) fn header(headers: &HeaderMap, name: HeaderName) -> Result<Option<&str>, ApiError> {
    headers
        .get(&name)
        .map(|value| as_text(&name, value))
        .transpose()
}

/// A header value as text; one that is not visible ASCII is refused.
fn as_text<'a>(name: &HeaderName, value: &'a HeaderValue) -> Result<&'a str, ApiError> {
    value
        .to_str()
        .map_err(|_| ApiError::bad_request(format!("header `{name}` is not visible ASCII")))
}

/// A plain decimal number: digits only, without a sign, point or exponent.
/// `strict` also refuses leading zeros.
pub(crate) fn decimal(name: &str, value: &str, strict: bool) -> Result<u64, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "`{name}` must be a non-negative decimal integer, got `{}`",
            shorten(value)
        ))
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if strict && value.len() > 1 && value.starts_with('0') {
        return Err(bad());
    }
    value.parse().map_err(|_| bad())
}

/// The first value of each header of `names`, as text, found in one pass
/// over the request's headers: a request carries a handful, and a lookup
/// of each name would hash it. A value that is not visible ASCII is
/// refused, as [`header`] refuses it.
pub(crate) fn pick<'a, const N: usize>(
    headers: &'a HeaderMap,
    names: &[HeaderName; N],
) -> Result<[Option<&'a str>; N], ApiError> {
    let mut found = [None; N];
    for (name, value) in headers {
        let Some(i) = names.iter().position(|wanted| wanted == name) else {
            continue;
        };
        if found[i].is_none() {
            found[i] = Some(as_text(name, value)?);
        }
    }
    Ok(found)
}

/// `Stream-Closed`: `true` in any case closes; anything else is ignored.
pub(crate) fn closed(headers: &HeaderMap) -> Result<bool, ApiError> {
    Ok(is_true(header(headers, protocol::CLOSED)?))
}

/// Whether a flag header's value says `true` (in any case).
pub(crate) fn is_true(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// `Stream-TTL` or `Stream-Expires-At` (not both).
pub(crate) fn expiry(headers: &HeaderMap) -> Result<Option<Expiry>, ApiError> {
    let ttl = header(headers, protocol::TTL)?;
    let at = header(headers, protocol::EXPIRES_AT)?;
    match (ttl, at) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "send either Stream-TTL or Stream-Expires-At, not both",
        )),
        (Some(ttl), None) => Ok(Some(Expiry::Ttl(decimal("Stream-TTL", ttl, true)?))),
        (None, Some(at)) => Ok(Some(Expiry::At(rfc3339(at)?))),
        (None, None) => Ok(None),
    }
}

/// `Eddy-Retention`, when sent: a policy (or `none`) in the grammar of
/// [`Retention`](eddy_streams::Retention); a bad one is refused whole.
pub(crate) fn retention(headers: &HeaderMap) -> Result<Option<eddy_streams::Retention>, ApiError> {
    match header(headers, protocol::RETENTION)? {
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|e: eddy_streams::RetentionError| ApiError::Stream(e.into())),
        None => Ok(None),
    }
}

/// `Eddy-Compaction`, when sent: a policy in the grammar of
/// [`Compaction`](eddy_streams::Compaction), or `none` (no compaction,
/// whatever the server's rules say); a bad one is refused whole.
pub(crate) fn compaction(
    headers: &HeaderMap,
) -> Result<Option<Option<eddy_streams::Compaction>>, ApiError> {
    match header(headers, protocol::COMPACTION)? {
        Some(text) if text.trim().eq_ignore_ascii_case("none") => Ok(Some(None)),
        Some(text) => text
            .parse()
            .map(|policy| Some(Some(policy)))
            .map_err(|e: eddy_streams::CompactionError| ApiError::Stream(e.into())),
        None => Ok(None),
    }
}

/// An RFC 3339 timestamp.
pub(crate) fn rfc3339(value: &str) -> Result<SystemTime, ApiError> {
    let parsed = OffsetDateTime::parse(value, &Rfc3339).map_err(|e| {
        ApiError::bad_request(format!(
            "`Stream-Expires-At` must be RFC 3339 ({e}), got `{}`",
            shorten(value)
        ))
    })?;
    let nanos = parsed.unix_timestamp_nanos();
    let time = if nanos >= 0 {
        u64::try_from(nanos)
            .ok()
            .map(|n| UNIX_EPOCH + Duration::from_nanos(n))
    } else {
        u64::try_from(-nanos)
            .ok()
            .and_then(|n| UNIX_EPOCH.checked_sub(Duration::from_nanos(n)))
    };
    time.ok_or_else(|| ApiError::bad_request("`Stream-Expires-At` is out of range"))
}

/// Formats a time as RFC 3339 (UTC, `Z`).
pub(crate) fn format_rfc3339(at: SystemTime) -> String {
    let nanos = match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_nanos()).unwrap_or(i128::MAX),
        Err(e) => -i128::try_from(e.duration().as_nanos()).unwrap_or(i128::MAX),
    };
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// The idempotent producer from the values of its three headers
/// (`Producer-Id`, `-Epoch`, `-Seq`): all three or none.
pub(crate) fn producer_of(
    id: Option<&str>,
    epoch: Option<&str>,
    seq: Option<&str>,
) -> Result<Option<ProducerPosition>, ApiError> {
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(ApiError::bad_request("`Producer-Id` must not be empty"));
            }
            Ok(Some(ProducerPosition::new(
                id,
                decimal("Producer-Epoch", epoch, false)?,
                decimal("Producer-Seq", seq, false)?,
            )))
        }
        _ => Err(ApiError::bad_request(
            "send all of Producer-Id, Producer-Epoch and Producer-Seq, or none",
        )),
    }
}

/// An offset header (`Stream-Fork-Offset`, `Stream-Expected-Offset`): the
/// canonical form only.
pub(crate) fn offset(name: &str, value: &str) -> Result<Offset, ApiError> {
    value.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "`{name}` must be an offset `<16 digits>_<16 digits>`, got `{}`",
            shorten(value)
        ))
    })
}

/// How a GET wants its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Live {
    /// Catch-up: answer at once.
    No,
    /// Wait for data, up to the long-poll timeout.
    LongPoll,
    /// Server-sent events.
    Sse,
}

/// The query of a GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadQuery {
    /// Where to read from; `None` when no `offset` was sent.
    pub(crate) offset: Option<ReadFrom>,
    /// The live mode.
    pub(crate) live: Live,
    /// The client's cursor, echoed back.
    pub(crate) cursor: Option<String>,
}

/// Parses a GET query string (unknown parameters are ignored).
pub(crate) fn read_query(query: Option<&str>) -> Result<ReadQuery, ApiError> {
    let mut offset = None;
    let mut live = Live::No;
    let mut cursor = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| ApiError::bad_request("a query parameter is not UTF-8"))?;
        match key {
            "offset" => {
                if offset.is_some() {
                    return Err(ApiError::bad_request("send `offset` once"));
                }
                let parsed: ReadFrom = value.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "`offset` must be `-1`, `now` or an offset from this server, got `{}`",
                        shorten(&value)
                    ))
                })?;
                offset = Some(parsed);
            }
            "live" => {
                live = match value.as_ref() {
                    "long-poll" => Live::LongPoll,
                    "sse" => Live::Sse,
                    "" | "false" => Live::No,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "`live` must be `long-poll` or `sse`, got `{}`",
                            shorten(other)
                        )))
                    }
                }
            }
            "cursor" => cursor = Some(value.into_owned()),
            _ => {}
        }
    }
    if live != Live::No && offset.is_none() {
        return Err(ApiError::bad_request(
            "live reads need an `offset` (use `-1` or `now`)",
        ));
    }
    Ok(ReadQuery {
        offset,
        live,
        cursor,
    })
}

/// The stream path of a request path (`/v1/stream/a` → `v1/stream/a`),
/// percent-decoded and checked.
pub(crate) fn stream_path(uri_path: &str) -> Result<StreamPath, ApiError> {
    let trimmed = uri_path.strip_prefix('/').unwrap_or(uri_path);
    // Most paths have nothing to decode: skip the decoder's pass.
    if !trimmed.bytes().any(|b| b == b'%') {
        return Ok(StreamPath::new(trimmed)?);
    }
    let decoded = percent_decode_str(trimmed)
        .decode_utf8()
        .map_err(|_| ApiError::bad_request("the stream path is not UTF-8"))?;
    Ok(StreamPath::new(decoded.as_ref())?)
}

/// The stream path named by `Stream-Forked-From`: a path, or a URL whose
/// path is used.
pub(crate) fn fork_source(value: &str) -> Result<StreamPath, ApiError> {
    let path = match value.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => value,
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    stream_path(path)
}

fn shorten(value: &str) -> String {
    value.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn decimals() {
        assert_eq!(decimal("x", "60", true).ok(), Some(60));
        assert_eq!(decimal("x", "0", true).ok(), Some(0));
        for bad in ["00060", "+60", "60.5", "1e3", "-1", "abc", "", " 1"] {
            assert!(decimal("x", bad, true).is_err(), "{bad}");
        }
        assert_eq!(decimal("x", "007", false).ok(), Some(7));
        assert!(decimal("x", "99999999999999999999999", false).is_err());
    }

    #[test]
    fn queries() {
        let q = read_query(Some("offset=-1&live=sse&foo=bar")).ok();
        assert_eq!(
            q.map(|q| (q.offset, q.live)),
            Some((Some(ReadFrom::Beginning), Live::Sse))
        );
        for bad in [
            "offset=",
            "offset=-1&offset=-1",
            "live=sse",
            "offset=a,b",
            "offset=..",
            "offset=%00",
            "live=long-poll",
        ] {
            assert!(read_query(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        assert_eq!(
            stream_path("/v1/stream/a%20b").ok().map(|p| p.to_string()),
            Some("v1/stream/a b".into())
        );
        assert!(stream_path("/a/../b").is_err());
        assert!(stream_path("/a%00b").is_err());
        assert_eq!(
            fork_source("http://h:1/v1/x?y").ok().map(|p| p.to_string()),
            Some("v1/x".into())
        );
    }

    #[test]
    fn times_round_trip() {
        let at = rfc3339("2030-01-02T03:04:05Z").ok();
        assert_eq!(
            at.map(format_rfc3339).as_deref(),
            Some("2030-01-02T03:04:05Z")
        );
        assert!(rfc3339("2030-01-02T03:04:05+01:00").is_ok());
        assert!(rfc3339("tomorrow").is_err());
    }

    #[test]
    fn the_zero_offset_is_the_empty_tail() {
        assert_eq!(
            offset("x", "0000000000000000_0000000000000000").ok(),
            Some(Offset::ZERO)
        );
        assert!(offset("x", "-1").is_err(), "sentinels are for reads only");
    }

    /// Text from arbitrary bytes, as a header or query value may carry.
    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn query_parser_is_total(query in any::<Vec<u8>>()) {
            let _ = read_query(Some(&text(&query)));
        }

        #[test]
        fn offsets_round_trip_and_junk_is_refused(lineage in 0u64..=9_999_999_999_999_999, position in 0u64..=9_999_999_999_999_999, junk in "[a-zA-Z,./ :-]{1,4}") {
            let canonical = format!("{lineage:016}_{position:016}");
            let parsed = offset("x", &canonical).expect("canonical offsets parse");
            prop_assert_eq!(parsed.to_string(), canonical.clone());
            let query = format!("offset={canonical}");
            prop_assert_eq!(read_query(Some(&query)).expect("query").offset, Some(ReadFrom::Offset(parsed)));
            let bad = format!("{canonical}{junk}");
            prop_assert!(offset("x", &bad).is_err());
            let bad_query = format!("offset={bad}");
            prop_assert!(read_query(Some(&bad_query)).is_err());
        }

        #[test]
        fn offset_parser_is_total(bytes in any::<Vec<u8>>()) {
            if let Ok(parsed) = offset("x", &text(&bytes)) {
                prop_assert_eq!(parsed.to_string(), text(&bytes));
            }
        }

        #[test]
        fn decimals_accept_exactly_plain_numbers(n in any::<u64>(), bytes in any::<Vec<u8>>()) {
            prop_assert_eq!(decimal("x", &n.to_string(), true).ok(), Some(n));
            let s = text(&bytes);
            if let Ok(v) = decimal("x", &s, false) {
                prop_assert!(s.bytes().all(|b| b.is_ascii_digit()));
                prop_assert_eq!(s.parse::<u64>().ok(), Some(v));
            }
        }

        #[test]
        fn path_and_time_parsers_are_total(bytes in any::<Vec<u8>>()) {
            let s = text(&bytes);
            let _ = stream_path(&s);
            let _ = fork_source(&s);
            let _ = rfc3339(&s);
        }

        #[test]
        fn a_path_without_escapes_is_taken_as_the_decoder_would(path in "/?[a-z0-9./_ -]{0,24}") {
            let decoded = percent_decode_str(path.strip_prefix('/').unwrap_or(&path))
                .decode_utf8()
                .map(|p| StreamPath::new(p.as_ref()).ok());
            prop_assert_eq!(stream_path(&path).ok(), decoded.ok().flatten());
        }

        #[test]
        fn header_parsers_are_total(values in proptest::collection::vec(any::<Vec<u8>>(), 8)) {
            let names = [
                protocol::CLOSED,
                protocol::TTL,
                protocol::EXPIRES_AT,
                protocol::PRODUCER_ID,
                protocol::PRODUCER_EPOCH,
                protocol::PRODUCER_SEQ,
                protocol::STREAM_SEQ,
                protocol::EXPECTED_OFFSET,
            ];
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                if let Ok(value) = axum::http::HeaderValue::from_bytes(value) {
                    headers.insert(name.clone(), value);
                }
            }
            let _ = closed(&headers);
            let _ = expiry(&headers);
            // One pass finds what a lookup of each name finds.
            let picked = pick(&headers, &names);
            let looked_up: Vec<_> = names.iter().map(|name| header(&headers, name.clone())).collect();
            prop_assert_eq!(picked.is_err(), looked_up.iter().any(Result::is_err));
            if let Ok(picked) = &picked {
                for (one, all) in looked_up.iter().zip(picked) {
                    prop_assert_eq!(one.as_ref().ok().copied().flatten(), *all);
                }
                let _ = producer_of(picked[3], picked[4], picked[5]);
            }
        }
    }
}
