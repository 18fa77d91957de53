//! The middleware every request passes through, written out as one
//! function around the endpoints: the request id and span, CORS
//! preflights, authorization, the in-flight gauge and the request
//! metrics, the security and CORS headers, caching defaults, and
//! compression.
//!
//! It is one function rather than a stack of layers because each layer
//! wraps the request's future and the response's body once more (and
//! axum's `from_fn` boxes the rest of the stack for every request), so a
//! request that used none of the features paid for every wrapper. Here a
//! request without `Accept-Encoding`, with no log subscriber listening,
//! pays for a copy of the common headers and the request id's insert; one
//! that accepts a coding goes through tower-http's compression service,
//! and only then is its body wrapped.

use std::future::{ready, Future};
use std::sync::LazyLock;
use std::time::Instant;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::future::Either;
use futures::FutureExt;
use tower::ServiceExt;
use tracing::Instrument;

use crate::app::Parts;
use crate::auth::{self, Access, Caller};
use crate::route_class::RouteClass;
use crate::state::AppState;
use crate::{cache, console, handlers, observe, protocol, router};

/// Not among `http`'s standard names. A name given as text would be parsed
/// and copied on every response; a constant is neither.
const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

/// Serves one request through the middleware and the endpoints.
///
/// What it does before the endpoints runs at once, and what it does after
/// maps their answer: an `async fn` would hold the request in its state
/// beside the endpoints' copy, and the whole future is copied into its box.
pub(crate) fn serve(
    parts: &Parts,
    request: axum::extract::Request,
) -> impl Future<Output = Response> + Send + '_ {
    let started = Instant::now();
    let id = observe::request_id(request.headers());
    let span = observe::span(&id, &request);
    let route = RouteClass::of(&request);
    // Kept to name the request in its failure's log line (a `Uri` clone
    // shares its bytes).
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let traced = tracing::enabled!(tracing::Level::DEBUG);
    // The checks before the endpoints log inside the request's span too.
    let answer = span.in_scope(|| guarded(parts, request)).instrument(span);
    // A combinator, not an `async` block: awaiting the answer there
    // would copy it into a second slot of the block's state.
    answer.map(move |mut response| {
        let state = &parts.state;
        observe::log_failure(&response, &id, &method, uri.path());
        if response.status().is_client_error() || response.status().is_server_error() {
            state.metrics.errors.increment(1);
        }
        state
            .metrics
            .request(route, response.status().as_u16(), started.elapsed());
        if traced {
            tracing::debug!(
                %method,
                path = uri.path(),
                status = response.status().as_u16(),
                elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                "request"
            );
        }
        let headers = response.headers_mut();
        // Answers begun from `answer_headers` carry them already.
        if !headers.contains_key(header::X_CONTENT_TYPE_OPTIONS) {
            add_common(headers);
        }
        headers.insert(observe::REQUEST_ID, id);
        response
    })
}

/// How many headers an answer may carry without its map growing: the
/// endpoint's own and the middleware's. A map that grows rehashes on the
/// hot path.
const ANSWER_HEADERS: usize = 24;

/// An empty answer's header map, holding already what the middleware adds
/// to every answer (security and CORS headers, `Cache-Control: no-store`),
/// with room for the endpoint's own. An endpoint that begins its answer
/// from it spares the middleware five inserts: a copy of a map built once
/// costs less than hashing and inserting each header anew. The endpoint
/// may replace `Cache-Control`, and must leave the others as they are.
pub(crate) fn answer_headers() -> HeaderMap {
    static COMMON: LazyLock<HeaderMap> = LazyLock::new(|| {
        let mut headers = HeaderMap::with_capacity(ANSWER_HEADERS);
        add_common(&mut headers);
        headers
    });
    COMMON.clone()
}

/// Adds the headers every answer carries: `Cache-Control: no-store` when
/// the endpoint set none, and the security and CORS headers.
fn add_common(headers: &mut HeaderMap) {
    // One growth of the map for the headers below, not one per insert.
    headers.reserve(5);
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        CROSS_ORIGIN_RESOURCE_POLICY,
        HeaderValue::from_static("cross-origin"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(protocol::EXPOSED_HEADERS),
    );
}

/// Answers a CORS preflight, refuses what [`auth::authorize`] refuses, and
/// otherwise hands the request to the endpoints, through the compression
/// service when the client accepts a coding. (A plain function choosing a
/// future, for the reason [`serve`] is one.)
fn guarded(
    parts: &Parts,
    request: axum::extract::Request,
) -> impl Future<Output = Response> + Send + '_ {
    let state = &parts.state;
    if request.method() == Method::OPTIONS {
        return Either::Left(ready(preflight()));
    }
    let caller = Caller::of(&state.config, request.headers());
    if let Err(denied) = auth::authorize(&state.config, caller, endpoint(&request)) {
        return Either::Left(ready(denied.into_response()));
    }
    let in_flight = InFlight::start(state);
    let answer =
        if state.config.compression.enabled
            && request.headers().contains_key(header::ACCEPT_ENCODING)
        {
            Either::Left(parts.compressed.clone().oneshot(request).map(
                |compressed| match compressed {
                    Ok(response) => cache::tag_encoding(response.map(axum::body::Body::new)),
                    Err(never) => match never {},
                },
            ))
        } else {
            Either::Right(parts.endpoints.serve(request))
        };
    // Counted in flight until the answer is ready, or dropped.
    Either::Right(answer.map(move |response| {
        drop(in_flight);
        response
    }))
}

/// What a request asks of the endpoints, before a handler looks at the
/// streams it names.
fn endpoint(request: &axum::extract::Request) -> Access<'static> {
    let path = request.uri().path();
    // The console page holds no data; its API calls carry the token.
    if matches!(path, router::HEALTHZ | router::READYZ | console::PAGE) {
        return Access::Open;
    }
    let acknowledges = request.method() == Method::POST
        && handlers::reserved(path).is_some_and(|(_, rest)| {
            rest.strip_prefix("subscriptions/")
                .and_then(|rest| rest.split_once('/'))
                .is_some_and(|(_, action)| matches!(action, "ack" | "release" | "callback"))
        });
    if acknowledges {
        Access::WakeToken
    } else {
        Access::Endpoint
    }
}

/// Counts a request in `eddy_requests_in_flight` while it is handled
/// (also when the client goes away and the handler is dropped).
struct InFlight<'a>(&'a AppState);

impl<'a> InFlight<'a> {
    fn start(state: &'a AppState) -> Self {
        state.metrics.requests_in_flight.increment(1);
        InFlight(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.metrics.requests_in_flight.decrement(1);
    }
}

fn preflight() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (
                header::ACCESS_CONTROL_ALLOW_METHODS,
                "GET, HEAD, PUT, POST, DELETE, OPTIONS",
            ),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                protocol::ALLOWED_HEADERS,
            ),
            (header::ACCESS_CONTROL_MAX_AGE, "86400"),
        ],
    )
        .into_response()
}
