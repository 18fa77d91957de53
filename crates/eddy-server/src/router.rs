//! The operational endpoints' router: probes, metrics, console.

use crate::handlers;
use crate::state::AppState;
use crate::{console, probes};
use axum::extract::State;
use axum::http::header;
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
        .route(HEALTHZ, get(|| async { probes::alive() }))
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
