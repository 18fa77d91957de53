//! Turning what a caller appends into stored messages.

use std::cell::Cell;

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
    pub fn ahead(payload: &Payload, json: bool, bounds: Bounds) -> Option<Split> {
        let messages = split(payload.clone(), json, bounds, false).ok()?;
        Some(Split { json, messages })
    }
}

/// The bounds of one append's payload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The most bytes.
    pub max_bytes: usize,
    /// The most messages.
    pub max_messages: usize,
}

/// Splits and validates a payload for a stream. An empty result means the
/// payload carried no data; `[]` on a JSON stream is an error unless
/// `allow_empty_array` (a create may start a JSON stream empty with `[]`).
pub(crate) fn split(
    payload: Payload,
    json: bool,
    bounds: Bounds,
    allow_empty_array: bool,
) -> Result<Vec<Bytes>, StreamError> {
    let size = payload.len();
    if size > bounds.max_bytes {
        return Err(StreamError::TooLarge {
            size,
            limit: bounds.max_bytes,
        });
    }
    let too_many = StreamError::TooManyMessages {
        limit: bounds.max_messages,
    };
    match (payload, json) {
        (Payload::Body(body), _) if body.is_empty() => Ok(Vec::new()),
        (Payload::Body(body), false) => Ok(vec![body]),
        (Payload::Body(body), true) => {
            split_json_body(body, bounds.max_messages, allow_empty_array)
        }
        (Payload::Messages(messages), _) if messages.len() > bounds.max_messages => Err(too_many),
        (Payload::Messages(messages), false) => Ok(messages),
        (Payload::Messages(messages), true) => {
            for message in &messages {
                validate_json(message)?;
            }
            Ok(messages)
        }
    }
}

fn split_json_body(
    body: Bytes,
    max_messages: usize,
    allow_empty_array: bool,
) -> Result<Vec<Bytes>, StreamError> {
    let is_array = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    if !is_array {
        validate_json(&body)?;
        return Ok(vec![trim(&body)]);
    }
    let over = Cell::new(false);
    let mut reader = serde_json::Deserializer::from_str(utf8(&body)?);
    let elements = serde::Deserializer::deserialize_seq(
        &mut reader,
        Elements {
            max: max_messages,
            over: &over,
        },
    )
    .map_err(|e| match over.get() {
        true => StreamError::TooManyMessages {
            limit: max_messages,
        },
        false => invalid_json(e),
    })?;
    reader.end().map_err(invalid_json)?;
    if elements.is_empty() && !allow_empty_array {
        return Err(StreamError::EmptyJsonArray);
    }
    Ok(elements
        .into_iter()
        .map(|raw| body.slice_ref(raw.get().as_bytes()))
        .collect())
}

/// Reads the elements of a JSON array, unparsed, refusing one of more
/// than `max` elements as soon as it meets the next (and setting `over`):
/// an 8 MiB array of millions of tiny values costs no more than the bound.
struct Elements<'a> {
    max: usize,
    over: &'a Cell<bool>,
}

impl<'de> serde::de::Visitor<'de> for Elements<'_> {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element::<&'de RawValue>()? {
            if elements.len() == self.max {
                self.over.set(true);
                return Err(serde::de::Error::custom("too many array elements"));
            }
            elements.push(element);
        }
        Ok(elements)
    }
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
    serde_json::from_str::<IgnoredAny>(utf8(message)?)
        .map(drop)
        .map_err(invalid_json)
}

/// JSON text as UTF-8. (serde_json checks the strings it decodes, not
/// those it skips, as it skips every string of a value only validated.)
fn utf8(json: &[u8]) -> Result<&str, StreamError> {
    std::str::from_utf8(json).map_err(|e| StreamError::InvalidJson(format!("not UTF-8: {e}")))
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
            BOUNDS,
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

    /// JSON is UTF-8 (RFC 8259): a byte that is not, inside a string the
    /// parser skips over, would make every later read of the stream fail
    /// to parse. Found by the `json_bodies` fuzz target.
    #[test]
    fn refuses_json_that_is_not_utf8() {
        let invalid = |bytes: &'static [u8]| {
            let body = split(
                Payload::Body(Bytes::from_static(bytes)),
                true,
                BOUNDS,
                false,
            );
            let messages = split(
                Payload::Messages(vec![Bytes::from_static(bytes)]),
                true,
                BOUNDS,
                false,
            );
            [body, messages].map(|r| r.err().map(|e| e.code()))
        };
        let refused = [Some("json/invalid"); 2];
        assert_eq!(invalid(b"\"\xff\""), refused);
        assert_eq!(invalid(b"[\"a\", \"\xc3\"]"), refused);
        assert_eq!(invalid(b"{\"\xed\xa0\x80\": 1}"), refused, "a surrogate");
        assert_eq!(
            body("[\"\u{e9}\", \"\\ud83d\\ude00\"]").map(|m| m.len()),
            Ok(2)
        );
    }

    const BOUNDS: Bounds = Bounds {
        max_bytes: 1 << 20,
        max_messages: 3,
    };

    #[test]
    fn enforces_the_size_limit() {
        let bounds = Bounds {
            max_bytes: 4,
            ..BOUNDS
        };
        let err = split(
            Payload::Body(Bytes::from_static(b"12345")),
            false,
            bounds,
            false,
        )
        .err();
        assert_eq!(err, Some(StreamError::TooLarge { size: 5, limit: 4 }));
    }

    #[test]
    fn enforces_the_message_limit() {
        assert_eq!(body("[1,2,3]").map(|m| m.len()), Ok(3));
        let too_many = Some(StreamError::TooManyMessages { limit: 3 });
        assert_eq!(body("[1,2,3,4]").err(), too_many);
        assert_eq!(body("[1,2,3,4,").err(), too_many, "refused before the end");
        assert_eq!(body("[[1,2,3,4]]").map(|m| m.len()), Ok(1));
        let messages = Payload::Messages(vec![Bytes::from_static(b"1"); 4]);
        assert_eq!(split(messages, false, BOUNDS, false).err(), too_many);
    }
}
