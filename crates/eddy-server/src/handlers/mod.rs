//! The stream endpoints: every path that is not an operational endpoint
//! names a stream, and the method says what to do with it.

mod append;
mod compact;
mod create;
mod encode;
mod list;
mod read;
mod sse;

use std::future::Future;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use eddy_streams::{Expiry, Offset, StreamInfo, StreamPath};
use futures::FutureExt;

use crate::auth::{self, Access, Caller, Operation};
use crate::error::ApiError;
use crate::parse;
use crate::protocol;
use crate::state::AppState;

/// Dispatches a stream request by method. (A plain function, so that its
/// future is the dispatch's own, without a second copy of the request.)
///
/// The dispatch's future is boxed here, where it is made: it is about a
/// kilobyte, and each layer of the middleware that wraps it by value
/// moved it whole once more (some ten copies per request).
pub(crate) fn stream(
    State(state): State<AppState>,
    request: Request,
) -> impl Future<Output = Response> + Send {
    Box::pin(dispatch(state, request))
        .map(|answered| answered.unwrap_or_else(IntoResponse::into_response))
}

async fn dispatch(state: AppState, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    if let Some(prefix) = parts
        .uri
        .path()
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(protocol::RESERVED_PREFIX))
    {
        return match prefix.strip_prefix("compact/") {
            Some(path) => compact::compact(&state, &parts.method, &parts.headers, path).await,
            None => list::list(&state, &parts.method, prefix, parts.uri.query()).await,
        };
    }
    if let Some((base, rest)) = reserved(parts.uri.path()) {
        let body = read_body(&state, body).await?;
        let (base, rest) = (base.to_owned(), rest.to_owned());
        // Boxed: its future is the largest of all, and every stream request's
        // future would otherwise be as large and be copied whole.
        return Ok(Box::pin(crate::subscriptions::handle(
            &state,
            &parts.method,
            &base,
            &rest,
            &parts.headers,
            body,
        ))
        .await);
    }
    let path = parse::stream_path(parts.uri.path())?;
    let operation = match parts.method {
        Method::PUT | Method::POST | Method::DELETE => Operation::Write,
        _ => Operation::Read,
    };
    let caller = Caller::of(&state.config, &parts.headers);
    auth::authorize(
        &state.config,
        caller,
        Access::Stream(operation, path.as_str()),
    )?;
    // A future is as large as its largest branch, and every request's is
    // copied whole at each level: the create's and the read's, twice an
    // append's, are boxed, so that an append does not copy their room.
    match parts.method {
        Method::PUT => {
            Box::pin(create::create(
                &state,
                &path,
                &parts.uri,
                &parts.headers,
                body,
            ))
            .await
        }
        Method::POST => append::append(&state, &path, &parts.headers, body).await,
        Method::GET => {
            let unread = parts.extensions.get::<crate::server::UnreadBudget>();
            Box::pin(read::get(
                &state,
                &path,
                parts.uri.query(),
                &parts.headers,
                unread,
            ))
            .await
        }
        Method::HEAD => head(&state, &path).await,
        Method::DELETE => {
            state.store.delete(&path).await?;
            state.streams.released();
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        other => Err(ApiError::MethodNotAllowed(other)),
    }
}

/// Splits `/<base>/__ds/<rest>` (the protocol's reserved API) into the
/// base path and the rest.
pub(crate) fn reserved(uri_path: &str) -> Option<(&str, &str)> {
    const API: &str = "__ds/";
    let trimmed = uri_path.strip_prefix('/').unwrap_or(uri_path);
    // Most paths have no `_` at all, which a `memchr` scan finds at once;
    // this runs up to three times for every request.
    if !trimmed.as_bytes().contains(&b'_') {
        return None;
    }
    if let Some(rest) = trimmed.strip_prefix(API) {
        return Some(("", rest));
    }
    // A look after each `/`, found by a plain byte loop: a searcher set up
    // anew for every request costs more than the scan of a short path.
    let mut slashes = trimmed.bytes().enumerate().filter(|&(_, b)| b == b'/');
    slashes.find_map(|(at, _)| {
        trimmed[at + 1..]
            .strip_prefix(API)
            .map(|rest| (&trimmed[..at], rest))
    })
}

async fn head(state: &AppState, path: &StreamPath) -> Result<Response, ApiError> {
    let info = state.store.head(path).await?;
    let mut headers = response_headers();
    describe(&mut headers, &info);
    put(&mut headers, header::CACHE_CONTROL, "no-store");
    Ok(respond(StatusCode::OK, headers, Body::empty()))
}

/// An empty header map for an answer (see
/// [`answer_headers`](crate::middleware::answer_headers)).
fn response_headers() -> HeaderMap {
    crate::middleware::answer_headers()
}

/// A response built in place from its parts. (axum's `(status, headers,
/// body)` form copies every header into a second map, on every request.)
fn respond(status: StatusCode, headers: HeaderMap, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// The headers that describe a stream: content type, tail, expiry, close.
fn describe(headers: &mut HeaderMap, info: &StreamInfo) {
    put(
        headers,
        header::CONTENT_TYPE,
        info.config.content_type.clone(),
    );
    put_offset(headers, protocol::NEXT_OFFSET, info.tail);
    match info.config.expiry {
        Expiry::Never => {}
        Expiry::Ttl(secs) => put(headers, protocol::TTL, secs.to_string()),
        Expiry::At(at) => put(headers, protocol::EXPIRES_AT, parse::format_rfc3339(at)),
    }
    if info.closed {
        put(headers, protocol::CLOSED, "true");
    }
    put(headers, protocol::STREAM_BYTES, info.bytes.to_string());
    put_retention(headers, &info.config.retention);
    put_compaction(headers, info.config.compaction.as_ref());
    put_offset(headers, protocol::EARLIEST_OFFSET, info.earliest);
    put_dropped_deletes(headers, info.dropped_deletes);
}

/// `Eddy-Deletes-Dropped-Before` and `Eddy-Deletes-Dropped`, for a stream
/// whose compaction dropped a delete past its lifetime.
fn put_dropped_deletes(headers: &mut HeaderMap, dropped: Option<eddy_streams::DroppedDeletes>) {
    if let Some(dropped) = dropped {
        put_offset(headers, protocol::DELETES_DROPPED_BEFORE, dropped.before);
        put(
            headers,
            protocol::DELETES_DROPPED,
            dropped.count.to_string(),
        );
    }
}

/// `Eddy-Compaction`, for a stream that has a policy.
fn put_compaction(headers: &mut HeaderMap, compaction: Option<&eddy_streams::Compaction>) {
    if let Some(policy) = compaction {
        put(headers, protocol::COMPACTION, policy.to_string());
    }
}

/// `Eddy-Retention`, for a stream that has a policy.
fn put_retention(headers: &mut HeaderMap, retention: &eddy_streams::Retention) {
    if !retention.is_none() {
        put(headers, protocol::RETENTION, retention.to_string());
    }
}

/// Sets a response header; a value that cannot be a header is dropped
/// (values come from the store, which only holds what headers carried).
fn put<V>(headers: &mut HeaderMap, name: HeaderName, value: V)
where
    HeaderValue: TryFrom<V>,
{
    match HeaderValue::try_from(value) {
        Ok(value) => {
            headers.insert(name, value);
        }
        Err(_) => tracing::warn!(header = %name, "dropped a response header that is not valid"),
    }
}

/// Sets a header to an offset, its text taken from the stack.
fn put_offset(headers: &mut HeaderMap, name: HeaderName, offset: Offset) {
    put(headers, name, offset.text().as_bytes());
}

/// Reads a request body within the size limit and the body timeout.
///
/// An oversized body is still read to its end (up to [`DRAIN_LIMIT`]) and
/// discarded before the 413 goes out, so the client sees the answer rather
/// than a connection reset in the middle of its upload.
///
/// A body that has already arrived whole (small appends come in the same
/// packets as their head) is taken without arming the timer.
async fn read_body(state: &AppState, body: Body) -> Result<bytes::Bytes, ApiError> {
    let limit = state.config.max_body_bytes;
    let mut collecting = std::pin::pin!(collect(body, limit));
    if let std::task::Poll::Ready(result) = futures::poll!(collecting.as_mut()) {
        return result;
    }
    match tokio::time::timeout(state.config.body_timeout, collecting).await {
        Err(_) => Err(ApiError::BodyTimeout),
        Ok(result) => result,
    }
}

/// The largest declared body length whose room is set aside before the
/// data arrives.
const PRESIZED_BODY_LIMIT: usize = 64 * 1024;

/// How much of an oversized body is read and discarded before answering.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

async fn collect(mut body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    use axum::body::HttpBody as _;
    use http_body_util::BodyExt;
    // A small body of a declared length gets its room at once. A large
    // one grows as its data arrives: a declared length costs the client
    // nothing, so it must not make the server set memory aside.
    let declared = body
        .size_hint()
        .exact()
        .and_then(|n| usize::try_from(n).ok());
    let room = declared.filter(|&n| n <= limit.min(PRESIZED_BODY_LIMIT));
    let mut buffer = bytes::BytesMut::with_capacity(room.unwrap_or(0));
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len());
        if seen <= limit {
            buffer.extend_from_slice(&data);
        } else if seen > DRAIN_LIMIT {
            break;
        }
        // A body of a declared length ends with its last byte: asking for
        // another frame would only hear that, through every body layer.
        if body.is_end_stream() {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::BodyTooLarge { limit });
    }
    Ok(buffer.freeze())
}

/// A 200 answer of Eddy's own endpoints: `value` as JSON.
fn json(value: &impl serde::Serialize) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::reserved;

    #[test]
    fn the_reserved_api_is_found_after_the_first_segment_that_names_it() {
        for (uri, expected) in [
            ("/__ds/subscriptions", Some(("", "subscriptions"))),
            ("__ds/x", Some(("", "x"))),
            ("/a/b/__ds/x/y", Some(("a/b", "x/y"))),
            ("/a/__ds/", Some(("a", ""))),
            ("/a/__ds/b/__ds/c", Some(("a", "b/__ds/c"))),
            ("/a__ds/x", None),
            ("/a/__dsx/y", None),
            ("/a/__ds", None),
            ("/a/b", None),
            ("/", None),
        ] {
            assert_eq!(reserved(uri), expected, "{uri}");
        }
    }

    /// Every layer of the middleware holds the handler's future by value,
    /// so its size is copied once per layer on every request.
    #[tokio::test]
    async fn a_stream_request_future_is_a_pointer_whatever_the_handler_holds() {
        let (_stop, stopping) = tokio::sync::watch::channel(false);
        let state = crate::AppState::new(
            std::sync::Arc::new(eddy_streams::MemoryStorage::new()),
            crate::ServerConfig::default(),
            stopping,
        );
        let request = axum::http::Request::post("/a/b")
            .body(axum::body::Body::empty())
            .expect("a valid request");
        let future = super::stream(axum::extract::State(state), request);
        assert!(
            std::mem::size_of_val(&future) <= 16,
            "{} bytes",
            std::mem::size_of_val(&future)
        );
    }
}
