//! The console: one static page (`/console`) that shows the streams with
//! their sizes and tails, a live tail of a chosen stream over the
//! protocol's own SSE, and the projection bindings whose checkpoints live
//! in the store, with their lag bars and states (`/_eddy/bindings`, from
//! [`eddy_projection::inspect`]).
//!
//! The page holds no data: everything it shows comes from API calls that
//! carry the same bearer token as any client's (asked for on the page
//! when the server wants one), so the page itself is served without one.
//! `ServerConfig::console` (`eddy serve --no-console`) turns both routes
//! off.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

/// The page's path.
pub(crate) const PAGE: &str = "/console";
/// The bindings endpoint's path.
pub(crate) const BINDINGS: &str = "/_eddy/bindings";

const HTML: &str = include_str!("console.html");

/// The server's root: a browser that opens the address `eddy serve`
/// prints lands on the console.
pub(crate) const ROOT: &str = "/";

/// The console's routes, when the configuration turns it on.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    if !state.config.console {
        return Router::new();
    }
    Router::new()
        .route(ROOT, get(root))
        .route(PAGE, get(page))
        .route(BINDINGS, get(bindings))
}

/// Whether `path` is one of the console's (for the metrics' route class).
pub(crate) fn serves(path: &str) -> bool {
    path == PAGE || path == BINDINGS || path == ROOT
}

/// `GET /`: a browser (a request that asks for HTML) is sent to the
/// console; anything else gets what the stream handler answers for `/`,
/// which names no stream.
async fn root(state: State<AppState>, request: Request) -> Response {
    if asks_for_html(request.headers()) {
        Redirect::to(PAGE).into_response()
    } else {
        crate::handlers::stream(state, request).await
    }
}

/// Whether the `Accept` header names HTML, as a browser's navigation does.
fn asks_for_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| media.trim().starts_with("text/html"))
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        HTML,
    )
        .into_response()
}

/// `GET /_eddy/bindings`: every binding with checkpoints in the store (and
/// in [`ServerConfig::checkpoint_table`](crate::ServerConfig)), as JSON
/// ([`eddy_projection::BindingReport`]s).
async fn bindings(State(state): State<AppState>) -> Response {
    let table = state.config.checkpoint_table.as_ref();
    let table = table.map(|t| t.0.as_ref());
    match eddy_projection::inspect_with(&state.store, table).await {
        Ok(reports) => match serde_json::to_vec(&reports) {
            Ok(json) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                json,
            )
                .into_response(),
            Err(err) => internal(&err.to_string()),
        },
        Err(err) => {
            tracing::warn!(error = %err, "the console cannot list the bindings");
            internal(&err.to_string())
        }
    }
}

fn internal(message: &str) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot list the bindings: {message}\n"),
    )
        .into_response()
}
