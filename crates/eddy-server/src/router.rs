//! The operational endpoints' router (probes, metrics, console) and the
//! middleware every response passes through (auth, security and CORS
//! headers, caching defaults).

use crate::auth;
use crate::handlers;
use crate::protocol;
use crate::route_class::RouteClass;
use crate::state::AppState;
use crate::{console, probes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The liveness probe's path.
pub(crate) const HEALTHZ: &str = "/healthz";
/// The readiness probe's path.
pub(crate) const READYZ: &str = "/readyz";
/// The Prometheus metrics' path.
pub(crate) const METRICS: &str = "/metrics";

/// The operational endpoints. A path they do not serve (the console's,
/// when it is off) goes to the stream handler, as every path that
/// [`routes`] does not name does.
pub(crate) fn operational(state: &AppState) -> Router {
    Router::new()
        .route(HEALTHZ, get(probes::healthz))
        .route(READYZ, get(probes::readyz))
        .route(METRICS, get(metrics))
        .merge(console::routes(state))
        .fallback(handlers::stream)
        .with_state(state.clone())
}

/// Whether `path` may be an operational endpoint's; every other path names
/// a stream.
pub(crate) fn routes(path: &str) -> bool {
    matches!(path, HEALTHZ | READYZ | METRICS) || console::serves(path)
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Not among `http`'s standard names. A name given as text would be parsed
/// and copied on every response; a constant is neither.
const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName =
    HeaderName::from_static("cross-origin-resource-policy");

/// Answers CORS preflights, checks the bearer token, and adds the security
/// and CORS headers to every response, errors included. A response that
/// does not say how it may be cached (writes, errors) is `no-store`, so no
/// cache keeps a 404 for a stream about to be created.
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = RouteClass::of(&request);
    let traced = tracing::enabled!(tracing::Level::DEBUG)
        .then(|| (request.method().clone(), request.uri().path().to_owned()));
    let caller = auth::Caller::of(&state.config, request.headers());
    let mut response = if request.method() == Method::OPTIONS {
        preflight()
    } else if let Err(denied) = auth::authorize(&state.config, caller, endpoint(&request)) {
        denied.into_response()
    } else {
        let _in_flight = InFlight::start(&state);
        next.run(request).await
    };
    if response.status().is_client_error() || response.status().is_server_error() {
        state.metrics.errors.increment(1);
    }
    state
        .metrics
        .request(route, response.status().as_u16(), started.elapsed());
    if let Some((method, path)) = traced {
        tracing::debug!(
            %method,
            %path,
            status = response.status().as_u16(),
            elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "request"
        );
    }
    let headers = response.headers_mut();
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
    response
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

/// What a request asks of the endpoints, before a handler looks at the
/// streams it names.
fn endpoint(request: &Request) -> auth::Access<'static> {
    let path = request.uri().path();
    // The console page holds no data; its API calls carry the token.
    if matches!(path, HEALTHZ | READYZ | console::PAGE) {
        return auth::Access::Open;
    }
    let acknowledges = request.method() == Method::POST
        && handlers::reserved(path).is_some_and(|(_, rest)| {
            rest.strip_prefix("subscriptions/")
                .and_then(|rest| rest.split_once('/'))
                .is_some_and(|(_, action)| matches!(action, "ack" | "release" | "callback"))
        });
    if acknowledges {
        auth::Access::WakeToken
    } else {
        auth::Access::Endpoint
    }
}
