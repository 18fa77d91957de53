//! Request ids and the request span: every request gets an `x-request-id`
//! (the client's, or a new random UUID), echoed on the response by the
//! middleware, and is handled inside a `request` span carrying that id,
//! the method and the path (the stream path), so every log line the
//! request causes names them.

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

/// The span of one request, with its id, method and path; a disabled
/// span (nothing to build) when no subscriber listens at its level.
pub(crate) fn span(id: &HeaderValue, request: &Request) -> tracing::Span {
    tracing::info_span!(
        "request",
        request_id = %id.to_str().unwrap_or(""),
        method = %request.method(),
        path = %request.uri().path(),
    )
}

/// `random` as a version-4 UUID in its hyphenated lower-case form.
fn uuid_v4(random: u128) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = random & 0xFFFF_FFFF_FFFF_4FFF_BFFF_FFFF_FFFF_FFFF | 0x4000_8000_0000_0000_0000;
    let mut out = [b'-'; 36];
    let mut nibble = 0;
    for (i, slot) in out.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            continue;
        }
        *slot = HEX[((bits >> (124 - 4 * nibble)) & 0xF) as usize];
        nibble += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::uuid_v4;

    #[test]
    fn request_ids_are_version_4_uuids() {
        let id = uuid_v4(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(&id, b"01234567-89ab-4def-8123-456789abcdef");
        let id = uuid_v4(u128::MAX);
        assert_eq!(&id, b"ffffffff-ffff-4fff-bfff-ffffffffffff");
    }
}
