//! `GET /_eddy/streams?prefix=...`: Eddy's own listing endpoint, which the
//! remote client uses for [`Storage::list`](eddy_streams::Storage::list).

use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;

use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::ListedStream;

pub(super) async fn list(
    state: &AppState,
    method: &Method,
    endpoint: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    if endpoint != "streams" {
        return Err(ApiError::bad_request(format!(
            "`/{}{endpoint}` is reserved; the only endpoint there is `streams`",
            crate::protocol::RESERVED_PREFIX
        )));
    }
    if method != Method::GET {
        return Err(ApiError::MethodNotAllowed(method.clone()));
    }
    let mut prefix = String::new();
    for pair in query.unwrap_or("").split('&') {
        if let Some(value) = pair.strip_prefix("prefix=") {
            prefix = percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| ApiError::bad_request("`prefix` is not UTF-8"))?
                .into_owned();
        }
    }
    let streams: Vec<ListedStream> = state
        .store
        .list(&prefix)
        .await?
        .iter()
        .map(ListedStream::from)
        .collect();
    let json = serde_json::to_vec(&streams).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}
