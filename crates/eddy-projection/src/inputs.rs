//! Reading a unit's input ranges from the store.

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

/// Reads at most `max` messages of `path` from `from`.
pub(crate) async fn read_range(
    storage: &dyn Storage,
    path: &StreamPath,
    from: Offset,
    max: usize,
) -> Result<Raw, StreamError> {
    let mut messages = Vec::new();
    loop {
        let next = Offset::at(from.position() + messages.len() as u64);
        let chunk = storage
            .read(path, ReadFrom::Offset(next), READ_BYTES)
            .await?;
        let room = max.saturating_sub(messages.len());
        let took_all = chunk.messages.len() <= room;
        let got = chunk.messages.len();
        messages.extend(chunk.messages.into_iter().take(room));
        let to = Offset::at(from.position() + messages.len() as u64);
        if !took_all || messages.len() >= max {
            let closed = took_all && chunk.up_to_date && chunk.closed;
            return Ok(Raw {
                messages,
                to,
                closed,
            });
        }
        if chunk.up_to_date || got == 0 {
            return Ok(Raw {
                messages,
                to,
                closed: chunk.closed && chunk.up_to_date,
            });
        }
    }
}
