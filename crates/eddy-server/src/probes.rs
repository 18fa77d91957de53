//! The probes: `/healthz` says the process is up, `/readyz` that it can
//! take traffic: not shutting down, and its store open and writable.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eddy_streams::{Payload, StreamConfig, StreamPath};

use crate::state::AppState;

/// The stream the readiness probe creates (once) and then finds again.
/// Under `__eddy/`, so clients cannot change it.
pub(crate) const READY_STREAM: &str = "__eddy/readyz";

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when the store answers a write-path call, 503 with
/// the reason otherwise. The call is an idempotent create of
/// [`READY_STREAM`]: it goes through the store's writer (SQLite's writer
/// thread, a PostgreSQL transaction) but writes nothing after the first.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if *state.stopping().borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n",
        )
            .into_response();
    }
    let outcome = match StreamPath::new(READY_STREAM) {
        Ok(path) => state
            .store
            .create(
                &path,
                StreamConfig::bytes("application/octet-stream"),
                Payload::empty(),
            )
            .await
            .map(|_| ()),
        Err(err) => Err(err),
    };
    match outcome {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(err) => {
            tracing::warn!(stream = READY_STREAM, error = %err, "not ready: the store refused a write");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the store refused a write: {err}\n"),
            )
                .into_response()
        }
    }
}
