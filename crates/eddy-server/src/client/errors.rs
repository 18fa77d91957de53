//! Turning error responses back into [`StreamError`]s.
//!
//! The server names every error with a stable code (`eddy-error`) and the
//! protocol headers carry the numbers (final offset, expected sequence,
//! current epoch); what only the request knew (the producer id, the offset
//! sent) comes from the [`Context`].

use eddy_streams::{Append, Offset, StreamError, StreamPath};
use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};

use super::headers;
use crate::error::ErrorBody;
use crate::protocol;

/// What the request sent, to rebuild errors that mention it.
#[derive(Clone, Debug, Default)]
pub(super) struct Context {
    pub offset: Option<Offset>,
    pub content_type: Option<String>,
    pub producer: Option<(String, u64, u64)>,
    pub stream_seq: Option<String>,
    pub size: usize,
}

impl Context {
    pub fn of_append(append: &Append) -> Self {
        Context {
            offset: append.expected_tail,
            content_type: append.content_type.clone(),
            producer: append
                .producer
                .as_ref()
                .map(|p| (p.id.clone(), p.epoch, p.seq)),
            stream_seq: append.stream_seq.clone(),
            size: append.payload.len(),
        }
    }
}

/// The parts of an error response.
pub(super) struct ErrorParts {
    status: StatusCode,
    headers: HeaderMap,
    code: String,
    message: String,
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
        ErrorParts {
            status,
            headers,
            code,
            message: body.map(|b| b.message).unwrap_or_default(),
        }
    }

    pub fn into_error(self, path: &StreamPath, ctx: &Context) -> StreamError {
        let path_string = || path.to_string();
        let offset = |name| headers::offset(&self.headers, name).unwrap_or_default();
        let number = |name| headers::number(&self.headers, name).unwrap_or_default();
        let (producer, epoch, seq) = ctx.producer.clone().unwrap_or_default();
        match self.code.as_str() {
            "stream/not-found" => StreamError::NotFound {
                path: path_string(),
            },
            "stream/gone" => StreamError::Gone {
                path: path_string(),
            },
            "stream/soft-deleted" | "stream/path-reserved" => StreamError::SoftDeleted {
                path: path_string(),
            },
            "stream/config-conflict" => StreamError::ConfigConflict {
                path: path_string(),
                detail: self.message,
            },
            "stream/closed" => StreamError::Closed {
                path: path_string(),
                final_offset: offset(protocol::NEXT_OFFSET),
            },
            "append/offset-mismatch" => StreamError::OffsetMismatch {
                expected: ctx.offset.unwrap_or_default(),
                actual: offset(protocol::NEXT_OFFSET),
            },
            "append/stream-seq-conflict" => StreamError::StreamSeqConflict {
                last: String::new(),
                received: ctx.stream_seq.clone().unwrap_or_default(),
            },
            "append/content-type-mismatch" => StreamError::ContentTypeMismatch {
                expected: String::new(),
                received: ctx.content_type.clone().unwrap_or_default(),
            },
            "offset/invalid" => StreamError::InvalidOffset(self.message),
            "offset/beyond-tail" => StreamError::OffsetBeyondTail {
                offset: ctx.offset.unwrap_or_default(),
                tail: offset(protocol::NEXT_OFFSET),
            },
            "path/invalid" => StreamError::InvalidPath {
                path: path_string(),
                reason: "the server refused the path",
            },
            "json/invalid" => StreamError::InvalidJson(self.message),
            "json/empty-array" => StreamError::EmptyJsonArray,
            "append/empty" => StreamError::EmptyAppend,
            "append/too-large" | "request/too-large" => StreamError::TooLarge {
                size: ctx.size,
                limit: usize::try_from(number(protocol::LIMIT)).unwrap_or(usize::MAX),
            },
            "producer/seq-gap" => StreamError::ProducerSeqGap {
                producer,
                expected: number(protocol::PRODUCER_EXPECTED_SEQ),
                received: number(protocol::PRODUCER_RECEIVED_SEQ),
            },
            "producer/fenced" => StreamError::ProducerFenced {
                producer,
                current: number(protocol::PRODUCER_EPOCH),
                received: epoch,
            },
            "producer/epoch-start" => StreamError::ProducerEpochStart {
                producer,
                epoch,
                seq,
            },
            "invalid-argument" | "request/invalid" => StreamError::InvalidArgument(self.message),
            _ => StreamError::Storage(format!(
                "the server answered {} {}: {}",
                self.status, self.code, self.message
            )),
        }
    }
}
