//! The stream endpoints: every path that is not an operational endpoint
//! names a stream, and the method says what to do with it.

mod append;
mod create;
mod encode;
mod list;
mod read;
mod sse;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use eddy_streams::{Expiry, StreamInfo, StreamPath};

use crate::error::ApiError;
use crate::parse;
use crate::protocol;
use crate::state::AppState;

/// Dispatches a stream request by method.
pub(crate) async fn stream(State(state): State<AppState>, request: Request) -> Response {
    match dispatch(state, request).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn dispatch(state: AppState, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    if let Some(prefix) = parts
        .uri
        .path()
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(protocol::RESERVED_PREFIX))
    {
        return list::list(&state, &parts.method, prefix, parts.uri.query()).await;
    }
    let path = parse::stream_path(parts.uri.path())?;
    match parts.method {
        Method::PUT => create::create(&state, &path, &parts.uri, &parts.headers, body).await,
        Method::POST => append::append(&state, &path, &parts.headers, body).await,
        Method::GET => read::get(&state, &path, parts.uri.query(), &parts.headers).await,
        Method::HEAD => head(&state, &path).await,
        Method::DELETE => {
            state.store.delete(&path).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        other => Err(ApiError::MethodNotAllowed(other)),
    }
}

async fn head(state: &AppState, path: &StreamPath) -> Result<Response, ApiError> {
    let info = state.store.head(path).await?;
    let mut headers = HeaderMap::new();
    describe(&mut headers, &info);
    put(
        &mut headers,
        header::CACHE_CONTROL.as_str(),
        "no-store".into(),
    );
    Ok((StatusCode::OK, headers, Body::empty()).into_response())
}

/// The headers that describe a stream: content type, tail, expiry, close.
fn describe(headers: &mut HeaderMap, info: &StreamInfo) {
    put(
        headers,
        header::CONTENT_TYPE.as_str(),
        info.config.content_type.clone(),
    );
    put(headers, protocol::NEXT_OFFSET, info.tail.to_string());
    match info.config.expiry {
        Expiry::Never => {}
        Expiry::Ttl(secs) => put(headers, protocol::TTL, secs.to_string()),
        Expiry::At(at) => put(headers, protocol::EXPIRES_AT, parse::format_rfc3339(at)),
    }
    if info.closed {
        put(headers, protocol::CLOSED, "true".into());
    }
    put(headers, protocol::STREAM_BYTES, info.bytes.to_string());
}

/// Sets a response header; a value that cannot be a header is dropped
/// (values come from the store, which only holds what headers carried).
fn put(headers: &mut HeaderMap, name: &str, value: String) {
    match (
        header::HeaderName::try_from(name),
        HeaderValue::try_from(value),
    ) {
        (Ok(name), Ok(value)) => {
            headers.insert(name, value);
        }
        _ => tracing::warn!(header = name, "dropped a response header that is not valid"),
    }
}

/// Reads a request body within the size limit and the body timeout.
async fn read_body(state: &AppState, body: Body) -> Result<bytes::Bytes, ApiError> {
    let limit = state.config.max_body_bytes;
    match tokio::time::timeout(state.config.body_timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => Err(ApiError::BodyTimeout),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => {
            let too_large = std::error::Error::source(&err)
                .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
            if too_large {
                Err(ApiError::BodyTooLarge { limit })
            } else {
                Err(ApiError::bad_request(format!(
                    "cannot read the request body: {err}"
                )))
            }
        }
    }
}
