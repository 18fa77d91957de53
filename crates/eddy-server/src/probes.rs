//! The probes: `/healthz` says the process is up, `/readyz` that it can
//! take traffic: not shutting down, and its store open and writable.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
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
