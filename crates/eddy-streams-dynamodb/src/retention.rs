//! Retention: which streams owe drops, found in bounded reads, and the
//! drops themselves, pack by pack.
//!
//! **The queue.** The partition `ds|r` has an entry per stream whose
//! policy will let messages go, keyed by when (the record's
//! `retention_due_ms`: at once, 0, for a stream over its message or byte
//! bound; for an age bound, when its oldest kept message comes of age),
//! naming the stream's id and holding its path. The path item keeps the
//! entry's time (`rq`), and every transaction that writes the path item
//! moves the entry with it, so an entry is where its record says, or
//! earlier:
//!
//! - a write by a caller (an append, a create, a fork, a restore) moves
//!   the entry only *earlier* (or puts one): an append to a stream whose
//!   due time only moves later (an age bound's first mark, dated again
//!   within its cell) writes no entry;
//! - a visit of the sweep sets it exactly where the record says, or
//!   deletes it when nothing will be due until the stream is written
//!   again.
//!
//! A stream without a policy, or with one but nothing to drop yet, has no
//! entry: a stream over a message bound gets one with the append that
//! passes the bound, and loses it with the drop that brings it back.
//!
//! **A visit** ([`due`]) reads at most [`MAX_VISITS`] entries due by now
//! (one `Query`) and their path items (one `BatchGetItem`). An entry
//! whose stream is gone, created again, retired or expired is deleted in
//! the step's transaction. A live stream is handed to the engine in the
//! step's unit (its path item loaded, so the commit is conditioned on
//! it), which drops what its policy lets go; the drop's write of the
//! path item moves the entry to where the record then says. A stream the
//! engine drops nothing of (the step ran out of room) keeps its entry,
//! due, for the next step.
//!
//! **Drops.** Messages are stored packed (`pack.rs`), so a drop ends
//! where the engine says but deletes only the items wholly below it; an
//! item partly below stays until a later drop passes its end (reads
//! never reach below the first kept position: the engine refuses an
//! offset there with `offset/dropped`). [`weigh`] reads the stream's
//! items from the start of its data partition (one `Query` of at most as
//! many items as the step's transaction still has room for), so the
//! engine drops no more than those items hold and every item a drop
//! passes is deleted in the same transaction. While the stream has forks
//! it deletes none of its items (a fork reads its inherited prefix from
//! its source's items, whatever the source keeps); a later drop, once
//! the forks are gone, deletes them from the start. A fork's own drops
//! delete only its own partition's items.
//!
//! **Bytes.** Packs record the stream's bytes before them (`b`), which a
//! fork's inherited size is read from. Counting dropped messages too
//! keeps that count the same along a fork's chain of streams: the path
//! item keeps the bytes dropped (`db`), new packs count from the kept
//! bytes plus those, and a fork inherits the bytes between its source's
//! first kept position and its branch point.

use std::ops::Range;
use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Item, Query, SortCondition};
use eddy_streams::backend::RecordReader;
use eddy_streams::StreamError;

use crate::commit::{item_count, MAX_ITEMS};
use crate::errors::table_error;
use crate::keys::{self, RETAINED};
use crate::pack;
use crate::path_item::PathState;
use crate::sweep::{path_items, queued};
use crate::unit::{DynamoUnit, Entry, State, StreamKey};

/// The most streams one step visits: each is its path item and up to two
/// queue entries in the step's transaction, besides the items it drops.
pub(crate) const MAX_VISITS: usize = 8;

/// The items a weighed stream's drop adds besides its deletes: its
/// queue entry moved (a delete and a put).
const REQUEUE_ITEMS: usize = 2;

/// What [`weigh`] read of a stream, for its drop.
#[derive(Clone, Debug, Default)]
pub(crate) struct Weighed {
    /// The first position weighed.
    first: u64,
    /// The messages kept from `first` on, as positions and sizes.
    sizes: Vec<(u64, u64)>,
    /// The stream's own message items read, by sort key, with the
    /// position after each one's last message; empty while the stream
    /// has forks (nothing of it is deleted then).
    items: Vec<(String, u64)>,
}

impl Weighed {
    /// The position after the last message weighed (`first` when none
    /// was).
    fn end(&self) -> u64 {
        self.sizes
            .last()
            .map_or(self.first, |(position, _)| position + 1)
    }
}

/// When `record` is next due, as a queue time.
fn due_time(record: &eddy_streams::backend::StreamRecord) -> Option<u64> {
    record
        .retention_due_ms()
        .map(|ms| u64::try_from(ms).unwrap_or(0))
}

/// Moves the queue entry of the stream at `path` after its record
/// changed in the unit: exactly where the record says on a visit, only
/// earlier otherwise (see the module's note).
pub(crate) fn requeue(state: &mut State, path: &str) {
    let exact = state.retention_visits.contains(path);
    let Some(entry) = state.paths.get_mut(path) else {
        return;
    };
    let PathState::Stream(stream) = &mut entry.state else {
        return;
    };
    let due = due_time(&stream.record);
    let target = match (exact, stream.queued, due) {
        (false, Some(queued), Some(due)) => Some(queued.min(due)),
        (false, Some(queued), None) => Some(queued),
        (_, _, due) => due,
    };
    if target == stream.queued {
        return;
    }
    entry.dirty = true;
    if let Some(old) = stream.queued {
        let old = (RETAINED, keys::sweep_sort(old, &stream.id));
        state.sweep_entries.insert(old, None);
    }
    if let Some(at) = target {
        let new = (RETAINED, keys::sweep_sort(at, &stream.id));
        state.sweep_entries.insert(new, Some(path.to_owned()));
    }
    stream.queued = target;
}

/// The paths of up to `max` (at most [`MAX_VISITS`]) live streams whose
/// entries are due by `now_ms`, taken into the unit as visits; stale
/// entries are deleted in the unit's transaction.
pub(crate) async fn due(
    unit: &mut DynamoUnit,
    now_ms: i64,
    max: usize,
) -> Result<Vec<String>, StreamError> {
    let now = u64::try_from(now_ms).unwrap_or(0);
    let queued = queued(
        unit,
        RETAINED,
        now.saturating_add(1),
        max.clamp(1, MAX_VISITS),
    )
    .await?;
    if queued.is_empty() {
        return Ok(Vec::new());
    }
    let mut paths: Vec<String> = queued.iter().map(|q| q.path.clone()).collect();
    paths.sort_unstable();
    paths.dedup();
    let loaded = path_items(unit, &paths).await?;
    let mut visits = Vec::new();
    for entry in queued {
        let live = |found: &&Entry| match &found.state {
            PathState::Stream(stream) => {
                let record = &stream.record;
                let expired = record.expires_at_ms().is_some_and(|at| at <= now_ms);
                *stream.id == *entry.id && !record.soft_deleted() && !expired
            }
            PathState::Absent | PathState::Tombstone(_) => false,
        };
        let Some(found) = loaded.get(&entry.path).filter(live) else {
            unit.state
                .sweep_entries
                .insert((RETAINED, entry.sort), None);
            continue;
        };
        let state = &mut unit.state;
        let taken = state
            .paths
            .entry(entry.path.clone())
            .or_insert_with(|| found.clone());
        match &mut taken.state {
            // The entry visited is the one a write of the path item moves.
            PathState::Stream(stream) if *stream.id == *entry.id => {
                stream.queued = Some(entry.at);
            }
            _ => continue,
        }
        state.retention_visits.insert(entry.path.clone());
        requeue(state, &entry.path);
        if !visits.contains(&entry.path) {
            visits.push(entry.path);
        }
    }
    Ok(visits)
}

/// The sizes of the messages at `range` of stream `key`, as far as the
/// unit's transaction has room to delete the stream's items that hold
/// them (see the module's note): one `Query` per segment read, and one
/// of its forks when it has some. Items of its own wholly below its first
/// kept position (left while it had forks) are deleted at once.
pub(crate) async fn weigh(
    unit: &mut DynamoUnit,
    key: &StreamKey,
    range: Range<u64>,
) -> Result<Vec<(u64, u64)>, StreamError> {
    let count = unit.stream(key)?.record.count();
    let range = range.start..range.end.min(count);
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let forked = !unit.forks_of(key.path()).await?.is_empty();
    // A compacted stream's packs have holes: it weighs the messages kept.
    let holes = unit.stream(key)?.record.has_holes();
    let room = MAX_ITEMS.saturating_sub(item_count(&unit.state) + REQUEUE_ITEMS);
    let mut weighed = Weighed {
        first: range.start,
        ..Weighed::default()
    };
    for (segment, _) in unit.segments(key)? {
        let next = weighed.end();
        let end = segment.end.min(range.end);
        if next >= range.end {
            break;
        }
        if next >= end {
            continue;
        }
        let own = *segment.id == *key.id() && !forked;
        let (from, limit) = if own {
            // From the start: what a drop passes is among what it read.
            ("m|".to_owned(), room)
        } else {
            (keys::pack(next + 1), MAX_ITEMS)
        };
        if limit == 0 {
            break;
        }
        let query = Query::partition(unit.shared.keys.data(&segment.id))
            .sort(SortCondition::Between(
                AttributeValue::S(from),
                AttributeValue::S(keys::AFTER_MESSAGES.into()),
            ))
            .limit(limit);
        let page = unit
            .shared
            .table
            .query(query)
            .await
            .map_err(|e| table_error("weighing messages to drop", e))?;
        let mut reached = next;
        for item in &page.items {
            let Some(sort) = unit.shared.keys.sort_of(item) else {
                continue;
            };
            let sizes = message_sizes(item)?;
            if own {
                weighed.items.push((sort.to_owned(), sizes.end));
            }
            for (position, size) in sizes.whole() {
                if position < reached || position >= end {
                    continue;
                }
                if position > reached && !holes {
                    return Err(pack::gap());
                }
                weighed.sizes.push((position, size));
                reached = position + 1;
            }
            if reached >= end {
                break;
            }
        }
        if reached < end {
            // The page ended first: what was weighed is a prefix.
            break;
        }
    }
    let below_first: Vec<String> = weighed
        .items
        .iter()
        .filter(|(_, end)| *end <= range.start)
        .map(|(sort, _)| sort.clone())
        .collect();
    if !below_first.is_empty() {
        let data = unit.state.data.entry(Arc::from(key.id())).or_default();
        data.dropped_messages.extend(below_first);
    }
    let sizes = weighed.sizes.clone();
    unit.state.weighed.insert(Arc::from(key.id()), weighed);
    Ok(sizes)
}

/// Drops the messages at `range` of stream `key`, which [`weigh`] read:
/// deletes its items wholly below `range.end`, and counts the bytes
/// dropped in its path item.
pub(crate) fn drop_messages(
    unit: &mut DynamoUnit,
    key: &StreamKey,
    range: Range<u64>,
) -> Result<(), StreamError> {
    let not_weighed = || StreamError::internal("messages dropped that were not weighed first");
    let weighed = unit.state.weighed.get(key.id()).ok_or_else(not_weighed)?;
    if range.start < weighed.first || range.end > weighed.end() {
        return Err(not_weighed());
    }
    let bytes: u64 = weighed
        .sizes
        .iter()
        .filter(|(position, _)| range.contains(position))
        .map(|(_, size)| size)
        .sum();
    let deletes: Vec<String> = weighed
        .items
        .iter()
        .filter(|(_, end)| *end <= range.end)
        .map(|(sort, _)| sort.clone())
        .collect();
    unit.stream_mut(key)?.dropped_bytes += bytes;
    let data = unit.state.data.entry(Arc::from(key.id())).or_default();
    data.dropped_messages.extend(deletes);
    Ok(())
}

/// The messages a message item holds, by size.
struct ItemSizes {
    /// The position after its last message kept.
    end: u64,
    /// Each message it ends, with its position and size: none for a part
    /// that is not its message's last (the message counts once, with its
    /// last part).
    sizes: Vec<(u64, u64)>,
}

impl ItemSizes {
    /// Each whole message it ends, with its position.
    fn whole(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.sizes.iter().copied()
    }
}

/// The sizes of the messages of a pack or part item.
fn message_sizes(item: &Item) -> Result<ItemSizes, StreamError> {
    let corrupt = || StreamError::internal("a message item of the streams table is unreadable");
    let number = |name: &str| match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse::<u64>().map_err(|_| corrupt()),
        _ => Err(corrupt()),
    };
    let first = number("f")?;
    if let Some(AttributeValue::L(list)) = item.get("m") {
        let positions = pack::positions(item, first, list.len())?;
        let sizes: Vec<(u64, u64)> = positions
            .into_iter()
            .zip(list)
            .map(|(position, m)| match m {
                AttributeValue::B(b) => (position, b.len() as u64),
                _ => (position, 0),
            })
            .collect();
        // After its last kept message (a compacted pack's holes
        // included: a drop past it leaves the item nothing).
        let end = sizes.last().map_or(first, |(position, _)| position + 1);
        return Ok(ItemSizes { end, sizes });
    }
    let last_part = number("k")? + 1 == number("n")?;
    let sizes = if last_part {
        vec![(first, number("z")?)]
    } else {
        Vec::new()
    };
    Ok(ItemSizes {
        end: first + 1,
        sizes,
    })
}
