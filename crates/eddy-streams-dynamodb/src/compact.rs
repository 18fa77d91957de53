//! Compaction's reads and drops, within one transaction.
//!
//! The engine runs a compaction step (`Engine::compact_step`) in a unit:
//! it reads the stream's last kept messages before where its pass
//! stopped ([`read_before`]), decides which go, and drops them
//! ([`drop_positions`]). Messages are packed (`pack.rs`), so a drop
//! rewrites each pack it touches without the messages that go (listing
//! the positions it keeps) or deletes it when none stays, and deletes
//! the part items of a large message that goes. Every item a step may
//! write is one it read, so the read stops at the items and bytes the
//! unit's transaction still has room for (100 items, 4 MB, with what
//! the unit already writes): a step is always one transaction.
//!
//! **Forks.** A fork reads its inherited prefix from its source's items,
//! below its branch point, which its fork reference keeps (`e`). So a
//! stream with forks drops only at or after its forks' last branch point
//! (nothing when a reference does not say: one written before), and a
//! fork compacts only its own partition's messages, from its branch
//! point on: what it inherits stays as its source kept it.
//!
//! **Bytes.** The bytes dropped are added to the path item's `db`, as
//! retention's are: new packs count their `b` from the kept bytes plus
//! those, as before.

use std::sync::Arc;

use bytes::Bytes;
use eddy_dynamo::{item_size, AttributeValue, Item, Query, SortCondition};
use eddy_streams::StreamError;

use crate::commit::{estimated_bytes, item_count, MAX_BYTES, MAX_ITEMS};
use crate::errors::table_error;
use crate::keys;
use crate::pack::{self, Piece, ITEM_OVERHEAD};
use crate::query::all_items;
use crate::unit::{DynamoUnit, StreamKey};

/// The items a step writes besides the message items it drops: the
/// stream's retention entry moved (a delete and a put).
const REQUEUE_ITEMS: usize = 2;

/// Bytes kept free for the stream's path item written anew, which may
/// grow a little (its record).
const PATH_ITEM_MARGIN: usize = 8 * 1024;

/// The least room a step needs: the parts of the largest message (an
/// append is at most 3 MiB: 9 parts of 350 000 bytes) and a pack or two.
const MIN_ITEMS: usize = 16;

/// A message item a step read, for its drops.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    /// A pack, as read, with its messages.
    Pack {
        sort: String,
        item: Item,
        messages: Vec<(u64, Bytes)>,
    },
    /// A large message's part items.
    Parts {
        position: u64,
        size: u64,
        sorts: Vec<String>,
    },
}

/// The room left in the unit's transaction: items and bytes.
fn room(unit: &DynamoUnit) -> Result<(usize, usize), StreamError> {
    let items = MAX_ITEMS.saturating_sub(item_count(&unit.state) + REQUEUE_ITEMS + 1);
    let bytes = estimated_bytes(&unit.shared.keys, &unit.state)? + PATH_ITEM_MARGIN;
    Ok((items, MAX_BYTES.saturating_sub(bytes)))
}

/// Whether the unit has room for a step: items for a large message's
/// parts, and bytes for a pack rewritten.
pub(crate) fn has_room(unit: &DynamoUnit) -> Result<bool, StreamError> {
    let (items, bytes) = room(unit)?;
    Ok(items >= MIN_ITEMS && bytes >= unit.shared.pack_bytes + pack::PART_BYTES)
}

/// The last kept messages of stream `key` at positions `range`, at most
/// `max` and (beyond the last) `max_bytes` together, each with its
/// position, in order; fewer when the items that hold them would not
/// fit the unit's transaction. The items read are kept for
/// [`drop_positions`]. Two `Query`s: the pack across the range's end
/// (a step may stop inside a pack), and the items below, newest first.
pub(crate) async fn read_before(
    unit: &mut DynamoUnit,
    key: &StreamKey,
    range: std::ops::Range<u64>,
    max: u64,
    max_bytes: usize,
) -> Result<Vec<(u64, Bytes)>, StreamError> {
    // Not what its forks read of its items.
    let Some(forks_end) = forks_read_below(unit, key).await? else {
        return Ok(Vec::new());
    };
    // Its own partition only: a fork's inherited items are its source's.
    let own_start = unit.segments(key)?.last().map_or(0, |(_, start)| *start);
    let pending = unit
        .state
        .data
        .get(key.id())
        .and_then(|data| data.packs.first())
        .map_or(u64::MAX, |pack| pack.first);
    let start = range.start.max(own_start).max(forks_end);
    let end = range.end.min(pending);
    if start >= end {
        return Ok(Vec::new());
    }
    let (items_room, bytes_room) = room(unit)?;
    let mut read = Reading {
        start,
        end,
        max,
        max_bytes,
        items_room,
        bytes_room,
        held: Vec::new(),
        taken: Vec::new(),
        taken_bytes: 0,
        parts: Vec::new(),
        stopped: false,
    };
    let data = unit.shared.keys.data(key.id());
    let across = Query::partition(data.clone())
        .sort(SortCondition::Between(
            AttributeValue::S(keys::pack(end + 1)),
            AttributeValue::S(keys::AFTER_MESSAGES.into()),
        ))
        .limit(1);
    let page = unit
        .shared
        .table
        .query(across)
        .await
        .map_err(|e| table_error("reading messages to compact", e))?;
    for item in page.items {
        read.add(&unit.shared.keys, item)?;
    }
    // A part there is a later message's (parts never straddle).
    read.parts.clear();
    let mut below = Query::partition(data)
        .sort(SortCondition::Between(
            AttributeValue::S(keys::pack(start + 1)),
            AttributeValue::S(format!("{}|~", keys::pack(end))),
        ))
        .backward()
        .limit(items_room.clamp(1, MAX_ITEMS));
    while !read.stopped {
        let page = unit
            .shared
            .table
            .query(below.clone())
            .await
            .map_err(|e| table_error("reading messages to compact", e))?;
        for item in page.items {
            if read.stopped {
                break;
            }
            read.add(&unit.shared.keys, item)?;
        }
        match page.last_evaluated_key {
            Some(last) => below = below.start_after(Some(last)),
            None => break,
        }
    }
    let Reading {
        held, mut taken, ..
    } = read;
    unit.state
        .compacting
        .entry(Arc::from(key.id()))
        .or_default()
        .extend(held);
    taken.reverse();
    Ok(taken)
}

/// The position below which the forks of stream `key` read its items
/// (the largest branch point of its fork references, `e`; 0 without
/// forks), or `None` when a fork's is not known (a reference written
/// before they kept it, or a fork listed in the path item itself): the
/// stream then drops nothing. One `Query` of the references when the
/// stream has some.
async fn forks_read_below(unit: &DynamoUnit, key: &StreamKey) -> Result<Option<u64>, StreamError> {
    let stream = unit.stream(key)?;
    if !stream.legacy_forks.is_empty() {
        return Ok(None);
    }
    let id: Arc<str> = Arc::from(key.id());
    let mut end = 0;
    let written = unit
        .state
        .fork_refs
        .range((Arc::clone(&id), String::new())..);
    for (reference, live) in written.take_while(|((source, _), _)| *source == id) {
        if *live {
            match unit.state.fork_ends.get(reference) {
                Some(at) => end = end.max(*at),
                None => return Ok(None),
            }
        }
    }
    if stream.forks == 0 {
        return Ok(Some(end));
    }
    let query = Query::partition(unit.shared.keys.forks(key.id()));
    for item in all_items(&*unit.shared.table, query, "reading forks").await? {
        match item.get("e") {
            Some(AttributeValue::N(at)) => match at.parse::<u64>() {
                Ok(at) => end = end.max(at),
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        }
    }
    Ok(Some(end))
}

/// A backwards read in progress.
struct Reading {
    start: u64,
    end: u64,
    max: u64,
    max_bytes: usize,
    items_room: usize,
    bytes_room: usize,
    held: Vec<Held>,
    /// The messages taken, newest first.
    taken: Vec<(u64, Bytes)>,
    taken_bytes: usize,
    /// The parts of a large message read so far (newest part first).
    parts: Vec<(String, Bytes)>,
    stopped: bool,
}

impl Reading {
    /// Whether one more message of `len` bytes may be taken.
    fn wants(&mut self, len: usize) -> bool {
        let full = self.taken.len() as u64 >= self.max
            || (!self.taken.is_empty() && self.taken_bytes + len > self.max_bytes);
        if full {
            self.stopped = true;
        }
        !full
    }

    fn take(&mut self, position: u64, message: Bytes) {
        self.taken_bytes += message.len();
        self.taken.push((position, message));
    }

    /// Takes what it wants of a message item, newest first, while the
    /// room and the budgets allow.
    fn add(&mut self, keys: &keys::Keys, item: Item) -> Result<(), StreamError> {
        let Some(sort) = keys.sort_of(&item).map(str::to_owned) else {
            return Ok(());
        };
        let size = item_size(&item);
        match pack::piece(item.clone())? {
            Piece::Pack { messages, .. } => {
                let range = self.start..self.end;
                let inside = |p: &u64| range.contains(p);
                if !messages.iter().any(|(p, _)| inside(p)) {
                    return Ok(());
                }
                if self.items_room == 0 || self.bytes_room < size {
                    self.stopped = true;
                    return Ok(());
                }
                let mut took = false;
                for (position, message) in messages.iter().rev().filter(|(p, _)| inside(p)) {
                    if !self.wants(message.len()) {
                        break;
                    }
                    self.take(*position, message.clone());
                    took = true;
                }
                if took {
                    self.items_room -= 1;
                    self.bytes_room -= size;
                    // No room for another: no page more to read.
                    self.stopped |= self.items_room == 0;
                    self.held.push(Held::Pack {
                        sort,
                        item,
                        messages,
                    });
                }
            }
            Piece::Part {
                position,
                part,
                parts,
                data,
            } => {
                // Newest part first: the last part starts a message.
                if part + 1 == parts {
                    self.parts.clear();
                }
                self.parts.push((sort, data));
                if part != 0 || self.parts.len() as u64 != parts {
                    return Ok(());
                }
                let read: Vec<(String, Bytes)> = self.parts.drain(..).rev().collect();
                if !(self.start..self.end).contains(&position) {
                    return Ok(());
                }
                let needed = read.len();
                let bytes = needed * ITEM_OVERHEAD;
                if self.items_room < needed || self.bytes_room < bytes {
                    self.stopped = true;
                    return Ok(());
                }
                let message: Vec<u8> = read.iter().flat_map(|(_, d)| d.iter().copied()).collect();
                if !self.wants(message.len()) {
                    return Ok(());
                }
                self.items_room -= needed;
                self.bytes_room -= bytes;
                self.stopped |= self.items_room == 0;
                self.held.push(Held::Parts {
                    position,
                    size: message.len() as u64,
                    sorts: read.into_iter().map(|(sort, _)| sort).collect(),
                });
                self.take(position, Bytes::from(message));
            }
        }
        Ok(())
    }
}

/// Drops the messages at `positions` of stream `key`, which
/// [`read_before`] read in this unit: rewrites the packs that keep some
/// of their messages, deletes the items that keep none; the bytes freed,
/// which the path item's `db` counts too.
pub(crate) fn drop_positions(
    unit: &mut DynamoUnit,
    key: &StreamKey,
    positions: &[u64],
) -> Result<u64, StreamError> {
    let not_read = || StreamError::internal("messages compacted that were not read first");
    let held = unit.state.compacting.get(key.id()).ok_or_else(not_read)?;
    let going = |p: &u64| positions.binary_search(p).is_ok();
    let (mut freed, mut found) = (0, 0);
    let mut deletes = Vec::new();
    let mut rewrites = Vec::new();
    for held in held {
        match held {
            Held::Pack {
                sort,
                item,
                messages,
            } => {
                let dropped: u64 = messages
                    .iter()
                    .filter(|(p, _)| going(p))
                    .map(|(_, m)| m.len() as u64)
                    .sum();
                let count = messages.iter().filter(|(p, _)| going(p)).count();
                if count == 0 {
                    continue;
                }
                freed += dropped;
                found += count;
                let kept: Vec<(u64, Bytes)> = messages
                    .iter()
                    .filter(|(p, _)| !going(p))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    deletes.push(sort.clone());
                } else {
                    rewrites.push((sort.clone(), pack::rewritten(item, &kept)));
                }
            }
            Held::Parts {
                position,
                size,
                sorts,
            } => {
                if going(position) {
                    freed += size;
                    found += 1;
                    deletes.extend(sorts.iter().cloned());
                }
            }
        }
    }
    if found != positions.len() {
        return Err(not_read());
    }
    unit.stream_mut(key)?.dropped_bytes += freed;
    let data = unit.state.data.entry(Arc::from(key.id())).or_default();
    for sort in deletes {
        data.rewrites.remove(&sort);
        data.dropped_messages.insert(sort);
    }
    for (sort, item) in rewrites {
        data.rewrites.insert(sort, item);
    }
    // What is written now is what a later step of the unit reads.
    unit.state.compacting.remove(key.id());
    Ok(freed)
}
