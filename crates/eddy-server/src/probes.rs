//! The probes: `/healthz` says the process is up, `/readyz` that it can
//! take traffic: not shutting down, and its store open and writable.

use std::sync::LazyLock;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::router;
use crate::state::AppState;

/// Whether `request` is the liveness probe, `GET /healthz`.
pub(crate) fn is_liveness<B>(request: &axum::http::Request<B>) -> bool {
    request.method() == axum::http::Method::GET && request.uri().path() == router::HEALTHZ
}

/// The answer to `GET /healthz`: the process is up. It is given before
/// the middleware (no token is needed, no request id, span, metrics or
/// CORS headers are added): it says only that this process answers HTTP.
pub(crate) fn alive() -> Response {
    // Its headers are a copy of a map built once: a copy costs less than
    // hashing and inserting them anew for every probe.
    static HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| {
        let mut headers = HeaderMap::with_capacity(2);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers
    });
    let mut response = Response::new(Body::from("ok\n"));
    *response.headers_mut() = HEADERS.clone();
    response
}

/// `GET /readyz`: 200 when the store takes writes, 503 with the reason
/// otherwise. It asks [`Storage::writable`](eddy_streams::Storage::writable),
/// which goes through the store's write path (SQLite's writer thread, a
/// PostgreSQL read-write transaction) and writes nothing: no stream of the
/// probe's shows in listings.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if *state.stopping().borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n",
        )
            .into_response();
    }
    match state.store.writable().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "not ready: the store refused a write");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the store refused a write: {err}\n"),
            )
                .into_response()
        }
    }
}
