//! Request ids and the request span: every request gets an `x-request-id`
//! (the client's, or a new UUID), echoed on the response, and is handled
//! inside a `request` span carrying that id, the method and the path (the
//! stream path), so every log line the request causes names them.

use axum::extract::Request;
use axum::http::HeaderName;
use tower::layer::util::Stack;
use tower::ServiceBuilder;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
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
