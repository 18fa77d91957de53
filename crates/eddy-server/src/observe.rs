//! Request ids and the request span: every request gets an `x-request-id`
//! (the client's, or a new random UUID), echoed on the response, and is handled
//! inside a `request` span carrying that id, the method and the path (the
//! stream path), so every log line the request causes names them.

use axum::extract::Request;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use tower::layer::util::Stack;
use tower::ServiceBuilder;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{MakeSpan, TraceLayer};

/// The header that carries the request id.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The span of one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &Request<B>) -> tracing::Span {
        let id = request
            .extensions()
            .get::<RequestId>()
            .and_then(|id| id.header_value().to_str().ok())
            .unwrap_or("");
        tracing::info_span!(
            "request",
            request_id = %id,
            method = %request.method(),
            path = %request.uri().path(),
        )
    }
}

/// Makes version-4 UUIDs from a fast thread-local generator: a request id
/// only has to be unique, not secret, so it costs no system call (the
/// OS random source is kept for tokens and secrets).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MakeRequestUuid;

impl MakeRequestId for MakeRequestUuid {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        let value = HeaderValue::from_bytes(&uuid_v4(fastrand::u128(..))).ok()?;
        Some(RequestId::new(value))
    }
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

type Trace = TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan, (), (), (), (), ()>;

/// The layers, outermost first: set the id, open the span, echo the id.
pub(crate) type Layers = Stack<
    PropagateRequestIdLayer,
    Stack<Trace, Stack<SetRequestIdLayer<MakeRequestUuid>, tower::layer::util::Identity>>,
>;

/// Request ids and the request span. The span only scopes log lines: the
/// store errors log themselves (`ApiError`), so the trace layer's own
/// request, response and failure events are off.
pub(crate) fn layers() -> ServiceBuilder<Layers> {
    ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(RequestSpan)
                .on_request(())
                .on_response(())
                .on_body_chunk(())
                .on_eos(())
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
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
