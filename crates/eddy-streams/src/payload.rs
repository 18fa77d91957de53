//! Turning what a caller appends into stored messages.

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::StreamError;

/// The default limit on the bytes of one append: 8 MiB.
pub const DEFAULT_MAX_APPEND_BYTES: usize = 8 * 1024 * 1024;

/// The data of one append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A body interpreted by the stream's content type: on a JSON stream a
    /// top-level array appends each element as its own message (one level of
    /// flattening) and any other value appends one message; on other streams
    /// the body is one message.
    Body(Bytes),
    /// Messages already split by the caller; on a JSON stream each one must
    /// be a JSON value (arrays are kept whole).
    Messages(Vec<Bytes>),
}

impl Payload {
    /// No data (a close-only append, or a create without initial data).
    pub fn empty() -> Self {
        Payload::Messages(Vec::new())
    }

    /// The number of bytes the caller sent.
    pub fn len(&self) -> usize {
        match self {
            Payload::Body(body) => body.len(),
            Payload::Messages(messages) => messages.iter().map(Bytes::len).sum(),
        }
    }

    /// Whether there is no data at all.
    pub fn is_empty(&self) -> bool {
        match self {
            Payload::Body(body) => body.is_empty(),
            Payload::Messages(messages) => messages.is_empty(),
        }
    }
}

impl From<Bytes> for Payload {
    fn from(body: Bytes) -> Self {
        Payload::Body(body)
    }
}

impl From<Vec<Bytes>> for Payload {
    fn from(messages: Vec<Bytes>) -> Self {
        Payload::Messages(messages)
    }
}

/// A payload split and validated ahead, off the thread that commits, for
/// a stream assumed to be JSON or not.
#[derive(Clone, Debug)]
pub(crate) struct Split {
    /// Whether it was split as JSON.
    pub json: bool,
    /// The messages.
    pub messages: Vec<Bytes>,
}

impl Split {
    /// Splits `payload` for an append to a stream that is JSON or not;
    /// `None` when it is refused (the commit then splits it again and
    /// reports why, in case the assumption was wrong).
    pub fn ahead(payload: &Payload, json: bool, max_bytes: usize) -> Option<Split> {
        let messages = split(payload.clone(), json, max_bytes, false).ok()?;
        Some(Split { json, messages })
    }
}

/// Splits and validates a payload for a stream. An empty result means the
/// payload carried no data; `[]` on a JSON stream is an error unless
/// `allow_empty_array` (a create may start a JSON stream empty with `[]`).
pub(crate) fn split(
    payload: Payload,
    json: bool,
    max_bytes: usize,
    allow_empty_array: bool,
) -> Result<Vec<Bytes>, StreamError> {
    let size = payload.len();
    if size > max_bytes {
        return Err(StreamError::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    match (payload, json) {
        (Payload::Body(body), _) if body.is_empty() => Ok(Vec::new()),
        (Payload::Body(body), false) => Ok(vec![body]),
        (Payload::Body(body), true) => split_json_body(body, allow_empty_array),
        (Payload::Messages(messages), false) => Ok(messages),
        (Payload::Messages(messages), true) => {
            for message in &messages {
                validate_json(message)?;
            }
            Ok(messages)
        }
    }
}

fn split_json_body(body: Bytes, allow_empty_array: bool) -> Result<Vec<Bytes>, StreamError> {
    let is_array = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if !is_array {
        validate_json(&body)?;
        return Ok(vec![trim(&body)]);
    }
    let elements: Vec<&RawValue> = serde_json::from_slice(&body).map_err(invalid_json)?;
    if elements.is_empty() && !allow_empty_array {
        return Err(StreamError::EmptyJsonArray);
    }
    Ok(elements
        .into_iter()
        .map(|raw| body.slice_ref(raw.get().as_bytes()))
        .collect())
}

fn trim(body: &Bytes) -> Bytes {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    let end = body
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |end| end + 1);
    body.slice(start..end)
}

fn validate_json(message: &[u8]) -> Result<(), StreamError> {
    serde_json::from_slice::<IgnoredAny>(message)
        .map(drop)
        .map_err(invalid_json)
}

fn invalid_json(err: serde_json::Error) -> StreamError {
    StreamError::InvalidJson(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Result<Vec<String>, StreamError> {
        split(
            Payload::Body(Bytes::from(s.to_owned())),
            true,
            1 << 20,
            false,
        )
        .map(|m| {
            m.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        })
    }

    #[test]
    fn flattens_one_level() {
        assert_eq!(body("[1, 2]").ok(), Some(vec!["1".into(), "2".into()]));
        assert_eq!(
            body("[[1,2],[3,4]]").ok(),
            Some(vec!["[1,2]".into(), "[3,4]".into()])
        );
        assert_eq!(body("[[[1,2,3]]]").ok(), Some(vec!["[[1,2,3]]".into()]));
        assert_eq!(body(" {\"a\":1} ").ok(), Some(vec!["{\"a\":1}".into()]));
    }

    #[test]
    fn rejects_empty_array_and_bad_json() {
        assert_eq!(body("[]").err(), Some(StreamError::EmptyJsonArray));
        assert_eq!(body("{").err().map(|e| e.code()), Some("json/invalid"));
        assert_eq!(body("[1,").err().map(|e| e.code()), Some("json/invalid"));
    }

    #[test]
    fn enforces_the_size_limit() {
        let err = split(Payload::Body(Bytes::from_static(b"12345")), false, 4, false).err();
        assert_eq!(err, Some(StreamError::TooLarge { size: 5, limit: 4 }));
    }
}
