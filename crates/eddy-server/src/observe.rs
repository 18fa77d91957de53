//! Request ids and the request span: every request (but the liveness
//! probe) gets an `x-request-id` (the client's, or a new random UUID),
//! echoed on the response by the middleware. A request that fails with a
//! server error is logged once, at `error`, with that id, its method and
//! its path ([`Failure`]). At `debug` every request is also handled
//! inside a `request` span carrying them, so every log line the request
//! causes names them; at the default level the span is not built (a
//! subscriber formats a span's fields when it opens, which cost every
//! request about a sixth of its time).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// The header that carries the request id.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id: the client's `x-request-id`, or a new version-4
/// UUID. A request id only has to be unique, not secret, so it comes from
/// a fast thread-local generator and costs no system call (the OS random
/// source is kept for tokens and secrets).
pub(crate) fn request_id(headers: &HeaderMap) -> HeaderValue {
    match headers.get(REQUEST_ID) {
        Some(sent) => sent.clone(),
        None => HeaderValue::from_bytes(&uuid_v4(fastrand::u128(..)))
            .unwrap_or_else(|_| HeaderValue::from_static("-")),
    }
}

/// A server error an endpoint answered, for the middleware to log with
/// the request it belongs to: its code and its chain of causes.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub code: &'static str,
    pub error: String,
}

/// Logs the server error `response` carries, if any, naming the request.
pub(crate) fn log_failure(
    response: &axum::response::Response,
    id: &HeaderValue,
    method: &axum::http::Method,
    path: &str,
) {
    if let Some(failure) = response.extensions().get::<Failure>() {
        tracing::error!(
            request_id = %id.to_str().unwrap_or(""),
            %method,
            path,
            code = failure.code,
            error = %failure.error,
            "request failed"
        );
    }
}

/// The span of one request, with its id, method and path, at `debug`; a
/// disabled span (nothing to build) when no subscriber listens there.
pub(crate) fn span(id: &HeaderValue, request: &Request) -> tracing::Span {
    tracing::debug_span!(
        "request",
        request_id = %id.to_str().unwrap_or(""),
        method = %request.method(),
        path = %request.uri().path(),
    )
}

/// `random` as the bits of a version-4 UUID: its version (4) and variant
/// (`10`) set, the other 122 bits kept.
fn uuid_v4_bits(random: u128) -> u128 {
    random & 0xFFFF_FFFF_FFFF_4FFF_BFFF_FFFF_FFFF_FFFF | 0x4000_8000_0000_0000_0000
}

/// `random` as a version-4 UUID in its hyphenated lower-case form.
fn uuid_v4(random: u128) -> [u8; 36] {
    let bits = uuid_v4_bits(random);
    let (high, low) = (hex_digits((bits >> 64) as u64), hex_digits(bits as u64));
    let mut out = [b'-'; 36];
    out[..8].copy_from_slice(&high[..8]);
    out[9..13].copy_from_slice(&high[8..12]);
    out[14..18].copy_from_slice(&high[12..]);
    out[19..23].copy_from_slice(&low[..4]);
    out[24..].copy_from_slice(&low[4..]);
    out
}

/// The 16 lower-case hex digits of `value`, most significant first,
/// worked out eight at a time in one register (a loop over the digits
/// cost about 300 instructions a request).
fn hex_digits(value: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&ascii_digits(nibbles((value >> 32) as u32)).to_be_bytes());
    out[8..].copy_from_slice(&ascii_digits(nibbles(value as u32)).to_be_bytes());
    out
}

/// The eight nibbles of `value`, one in each byte, the most significant
/// nibble in the most significant byte.
fn nibbles(value: u32) -> u64 {
    let x = u64::from(value);
    let x = (x | x << 16) & 0x0000_FFFF_0000_FFFF;
    let x = (x | x << 8) & 0x00FF_00FF_00FF_00FF;
    (x | x << 4) & 0x0F0F_0F0F_0F0F_0F0F
}

/// Each byte of `nibbles` (0 to 15) as its hex digit: `'0'` plus it, and
/// 39 more (from `':'` to `'a'`) when it is 10 or more, which adding 6
/// carries into the byte's bit 4.
fn ascii_digits(nibbles: u64) -> u64 {
    let letters = ((nibbles + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    nibbles + 0x3030_3030_3030_3030 + letters * 0x27
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::response::IntoResponse;

    use super::*;
    use crate::error::ApiError;

    /// A server error is logged once, at the default level, naming the
    /// request (the span that used to carry these is `debug` only now).
    #[test]
    fn a_server_error_is_logged_with_its_request_and_causes() {
        let lines = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = {
            let lines = Arc::clone(&lines);
            move || Logged(Arc::clone(&lines))
        };
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        let error = ApiError::from(eddy_streams::StreamError::internal_from(
            "committing an append",
            std::io::Error::other("disk full"),
        ));
        let response = error.into_response();
        assert_eq!(response.status(), 500);
        let id = HeaderValue::from_static("req-9");
        tracing::subscriber::with_default(subscriber, || {
            log_failure(&response, &id, &axum::http::Method::POST, "/orders/1");
            let refused = ApiError::from(eddy_streams::StreamError::NotFound { path: "x".into() })
                .into_response();
            log_failure(&refused, &id, &axum::http::Method::GET, "/x");
        });
        let text = String::from_utf8(lines.lock().map(|l| l.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(text.lines().count(), 1, "only the server error: {text}");
        for part in [
            "ERROR",
            "request_id=req-9",
            "method=POST",
            "path=\"/orders/1\"",
            "disk full",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }

    struct Logged(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logged {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut lines) = self.0.lock() {
                lines.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn request_ids_are_version_4_uuids() {
        let id = uuid_v4(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(&id, b"01234567-89ab-4def-8123-456789abcdef");
        let id = uuid_v4(u128::MAX);
        assert_eq!(&id, b"ffffffff-ffff-4fff-bfff-ffffffffffff");
    }

    proptest::proptest! {
        /// Every digit matches the plain formatting of the same bits.
        #[test]
        fn request_ids_spell_their_bits_in_hex(random: u128) {
            let hex = format!("{:032x}", uuid_v4_bits(random));
            let expected = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]
            );
            let id = uuid_v4(random);
            proptest::prop_assert_eq!(std::str::from_utf8(&id).ok(), Some(expected.as_str()));
        }
    }
}
