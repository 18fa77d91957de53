//! Turning error responses back into [`StreamError`]s.
//!
//! Eddy's server puts a store error's fields in its error body (the
//! `details` of [`StreamError`]'s serde form), so the client rebuilds the
//! very error the store raised. Responses without such a body (`HEAD`, the
//! server's own refusals, a proxy in between) are mapped from the stable
//! code in `eddy-error`, the headers that go with it and the status: every
//! code the server sends keeps its kind and retryability. An unknown code
//! is an internal error, never retried.

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
        self.mapped(path.to_string(), sent_bytes)
    }

    /// The error rebuilt from the `eddy-error` code and the headers that
    /// go with it, for an answer without a usable body.
    ///
    /// Every code the server sends keeps its kind (and so its
    /// retryability). A code's own variant is rebuilt when the headers give
    /// its numbers and offsets; its text fields, which only the body
    /// carries, get the answer's text or stay empty (an id). A variant
    /// whose numbers or offsets the headers do not give becomes the text
    /// variant of its kind ([`StreamError::ConfigConflict`],
    /// [`StreamError::InvalidArgument`]) rather than one with invented
    /// numbers.
    fn mapped(&self, path: String, sent_bytes: usize) -> StreamError {
        let answered = || {
            let status = &self.status;
            match (self.code.as_str(), self.message.as_str()) {
                ("", _) => format!("the server answered {status}"),
                (code, "") => format!("the server answered {status} ({code})"),
                (code, message) => format!("the server answered {status} ({code}): {message}"),
            }
        };
        let conflict = |path: String| StreamError::ConfigConflict {
            path,
            detail: answered(),
        };
        let invalid = || StreamError::InvalidArgument(answered());
        let offset = |name| headers::offset(&self.headers, name).ok();
        let number = |name| headers::number(&self.headers, name).ok();
        // A limit the server did not state is no limit the caller can meet.
        let limit = || {
            number(protocol::LIMIT)
                .and_then(|limit| usize::try_from(limit).ok())
                .unwrap_or(usize::MAX)
        };
        match self.code.as_str() {
            "stream/not-found" => StreamError::NotFound { path },
            "stream/gone" => StreamError::Gone { path },
            "stream/soft-deleted" | "stream/path-reserved" => StreamError::SoftDeleted { path },
            "stream/config-conflict" => conflict(path),
            "stream/closed" => match offset(protocol::NEXT_OFFSET) {
                Some(final_offset) => StreamError::Closed { path, final_offset },
                None => conflict(path),
            },
            // The tail the caller expected, the `Stream-Seq` values and the
            // content types travel only in the body.
            "append/offset-mismatch"
            | "append/stream-seq-conflict"
            | "append/content-type-mismatch" => conflict(path),
            "producer/seq-gap" => match (
                number(protocol::PRODUCER_EXPECTED_SEQ),
                number(protocol::PRODUCER_RECEIVED_SEQ),
            ) {
                (Some(expected), Some(received)) => StreamError::ProducerSeqGap {
                    producer: String::new(),
                    expected,
                    received,
                },
                _ => conflict(path),
            },
            // The only variant of its kind: the epoch sent is the caller's
            // own and not echoed, so 0 stands for it (below any epoch that
            // fences, as the one sent was).
            "producer/fenced" => StreamError::ProducerFenced {
                producer: String::new(),
                current: number(protocol::PRODUCER_EPOCH).unwrap_or(0),
                received: 0,
            },
            // The offset asked for, the producer's epoch and seq, and the
            // offset text travel only in the body.
            "offset/beyond-tail" | "producer/epoch-start" => invalid(),
            "offset/invalid" => StreamError::InvalidOffset(String::new()),
            // The offset asked for is the caller's own; it and the
            // stream's incarnation travel only in the body (0 without one).
            "offset/stale" => StreamError::StaleOffset {
                path,
                offset: eddy_streams::Offset::ZERO,
                incarnation: 0,
            },
            // The offset asked for is the caller's own.
            "offset/dropped" => match offset(protocol::EARLIEST_OFFSET) {
                Some(earliest) => StreamError::OffsetDropped {
                    path,
                    offset: eddy_streams::Offset::ZERO,
                    earliest,
                },
                None => StreamError::StaleOffset {
                    path,
                    offset: eddy_streams::Offset::ZERO,
                    incarnation: 0,
                },
            },
            "retention/invalid" => StreamError::InvalidRetention(answered()),
            "compaction/invalid" => StreamError::InvalidCompaction(answered()),
            "path/invalid" => StreamError::InvalidPath {
                path,
                reason: answered(),
            },
            "json/invalid" => StreamError::InvalidJson(answered()),
            "json/empty-array" => StreamError::EmptyJsonArray,
            "append/empty" => StreamError::EmptyAppend,
            "append/too-large" | "request/too-large" => StreamError::TooLarge {
                size: sent_bytes,
                limit: limit(),
            },
            // The producer refused is the caller's own; its id travels only
            // in the body.
            "limit/producers" => StreamError::TooManyProducers {
                path,
                producer: String::new(),
                limit: limit(),
            },
            "limit/streams" => StreamError::TooManyStreams { limit: limit() },
            "append/too-many-messages" => StreamError::TooManyMessages { limit: limit() },
            // The fork's source and what it would copy travel only in the body.
            "fork/too-large" => StreamError::ForkTooLarge {
                source_path: String::new(),
                bytes: 0,
                limit: number(protocol::LIMIT).unwrap_or(u64::MAX),
            },
            "invalid-argument" | "request/invalid" | "request/method-not-allowed" => invalid(),
            "route/invalid" => StreamError::Route {
                route: String::new(),
                reason: answered(),
            },
            "item/invalid" => StreamError::InvalidItem {
                stream: String::new(),
                reason: answered(),
            },
            "state/invalid" => StreamError::InvalidState(answered()),
            // The offset travels only in the body.
            "state/undecodable" => StreamError::UndecodableState {
                path,
                offset: eddy_streams::Offset::ZERO,
                reason: answered(),
            },
            "auth/unauthorized" | "auth/forbidden" => StreamError::Unauthorized(answered()),
            // The server's own waits (too many live readers, a slow body)
            // end; so may a backend failure.
            "storage-failure"
            | "live/too-many-readers"
            | "request/timeout"
            | "request/connection-closed" => StreamError::unavailable(answered()),
            "storage/internal" => StreamError::internal(answered()),
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

#[cfg(test)]
#[path = "../../../eddy-streams/tests/errors/samples.rs"]
mod samples;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use axum::http::Method;
    use axum::response::IntoResponse;
    use eddy_streams::{ErrorKind, StreamError, StreamPath};

    use super::{samples, ErrorParts};
    use crate::error::ApiError;

    /// The kind a caller of the remote client must see for each error the
    /// server answers with. The match has no wildcard, so a new `ApiError`
    /// variant does not compile until it is given a kind here, and a
    /// sample in [`every_answer`] (counted by [`API_ERROR_VARIANTS`]).
    fn kind_of(err: &ApiError) -> ErrorKind {
        match err {
            ApiError::Stream(err) => err.kind(),
            // A create on a path that a soft-deleted stream holds.
            ApiError::PathReserved(_) => ErrorKind::Gone,
            ApiError::BadRequest(_) | ApiError::MethodNotAllowed(_) => ErrorKind::Invalid,
            ApiError::BodyTooLarge { .. } => ErrorKind::TooLarge,
            // The client was slow; sending again may succeed.
            ApiError::BodyTimeout => ErrorKind::Unavailable,
            ApiError::Unauthorized | ApiError::Forbidden(_) => ErrorKind::Unauthorized,
            // The server says to retry later (`Retry-After`).
            ApiError::TooManyLiveReaders { .. } => ErrorKind::Unavailable,
            // Fails until streams are deleted or `max_streams` raised.
            ApiError::TooManyStreams { .. } => ErrorKind::LimitReached,
            // Nobody read it; a client that reads may send again.
            ApiError::ConnectionClosed => ErrorKind::Unavailable,
        }
    }

    /// How many variants [`kind_of`] matches.
    const API_ERROR_VARIANTS: usize = 11;

    /// One answer of each kind the server sends: every store error, and
    /// each of the server's own refusals.
    fn every_answer() -> Vec<ApiError> {
        let mut answers: Vec<ApiError> = samples::one_of_each()
            .into_iter()
            .map(ApiError::Stream)
            .collect();
        answers.extend([
            ApiError::PathReserved("a/b".into()),
            ApiError::bad_request("a bad header"),
            ApiError::BodyTooLarge { limit: 4 },
            ApiError::BodyTimeout,
            ApiError::Unauthorized,
            ApiError::Forbidden("the reserved prefix".into()),
            ApiError::TooManyLiveReaders { limit: 3 },
            ApiError::TooManyStreams { limit: 2 },
            ApiError::MethodNotAllowed(Method::PATCH),
            ApiError::ConnectionClosed,
        ]);
        answers
    }

    /// The error the client rebuilds from `err`'s answer with its body
    /// taken away (a `HEAD`, or a proxy that drops error bodies).
    async fn bodiless(err: ApiError) -> StreamError {
        let (parts, _body) = err.into_response().into_parts();
        let answer = reqwest::Response::from(axum::http::Response::from_parts(parts, Vec::new()));
        let path = StreamPath::new("a/b").expect("path");
        ErrorParts::read(answer).await.into_error(&path, 10)
    }

    /// Regression: without a body, `limit/producers`, `limit/streams` and
    /// most other codes became internal errors, because the client mapped
    /// only a few codes from the `eddy-error` header. Every code the server
    /// sends keeps its kind and retryability without a body.
    #[tokio::test]
    async fn every_code_keeps_its_kind_without_a_body() {
        let answers = every_answer();
        let variants: HashSet<_> = answers.iter().map(std::mem::discriminant).collect();
        assert_eq!(
            variants.len(),
            API_ERROR_VARIANTS,
            "a sample of each ApiError"
        );
        let stream_codes: HashSet<&str> = answers
            .iter()
            .filter_map(|answer| match answer {
                ApiError::Stream(err) => Some(err.code()),
                _ => None,
            })
            .collect();
        assert_eq!(
            stream_codes,
            samples::every_code()
                .iter()
                .copied()
                .collect::<HashSet<_>>(),
            "a sample of each StreamError"
        );
        for answer in answers {
            let code = answer.code();
            let kind = kind_of(&answer);
            let rebuilt = bodiless(answer).await;
            assert_eq!(
                (rebuilt.kind(), rebuilt.is_retryable()),
                (kind, kind.is_retryable()),
                "{code}: {rebuilt:?}"
            );
        }
    }

    /// The limit codes carry the limit of the `eddy-limit` header.
    #[tokio::test]
    async fn limit_codes_keep_the_limit_without_a_body() {
        let producers = StreamError::TooManyProducers {
            path: "a/b".into(),
            producer: "w".into(),
            limit: 8,
        };
        match bodiless(ApiError::Stream(producers)).await {
            StreamError::TooManyProducers { path, limit, .. } => {
                assert_eq!((path.as_str(), limit), ("a/b", 8));
            }
            other => panic!("{other:?}"),
        }
        let streams = bodiless(ApiError::TooManyStreams { limit: 2 }).await;
        assert_eq!(streams, StreamError::TooManyStreams { limit: 2 });
    }
}
