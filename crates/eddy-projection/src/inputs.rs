//! Reading a unit's input ranges from the store, with read-ahead.

use std::collections::VecDeque;

use bytes::Bytes;
use eddy_streams::{DroppedDeletes, Offset, ReadFrom, Storage, StreamError, StreamPath};

use crate::progress::UnitBounds;

/// Bytes asked for per read call.
const READ_BYTES: usize = 4 << 20;

/// Messages read from one input.
pub(crate) struct Raw {
    pub messages: Vec<Bytes>,
    /// Each message's offset (a compacted stream's have gaps).
    pub offsets: Vec<Offset>,
    /// The offset after the last message taken.
    pub to: Offset,
    /// The read reached the end of a closed stream.
    pub closed: bool,
    /// Where compaction had dropped deletes when the messages were read
    /// (by the last store read that gave some of them).
    pub dropped_deletes: Option<DroppedDeletes>,
}

/// Messages read past the end of the last unit, kept for the next one.
/// Streams are append-only, so what was read stays valid.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    /// The offset of the first buffered message.
    next: Offset,
    messages: VecDeque<Bytes>,
    /// Each buffered message's offset (a compacted stream's positions
    /// have holes), and where the read that filled the buffer ended.
    offsets: VecDeque<Offset>,
    end: Offset,
    /// The read that filled the buffer reached the end of a closed stream.
    closed_at_end: bool,
    /// Where compaction had dropped deletes when that read ran.
    dropped_deletes: Option<DroppedDeletes>,
}

/// Reads what one input contributes to a unit from `from`: at most
/// `bounds.items` messages and, beyond the first, at most `bounds.bytes`
/// bytes; using and refilling `ahead` when given.
pub(crate) async fn read_range(
    storage: &dyn Storage,
    path: &StreamPath,
    from: Offset,
    bounds: UnitBounds,
    mut ahead: Option<&mut ReadAhead>,
) -> Result<Raw, StreamError> {
    let mut taken = Taken::new(bounds);
    let mut next = from;
    let mut dropped_deletes;
    if let Some(buffer) = ahead.as_deref_mut() {
        if buffer.next == from && !buffer.messages.is_empty() {
            dropped_deletes = buffer.dropped_deletes;
            let take = taken.fitting(buffer.messages.iter());
            taken.extend(buffer.messages.drain(..take), buffer.offsets.drain(..take));
            buffer.next = buffer.offsets.front().copied().unwrap_or(buffer.end);
            next = buffer.next;
            let bounded = !buffer.messages.is_empty();
            if bounded || taken.full() || buffer.closed_at_end {
                let closed = buffer.closed_at_end && buffer.messages.is_empty();
                return Ok(Raw {
                    to: buffer.next,
                    messages: taken.messages,
                    offsets: taken.offsets,
                    closed,
                    dropped_deletes,
                });
            }
        } else {
            buffer.messages.clear();
            buffer.offsets.clear();
            buffer.closed_at_end = false;
        }
    }
    loop {
        let chunk = storage
            .read(path, ReadFrom::Offset(next), READ_BYTES)
            .await?;
        let got = chunk.messages.len();
        dropped_deletes = chunk.dropped_deletes;
        let room = taken.fitting(chunk.messages.iter());
        // The chunk's offsets carry the stream's own incarnation, also when
        // `from` was the zero offset or an offset of a fork's source.
        let to = chunk.offset_after(room);
        let offsets: Vec<Offset> = (0..got).map(|i| chunk.offset_of(i)).collect();
        let mut offsets = offsets.into_iter();
        let end = chunk.next_offset;
        let mut rest = chunk.messages.into_iter();
        taken.extend(rest.by_ref().take(room), offsets.by_ref().take(room));
        next = to;
        let reached_end = chunk.up_to_date && got <= room;
        if let Some(buffer) = ahead.as_deref_mut() {
            buffer.next = to;
            buffer.messages = rest.collect();
            buffer.offsets = offsets.collect();
            buffer.end = end;
            buffer.closed_at_end = chunk.up_to_date && chunk.closed;
            buffer.dropped_deletes = chunk.dropped_deletes;
        }
        if taken.full() || room < got || chunk.up_to_date || got == 0 {
            return Ok(Raw {
                messages: taken.messages,
                offsets: taken.offsets,
                to,
                closed: reached_end && chunk.closed,
                dropped_deletes,
            });
        }
    }
}

/// The messages taken so far for one unit, against its bounds.
struct Taken {
    bounds: UnitBounds,
    messages: Vec<Bytes>,
    offsets: Vec<Offset>,
    bytes: usize,
}

impl Taken {
    fn new(bounds: UnitBounds) -> Self {
        Taken {
            bounds,
            messages: Vec::new(),
            offsets: Vec::new(),
            bytes: 0,
        }
    }

    /// How many of `next` still fit: items up to the count, and bytes up
    /// to the byte bound, the first message of a unit always.
    fn fitting<'a>(&self, next: impl Iterator<Item = &'a Bytes>) -> usize {
        let (mut count, mut bytes) = (self.messages.len(), self.bytes);
        let mut fit = 0;
        for message in next {
            if count >= self.bounds.items {
                break;
            }
            bytes = bytes.saturating_add(message.len());
            if count > 0 && bytes > self.bounds.bytes {
                break;
            }
            count += 1;
            fit += 1;
        }
        fit
    }

    /// Takes `messages`, at `offsets` (one each).
    fn extend(
        &mut self,
        messages: impl Iterator<Item = Bytes>,
        offsets: impl Iterator<Item = Offset>,
    ) {
        // A plain `Vec::extend` moves the run at once; the bytes are
        // counted after it (a push per message cost a tenth of a fold).
        let before = self.messages.len();
        self.messages.extend(messages);
        let added: usize = self.messages[before..].iter().map(Bytes::len).sum();
        self.bytes = self.bytes.saturating_add(added);
        self.offsets.extend(offsets);
    }

    /// Whether the item bound is reached.
    fn full(&self) -> bool {
        self.messages.len() >= self.bounds.items
    }
}
