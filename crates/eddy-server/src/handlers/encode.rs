//! Turning stored messages into response bodies and SSE frames.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use eddy_streams::is_json;

/// How a stream's data travels in SSE data events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SseEncoding {
    /// A JSON array per event.
    Json,
    /// The text as is, one `data:` line per line.
    Text,
    /// Base64 of the bytes (any other content type).
    Base64,
}

impl SseEncoding {
    pub(crate) fn for_content_type(content_type: &str) -> Self {
        let media = eddy_streams::media_type(content_type);
        if is_json(content_type) {
            SseEncoding::Json
        } else if media.starts_with("text/") {
            SseEncoding::Text
        } else {
            SseEncoding::Base64
        }
    }
}

/// The body of a read: a JSON array on JSON streams, the concatenated bytes
/// otherwise.
pub(crate) fn body(content_type: &str, messages: &[Bytes]) -> Bytes {
    if is_json(content_type) {
        json_array(messages)
    } else if messages.len() == 1 {
        messages[0].clone()
    } else {
        let mut out = BytesMut::with_capacity(messages.iter().map(Bytes::len).sum());
        for message in messages {
            out.put_slice(message);
        }
        out.freeze()
    }
}

/// Messages framed as a 4-byte big-endian length and the bytes each (the
/// `eddy-framing: messages` extension).
pub(crate) fn framed(messages: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(messages.iter().map(|m| m.len() + 4).sum());
    for message in messages {
        out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
        out.put_slice(message);
    }
    out.freeze()
}

/// [`framed`] messages, each frame after its message's position (8 bytes,
/// big-endian): the `eddy-positions: true` extension.
pub(crate) fn framed_at(chunk: &eddy_streams::ReadChunk) -> Bytes {
    let messages = &chunk.messages;
    let mut out = BytesMut::with_capacity(messages.iter().map(|m| m.len() + 12).sum());
    for (index, message) in messages.iter().enumerate() {
        out.put_u64(chunk.offset_of(index).position());
        out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
        out.put_slice(message);
    }
    out.freeze()
}

fn json_array(messages: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + messages.iter().map(|m| m.len() + 1).sum::<usize>());
    out.put_u8(b'[');
    for (i, message) in messages.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(message);
    }
    out.put_u8(b']');
    out.freeze()
}

/// An SSE `data` event carrying `messages`.
pub(crate) fn data_event(encoding: SseEncoding, messages: &[Bytes]) -> Bytes {
    let payload = match encoding {
        SseEncoding::Json => json_array(messages),
        SseEncoding::Text => body("text/plain", messages),
        SseEncoding::Base64 => Bytes::from(
            base64::engine::general_purpose::STANDARD
                .encode(body("application/octet-stream", messages)),
        ),
    };
    event("data", &payload)
}

/// An SSE event: every line of `payload` becomes its own `data:` line, so
/// no CR or LF inside the payload can end the event early.
pub(crate) fn event(name: &str, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 32);
    out.put_slice(b"event: ");
    out.put_slice(name.as_bytes());
    out.put_u8(b'\n');
    let mut rest = payload;
    loop {
        let end = rest.iter().position(|b| *b == b'\n' || *b == b'\r');
        let (line, next) = match end {
            Some(i) => {
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                (&rest[..i], Some(&rest[i + skip..]))
            }
            None => (rest, None),
        };
        out.put_slice(b"data:");
        out.put_slice(line);
        out.put_u8(b'\n');
        match next {
            Some(next) => rest = next,
            None => break,
        }
    }
    out.put_u8(b'\n');
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_never_end_an_event() {
        let frame = event("data", b"a\r\nb\rc\nd");
        assert_eq!(
            &frame[..],
            b"event: data\ndata:a\ndata:b\ndata:c\ndata:d\n\n"
        );
    }

    #[test]
    fn json_bodies_are_arrays() {
        assert_eq!(&body("application/json", &[])[..], b"[]");
        let messages = [Bytes::from("1"), Bytes::from("{\"a\":2}")];
        assert_eq!(
            &body("application/json; charset=utf-8", &messages)[..],
            b"[1,{\"a\":2}]"
        );
        assert_eq!(&body("text/plain", &messages)[..], b"1{\"a\":2}");
    }
}
