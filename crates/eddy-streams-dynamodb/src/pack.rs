//! Messages packed into items.
//!
//! A commit's new messages of one stream go into as few items as they
//! fit: a *pack* holds consecutive messages up to `pack_bytes` together
//! (attributes `f` the first position, `b` the stream's bytes before it,
//! `m` the messages as a list of binaries). A message larger than that
//! gets a pack of its own, and one larger than an item can hold is cut
//! into *parts* (`f`, `b`, `z` the message's size, `k` the part, `n` the
//! parts, `d` the bytes). Items are written once and never rewritten: a
//! later append starts a new pack rather than grow the last one, since
//! DynamoDB bills a rewrite for the whole item (see DESIGN.md).

use bytes::Bytes;
use eddy_dynamo::{AttributeValue, Item};
use eddy_streams::StreamError;

use crate::keys::{self, Keys};

/// The most bytes of one message in one part item: an item holds
/// 400 KB, keys and attribute names included.
pub(crate) const PART_BYTES: usize = 350_000;

/// What an item holds beyond its messages' bytes, at most (keys,
/// attribute names, numbers).
pub(crate) const ITEM_OVERHEAD: usize = 200;

/// What DynamoDB counts for each element of a list, besides its bytes.
const ELEMENT_OVERHEAD: usize = 3;

/// Messages of one stream at positions `first..`, to be written as one
/// item (or as parts, when it is one large message).
#[derive(Clone, Debug)]
pub(crate) struct Pack {
    pub first: u64,
    /// The stream's bytes before `first`.
    pub before: u64,
    pub messages: Vec<Bytes>,
    pub bytes: usize,
}

impl Pack {
    /// The position after the last message.
    pub fn end(&self) -> u64 {
        self.first + self.messages.len() as u64
    }

    /// About how large its items are, in bytes.
    pub fn size(&self) -> usize {
        let items = self.bytes.div_ceil(PART_BYTES).max(1);
        self.bytes + ELEMENT_OVERHEAD * self.messages.len() + ITEM_OVERHEAD * items
    }

    /// How many items it is written as.
    pub fn items(&self) -> usize {
        match self.messages.as_slice() {
            [one] => one.len().div_ceil(PART_BYTES).max(1),
            _ => 1,
        }
    }
}

/// Adds `messages` at positions `first..` (the stream holding `before`
/// bytes before them) to the packs of one stream's commit.
pub(crate) fn push(
    packs: &mut Vec<Pack>,
    pack_bytes: usize,
    first: u64,
    before: u64,
    messages: Vec<Bytes>,
) {
    let (mut position, mut before) = (first, before);
    for message in messages {
        let len = message.len();
        let joins = packs.last().is_some_and(|last| {
            last.end() == position && last.bytes + len <= pack_bytes && !last.messages.is_empty()
        });
        if !joins {
            packs.push(Pack {
                first: position,
                before,
                messages: Vec::new(),
                bytes: 0,
            });
        }
        if let Some(last) = packs.last_mut() {
            last.messages.push(message);
            last.bytes += len;
        }
        position += 1;
        before += len as u64;
    }
}

/// The items of `pack` in the data partition of stream `id`.
pub(crate) fn items(keys: &Keys, id: &str, pack: &Pack) -> Vec<Item> {
    let number = |n: u64| AttributeValue::N(n.to_string());
    match pack.messages.as_slice() {
        [large] if large.len() > PART_BYTES => {
            let parts = large.len().div_ceil(PART_BYTES);
            large
                .chunks(PART_BYTES)
                .enumerate()
                .map(|(k, chunk)| {
                    let mut item = keys.data_item(id, keys::part(pack.end(), k));
                    item.insert("f".into(), number(pack.first));
                    item.insert("b".into(), number(pack.before));
                    item.insert("z".into(), number(large.len() as u64));
                    item.insert("k".into(), number(k as u64));
                    item.insert("n".into(), number(parts as u64));
                    item.insert("d".into(), AttributeValue::B(chunk.to_vec()));
                    item
                })
                .collect()
        }
        messages => {
            let mut item = keys.data_item(id, keys::pack(pack.end()));
            item.insert("f".into(), number(pack.first));
            item.insert("b".into(), number(pack.before));
            let list = messages
                .iter()
                .map(|m| AttributeValue::B(m.to_vec()))
                .collect();
            item.insert("m".into(), AttributeValue::L(list));
            vec![item]
        }
    }
}

fn corrupt(what: &str) -> StreamError {
    StreamError::internal(format!("a message item of the streams table has {what}"))
}

fn number(item: &Item, name: &str) -> Result<u64, StreamError> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().map_err(|_| corrupt("a bad number")),
        _ => Err(corrupt(&format!("no number `{name}`"))),
    }
}

/// The positions of the `len` messages of a pack item that starts at
/// `first`: those its `p` lists (a compacted pack), or `first..`.
pub(crate) fn positions(item: &Item, first: u64, len: usize) -> Result<Vec<u64>, StreamError> {
    let Some(listed) = item.get("p") else {
        return Ok((first..).take(len).collect());
    };
    let AttributeValue::L(listed) = listed else {
        return Err(corrupt("kept positions that are not a list"));
    };
    let mut positions = Vec::with_capacity(listed.len());
    for position in listed {
        let position = match position {
            AttributeValue::N(n) => n.parse().map_err(|_| corrupt("a bad kept position"))?,
            _ => return Err(corrupt("a kept position that is not a number")),
        };
        if position < first || positions.last().is_some_and(|last| *last >= position) {
            return Err(corrupt("kept positions out of order"));
        }
        positions.push(position);
    }
    if positions.len() != len {
        return Err(corrupt("kept positions that do not match its messages"));
    }
    Ok(positions)
}

/// `item`, a pack, rewritten to hold only `kept` (position, message),
/// which are some of its messages: its key, `f` and `b` stay.
pub(crate) fn rewritten(item: &Item, kept: &[(u64, Bytes)]) -> Item {
    let mut item = item.clone();
    let messages = kept.iter().map(|(_, m)| AttributeValue::B(m.to_vec()));
    let positions = kept.iter().map(|(p, _)| AttributeValue::N(p.to_string()));
    item.insert("m".into(), AttributeValue::L(messages.collect()));
    item.insert("p".into(), AttributeValue::L(positions.collect()));
    item
}

/// One message item as read.
pub(crate) enum Piece {
    /// Messages with their positions, from `first` on (all of
    /// `first..` but on a compacted pack).
    Pack {
        first: u64,
        messages: Vec<(u64, Bytes)>,
    },
    /// Part `part` of `parts` of the message at `position`.
    Part {
        position: u64,
        part: u64,
        parts: u64,
        data: Bytes,
    },
}

/// Reads a message item.
pub(crate) fn piece(item: Item) -> Result<Piece, StreamError> {
    let first = number(&item, "f")?;
    if let Some(AttributeValue::L(list)) = item.get("m") {
        let messages: Vec<Bytes> = list
            .iter()
            .map(|m| match m {
                AttributeValue::B(b) => Ok(Bytes::copy_from_slice(b)),
                _ => Err(corrupt("a message that is not binary")),
            })
            .collect::<Result<_, _>>()?;
        let positions = positions(&item, first, messages.len())?;
        let messages = positions.into_iter().zip(messages).collect();
        return Ok(Piece::Pack { first, messages });
    }
    let data = match item.get("d") {
        Some(AttributeValue::B(b)) => Bytes::copy_from_slice(b),
        _ => return Err(corrupt("neither messages nor a part")),
    };
    Ok(Piece::Part {
        position: first,
        part: number(&item, "k")?,
        parts: number(&item, "n")?,
        data,
    })
}

/// The stream's bytes before position `position`, from the message item
/// that holds position `position - 1`.
pub(crate) fn bytes_before(item: &Item, position: u64) -> Result<u64, StreamError> {
    let before = number(item, "b")?;
    let first = number(item, "f")?;
    match item.get("m") {
        Some(AttributeValue::L(list)) => {
            let positions = positions(item, first, list.len())?;
            let sizes = positions.iter().zip(list).map(|(at, m)| match m {
                AttributeValue::B(b) if *at < position => b.len() as u64,
                _ => 0,
            });
            Ok(before + sizes.sum::<u64>())
        }
        _ => Ok(before + number(item, "z")?),
    }
}

/// Collects messages from pieces in position order, within a range and a
/// byte budget.
pub(crate) struct Collect {
    /// The next position wanted.
    pub next: u64,
    /// The position to stop before.
    pub end: u64,
    max_bytes: usize,
    taken: usize,
    /// The budget stopped the read.
    full: bool,
    /// Whether positions may be missing (a compacted stream's holes).
    holes: bool,
    /// Positions were missing that no pack said it dropped: between
    /// items, or at the end (a compacted stream's packs that went whole,
    /// or a stream removed while it was read).
    pub skipped: bool,
    pub messages: Vec<(u64, Bytes)>,
    /// The parts of a large message read so far.
    partial: Vec<Bytes>,
}

impl Collect {
    /// Collects positions `start..end`, stopping before the total passes
    /// `max_bytes` (but taking at least one message). With `holes`,
    /// positions may be missing (a compacted stream).
    pub fn new(start: u64, end: u64, max_bytes: usize, holes: bool) -> Self {
        Collect {
            next: start,
            end,
            max_bytes,
            taken: 0,
            full: false,
            holes,
            skipped: false,
            messages: Vec::new(),
            partial: Vec::new(),
        }
    }

    /// Whether nothing more is wanted.
    pub fn done(&self) -> bool {
        self.full || self.next >= self.end
    }

    /// Takes the message at `position` (at or after `self.next`), if the
    /// budget allows. Returns whether it did.
    fn take(&mut self, position: u64, message: Bytes) -> bool {
        if !self.messages.is_empty() && self.taken + message.len() > self.max_bytes {
            self.full = true;
            return false;
        }
        self.taken += message.len();
        self.messages.push((position, message));
        self.next = position + 1;
        true
    }

    /// Notes that positions from `self.next` up to `to` are missing: an
    /// error but on a stream with holes.
    fn skip_to(&mut self, to: u64) -> Result<(), StreamError> {
        if to <= self.next {
            return Ok(());
        }
        if !self.holes {
            return Err(gap());
        }
        self.skipped = true;
        self.next = to.min(self.end);
        Ok(())
    }

    /// Ends the read at `self.end` when the items ran out first: an
    /// error but on a stream with holes.
    pub fn finish(&mut self) -> Result<(), StreamError> {
        if self.done() {
            return Ok(());
        }
        self.skip_to(self.end)
    }

    /// Takes what it wants of `piece`. A gap before the next wanted
    /// position is an error but on a stream with holes.
    pub fn add(&mut self, piece: Piece) -> Result<(), StreamError> {
        match piece {
            Piece::Pack { first, messages } => {
                self.skip_to(first)?;
                for (position, message) in messages {
                    if self.done() || position >= self.end {
                        break;
                    }
                    if position < self.next {
                        continue;
                    }
                    if position > self.next && !self.holes {
                        return Err(gap());
                    }
                    if !self.take(position, message) {
                        break;
                    }
                }
            }
            Piece::Part {
                position,
                part,
                parts,
                data,
            } => {
                if self.done() || position < self.next || position >= self.end {
                    return Ok(());
                }
                if position > self.next {
                    self.partial.clear();
                    self.skip_to(position)?;
                }
                if part != self.partial.len() as u64 {
                    return Err(gap());
                }
                self.partial.push(data);
                if part + 1 == parts {
                    let whole: Vec<u8> = self.partial.drain(..).flatten().collect();
                    self.take(position, Bytes::from(whole));
                }
            }
        }
        Ok(())
    }
}

/// The error of a read that found messages missing.
pub(crate) fn gap() -> StreamError {
    StreamError::unavailable(
        "the stream's messages changed while they were read (it was deleted meanwhile?); read again",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys {
            pk: "pk".into(),
            sk: "sk".into(),
        }
    }

    fn message(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn one_commit_fills_packs_in_order_and_a_large_message_is_cut_into_parts() {
        let mut packs = Vec::new();
        push(
            &mut packs,
            100,
            5,
            40,
            vec![message(60), message(30), message(20)],
        );
        push(
            &mut packs,
            100,
            8,
            150,
            vec![message(PART_BYTES * 2 + 1), message(1)],
        );
        let shape: Vec<(u64, u64, usize)> = packs
            .iter()
            .map(|p| (p.first, p.before, p.messages.len()))
            .collect();
        assert_eq!(
            shape,
            [
                (5, 40, 2),
                (7, 130, 1),
                (8, 150, 1),
                (9, 150 + 2 * PART_BYTES as u64 + 1, 1)
            ]
        );
        let parts = items(&keys(), "s", &packs[2]);
        assert_eq!(parts.len(), 3);
        let mut collect = Collect::new(8, 10, usize::MAX, false);
        for item in parts.into_iter().chain(items(&keys(), "s", &packs[3])) {
            collect.add(piece(item).expect("piece")).expect("in order");
        }
        assert_eq!(collect.messages.len(), 2);
        assert_eq!(collect.messages[0].1.len(), PART_BYTES * 2 + 1);
        assert_eq!(
            bytes_before(&items(&keys(), "s", &packs[0])[0], 6).expect("bytes"),
            100
        );
    }

    #[test]
    fn a_read_stops_at_its_budget_but_takes_one_message() {
        let mut packs = Vec::new();
        push(
            &mut packs,
            1000,
            0,
            0,
            vec![message(10), message(10), message(10)],
        );
        let mut collect = Collect::new(1, 3, 5, false);
        collect
            .add(piece(items(&keys(), "s", &packs[0]).remove(0)).expect("piece"))
            .expect("add");
        assert_eq!(
            collect.messages.len(),
            1,
            "one message even over the budget"
        );
        assert!(collect.done());
        let mut gap_read = Collect::new(0, 3, 100, false);
        let later = Pack {
            first: 2,
            before: 20,
            messages: vec![message(1)],
            bytes: 1,
        };
        assert!(gap_read
            .add(piece(items(&keys(), "s", &later).remove(0)).expect("piece"))
            .is_err());
    }

    #[test]
    fn a_rewritten_pack_lists_what_it_keeps_and_reads_skip_its_holes() {
        let mut packs = Vec::new();
        let messages = (0..5).map(|n| message(n + 1)).collect();
        push(&mut packs, 1000, 10, 0, messages);
        let item = items(&keys(), "s", &packs[0]).remove(0);
        let Piece::Pack { messages, .. } = piece(item.clone()).expect("piece") else {
            panic!("a pack");
        };
        let kept: Vec<(u64, Bytes)> = messages
            .into_iter()
            .filter(|(p, _)| [11, 14].contains(p))
            .collect();
        let rewritten = rewritten(&item, &kept);
        assert_eq!(
            rewritten.get("f"),
            item.get("f"),
            "its first position stays"
        );
        assert_eq!(bytes_before(&rewritten, 14).expect("bytes"), 2);
        let mut strict = Collect::new(10, 15, usize::MAX, false);
        assert!(strict
            .add(piece(rewritten.clone()).expect("piece"))
            .is_err());
        let mut read = Collect::new(12, 15, usize::MAX, true);
        read.add(piece(rewritten).expect("piece")).expect("holes");
        read.finish().expect("done");
        assert_eq!(read.messages, [(14, message(5))]);
        assert!(!read.skipped, "holes inside a pack are its own");
        let mut past = Collect::new(15, 20, usize::MAX, true);
        past.finish().expect("holes at the end");
        assert!(past.skipped, "positions no item holds");
    }
}
