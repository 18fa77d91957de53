//! The server's error type and its one mapping to HTTP responses.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use eddy_streams::{ErrorKind, StreamError};

use crate::protocol;

/// Everything a request can fail with.
///
/// Store errors keep their [`StreamError::code`]; the others have codes of
/// their own. [`ApiError::status`] is the single place that decides the
/// HTTP status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The store refused or failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A create on a path that a soft-deleted stream still reserves.
    #[error("stream `{0}` was deleted but forks still use it; the path cannot be reused yet")]
    PathReserved(String),
    /// A malformed header, query parameter or body.
    #[error("{0}")]
    BadRequest(String),
    /// The request body is larger than the server accepts.
    #[error("the request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The client sent the body too slowly.
    #[error("timed out reading the request body")]
    BodyTimeout,
    /// A missing or wrong bearer token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// The request is authenticated but not allowed (a write under the
    /// reserved stream prefix without the admin token).
    #[error("{0}")]
    Forbidden(String),
    /// The cap on concurrent live readers is reached.
    #[error("too many live readers (limit {limit}); retry later")]
    TooManyLiveReaders {
        /// The cap.
        limit: usize,
    },
    /// The cap on streams per server is reached.
    #[error("the server holds {limit} streams, its limit (max_streams); delete some first")]
    TooManyStreams {
        /// The cap.
        limit: usize,
    },
    /// A method streams do not support.
    #[error("method {0} is not supported on a stream")]
    MethodNotAllowed(Method),
    /// The request's connection was closed before it was answered (its
    /// client took no response bytes for the write timeout): nobody
    /// reads the answer.
    #[error("the connection was closed before the answer")]
    ConnectionClosed,
}

impl ApiError {
    /// A bad request with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest(message.into())
    }

    /// Maps a store error of a create: a soft-deleted path conflicts.
    pub fn on_create(err: StreamError) -> Self {
        match err {
            StreamError::SoftDeleted { path } => ApiError::PathReserved(path),
            other => ApiError::Stream(other),
        }
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Stream(err) => err.code(),
            ApiError::PathReserved(_) => "stream/path-reserved",
            ApiError::BadRequest(_) => "request/invalid",
            ApiError::BodyTooLarge { .. } => "request/too-large",
            ApiError::BodyTimeout => "request/timeout",
            ApiError::Unauthorized => "auth/unauthorized",
            ApiError::Forbidden(_) => "auth/forbidden",
            ApiError::TooManyLiveReaders { .. } => "live/too-many-readers",
            ApiError::TooManyStreams { .. } => "limit/streams",
            ApiError::MethodNotAllowed(_) => "request/method-not-allowed",
            ApiError::ConnectionClosed => "request/connection-closed",
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Stream(err) => stream_status(err),
            ApiError::PathReserved(_) => StatusCode::CONFLICT,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::TooManyLiveReaders { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyStreams { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::ConnectionClosed => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Protocol headers that go with the error.
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let mut put = |name: HeaderName, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        };
        match self {
            ApiError::Stream(StreamError::Closed { final_offset, .. }) => {
                put(protocol::CLOSED, "true".into());
                put(protocol::NEXT_OFFSET, final_offset.to_string());
            }
            ApiError::Stream(StreamError::OffsetBeyondTail { tail, .. }) => {
                put(protocol::NEXT_OFFSET, tail.to_string());
            }
            ApiError::Stream(StreamError::OffsetDropped { earliest, .. }) => {
                put(protocol::EARLIEST_OFFSET, earliest.to_string());
            }
            ApiError::Stream(StreamError::OffsetMismatch { actual, .. }) => {
                put(protocol::NEXT_OFFSET, actual.to_string());
            }
            ApiError::Stream(StreamError::ProducerSeqGap {
                expected, received, ..
            }) => {
                put(protocol::PRODUCER_EXPECTED_SEQ, expected.to_string());
                put(protocol::PRODUCER_RECEIVED_SEQ, received.to_string());
            }
            ApiError::Stream(StreamError::ProducerFenced { current, .. }) => {
                put(protocol::PRODUCER_EPOCH, current.to_string());
            }
            ApiError::Stream(StreamError::TooLarge { limit, .. })
            | ApiError::Stream(StreamError::TooManyProducers { limit, .. })
            | ApiError::Stream(StreamError::TooManyStreams { limit })
            | ApiError::Stream(StreamError::TooManyMessages { limit })
            | ApiError::BodyTooLarge { limit }
            | ApiError::TooManyStreams { limit } => {
                put(protocol::LIMIT, limit.to_string());
            }
            ApiError::Stream(StreamError::ForkTooLarge { limit, .. }) => {
                put(protocol::LIMIT, limit.to_string());
            }
            ApiError::Unauthorized => put(header::WWW_AUTHENTICATE, "Bearer".into()),
            ApiError::TooManyLiveReaders { .. } => put(header::RETRY_AFTER, "1".into()),
            ApiError::Stream(err) if err.is_retryable() => put(header::RETRY_AFTER, "1".into()),
            ApiError::MethodNotAllowed(_) => put(
                header::ALLOW,
                "GET, HEAD, PUT, POST, DELETE, OPTIONS".into(),
            ),
            _ => {}
        }
        put(protocol::ERROR_CODE, self.code().into());
        headers
    }
}

/// The status of each kind of store error.
fn stream_status(err: &StreamError) -> StatusCode {
    match err.kind() {
        // A deleted stream is simply absent on the wire; `eddy-error`
        // still tells the two apart.
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Gone => StatusCode::GONE,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::LimitReached => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The JSON body of an error response: the stable code, a message for
/// people, and for store errors their fields (the `details` of
/// [`StreamError`]'s serde form), from which the remote client rebuilds
/// the same error.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ErrorBody {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ErrorBody {
    fn of(err: &ApiError) -> Self {
        let details = match err {
            ApiError::Stream(err) => serde_json::to_value(err)
                .ok()
                .and_then(|mut form| form.get_mut("details").map(serde_json::Value::take)),
            _ => None,
        };
        ErrorBody {
            code: err.code().to_owned(),
            message: err.to_string(),
            details,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let failure = status.is_server_error().then(|| crate::observe::Failure {
            code: self.code(),
            error: with_sources(&self),
        });
        if failure.is_none() {
            tracing::debug!(code = self.code(), error = %self, "request refused");
        }
        let body = ErrorBody::of(&self);
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (status, self.headers(), json).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(failure) = failure {
            // The middleware logs it, with the request's id, method and path.
            response.extensions_mut().insert(failure);
        }
        response
    }
}

/// An error and its causes on one line: `error: cause: cause` (a
/// library's own message often omits them).
pub(crate) fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
