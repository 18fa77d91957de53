//! Turning error responses back into [`StreamError`]s.
//!
//! Eddy's server puts a store error's fields in its error body (the
//! `details` of [`StreamError`]'s serde form), so the client rebuilds the
//! very error the store raised. Responses without such a body (`HEAD`, the
//! server's own refusals, a proxy in between) are mapped from the stable
//! code in `eddy-error` and the status; an unknown code is an internal
//! error, never retried.

use eddy_streams::{StreamError, StreamPath};
use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};

use super::headers;
use crate::error::ErrorBody;
use crate::protocol;

/// The parts of an error response.
pub(super) struct ErrorParts {
    status: StatusCode,
    headers: HeaderMap,
    code: String,
    message: String,
    details: Option<serde_json::Value>,
}

impl ErrorParts {
    pub async fn read(response: Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let body: Option<ErrorBody> = response.json().await.ok();
        let code = headers
            .get(protocol::ERROR_CODE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| body.as_ref().map(|b| b.code.clone()))
            .unwrap_or_default();
        let (message, details) = match body {
            Some(body) => (body.message, body.details),
            None => (String::new(), None),
        };
        ErrorParts {
            status,
            headers,
            code,
            message,
            details,
        }
    }

    /// The error of a request on `path` that sent `sent_bytes` of body.
    pub fn into_error(self, path: &StreamPath, sent_bytes: usize) -> StreamError {
        let mut form = serde_json::json!({ "code": self.code });
        if let Some(details) = &self.details {
            form["details"] = details.clone();
        }
        if let Ok(err) = serde_json::from_value::<StreamError>(form) {
            return err;
        }
        let path = path.to_string();
        let answered = || {
            let status = &self.status;
            match (self.code.as_str(), self.message.as_str()) {
                ("", _) => format!("the server answered {status}"),
                (code, "") => format!("the server answered {status} ({code})"),
                (code, message) => format!("the server answered {status} ({code}): {message}"),
            }
        };
        match self.code.as_str() {
            "stream/not-found" => StreamError::NotFound { path },
            "stream/gone" => StreamError::Gone { path },
            "stream/soft-deleted" | "stream/path-reserved" => StreamError::SoftDeleted { path },
            "auth/unauthorized" | "auth/forbidden" => StreamError::Unauthorized(answered()),
            "request/invalid" | "request/method-not-allowed" => {
                StreamError::InvalidArgument(answered())
            }
            "request/too-large" => StreamError::TooLarge {
                size: sent_bytes,
                limit: headers::number(&self.headers, protocol::LIMIT)
                    .ok()
                    .and_then(|limit| usize::try_from(limit).ok())
                    .unwrap_or(usize::MAX),
            },
            "storage-failure" | "live/too-many-readers" | "request/timeout" => {
                StreamError::unavailable(answered())
            }
            // Without a code the status is all there is (a proxy's answer).
            "" => match self.status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    StreamError::Unauthorized(answered())
                }
                StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT => StreamError::unavailable(answered()),
                _ => StreamError::internal(answered()),
            },
            _ => StreamError::internal(answered()),
        }
    }
}
