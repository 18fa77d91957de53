//! Reading a unit's input ranges from the store, with read-ahead.

use std::collections::VecDeque;

use bytes::Bytes;
use eddy_streams::{Offset, ReadFrom, Storage, StreamError, StreamPath};

/// Bytes asked for per read call.
const READ_BYTES: usize = 4 << 20;

/// Messages read from one input.
pub(crate) struct Raw {
    pub messages: Vec<Bytes>,
    /// The offset after the last message taken.
    pub to: Offset,
    /// The read reached the end of a closed stream.
    pub closed: bool,
}

/// Messages read past the end of the last unit, kept for the next one.
/// Streams are append-only, so what was read stays valid.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    /// The offset of the first buffered message.
    next: Offset,
    messages: VecDeque<Bytes>,
    /// The read that filled the buffer reached the end of a closed stream.
    closed_at_end: bool,
}

/// Reads at most `max` messages of `path` from `from`, using and refilling
/// `ahead` when given.
pub(crate) async fn read_range(
    storage: &dyn Storage,
    path: &StreamPath,
    from: Offset,
    max: usize,
    mut ahead: Option<&mut ReadAhead>,
) -> Result<Raw, StreamError> {
    let mut messages = Vec::new();
    if let Some(buffer) = ahead.as_deref_mut() {
        if buffer.next == from && !buffer.messages.is_empty() {
            let take = buffer.messages.len().min(max);
            messages.extend(buffer.messages.drain(..take));
            buffer.next = Offset::at(from.position() + take as u64);
            if messages.len() >= max || buffer.closed_at_end && buffer.messages.is_empty() {
                let closed = buffer.closed_at_end && buffer.messages.is_empty();
                return Ok(Raw {
                    to: buffer.next,
                    messages,
                    closed,
                });
            }
        } else {
            buffer.messages.clear();
            buffer.closed_at_end = false;
        }
    }
    loop {
        let next = Offset::at(from.position() + messages.len() as u64);
        let chunk = storage
            .read(path, ReadFrom::Offset(next), READ_BYTES)
            .await?;
        let room = max.saturating_sub(messages.len());
        let got = chunk.messages.len();
        let mut rest = chunk.messages.into_iter();
        messages.extend(rest.by_ref().take(room));
        let to = Offset::at(from.position() + messages.len() as u64);
        let reached_end = chunk.up_to_date && got <= room;
        if let Some(buffer) = ahead.as_deref_mut() {
            buffer.next = to;
            buffer.messages = rest.collect();
            buffer.closed_at_end = chunk.up_to_date && chunk.closed;
        }
        if messages.len() >= max || chunk.up_to_date || got == 0 {
            return Ok(Raw {
                messages,
                to,
                closed: reached_end && chunk.closed,
            });
        }
    }
}
