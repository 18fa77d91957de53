//! The sweep's walk over the stream directory: what no queue finds.
//!
//! The sweep's queues (`sweep.rs`) find expired streams and tombstones
//! by time, but producer states live in their streams' data partitions,
//! which no index orders by age. So each sweep step also looks at the
//! next streams of the directory (`ds|l`, ordered by path), from where
//! the step before stopped, and wraps to the first path at the end: a
//! lap over every stream, a page per step. One item, `ds|w`, says where
//! the walk is: the last path it looked at in full, and, when it stopped
//! inside a stream with many producers, that stream's id and the last
//! producer it looked at.
//!
//! A step of the walk, in two phases of the sweep's unit:
//!
//! 1. Before the engine's sweep (`look`): one `GetItem` of the walk's
//!    item, one `Query` of at most [`PAGE`] directory entries and one
//!    `BatchGetItem` of their path items. A retired stream with no forks
//!    left is handed to the engine to remove with the queues' finds: a
//!    removal committed in steps whose process died between them leaves
//!    such streams, which no queue names.
//! 2. After it (`drop_expired`): for each stream of the page in turn, as
//!    far as the unit's transaction has room, at most [`MAX_DROPS`]
//!    drops and [`PRODUCER_READS`] producer items read
//!    ([`PRODUCER_QUERIES`] `Query`s): its producer items are read from
//!    the first (a stream whose count says it has none costs no read) and
//!    the expired ones deleted in the unit's transaction; the stream's
//!    path item is put with its producer count lowered, conditioned on its
//!    write token as the walk read it. A commit that writes a stream's
//!    producer also writes its path item, so a producer used since the
//!    read fails the condition: the step runs again, reads it fresh, and
//!    keeps it; and the count stays exact.
//!
//! Until the walk has finished one lap, it also puts an expiring-queue
//! entry for every stream with an expiry it meets (at the stream's
//! expiry now): tables written before the queue existed have streams
//! without one. An entry the stream already had is the same item or is
//! moved onto it by the queue, so the pass costs one write per such
//! stream, once per table. The walk's item then records the lap done.
//!
//! The walk's item is put in the unit's transaction without a condition:
//! two processes walking at once may look at the same streams (their
//! drops meet on the path items' conditions), and the item may go back a
//! page, which costs reads, never a stream left out.

use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Item, Query, SortCondition};
use eddy_streams::backend::Sweepable;
use eddy_streams::StreamError;

use crate::commit::{item_count, stored_producer, MAX_ITEMS};
use crate::errors::table_error;
use crate::keys::{self, Keys, EXPIRING};
use crate::old_tombstones;
use crate::path_item::{self, PathState};
use crate::sweep::MAX_PER_STEP;
use crate::unit::{DynamoUnit, Entry, MAX_EXPIRED_DROPS as MAX_DROPS};

/// The most directory entries a step looks at.
pub(crate) const PAGE: usize = 100;
/// The most producer items a step reads.
pub(crate) const PRODUCER_READS: usize = 1_000;
/// The most `Query` requests a step makes for producer items.
pub(crate) const PRODUCER_QUERIES: usize = 8;

/// Where the walk is, as its item (`ds|w`) holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The last path looked at in full (`a`); none at a lap's start.
    after: Option<String>,
    /// The stream after `after` the walk stopped inside of: its id (`i`)
    /// and the last producer looked at (`q`).
    within: Option<(String, String)>,
    /// Whether a lap was finished (`bf`): every stream met since has its
    /// entry in the expiring queue.
    queued: bool,
    /// Where the pass over old tombstones is (`old_tombstones.rs`): the
    /// last key it read (`tp`, `tk`), or done (`td`).
    tombstones: Pass,
}

/// Where the one-time pass over the table's tombstones is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Pass {
    /// Not started.
    #[default]
    Start,
    /// After this stored key.
    After(old_tombstones::StoredKey),
    /// Done.
    Done,
}

impl Cursor {
    fn decode(item: Option<&Item>) -> Cursor {
        let text = |name: &str| match item.and_then(|item| item.get(name)) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            _ => None,
        };
        Cursor {
            after: text("a"),
            within: text("i").zip(text("q")),
            queued: item.is_some_and(|item| item.contains_key("bf")),
            tombstones: match text("tp").zip(text("tk")) {
                _ if item.is_some_and(|item| item.contains_key("td")) => Pass::Done,
                Some(key) => Pass::After(key),
                None => Pass::Start,
            },
        }
    }

    /// The walk's item holding this cursor.
    pub(crate) fn item(&self, keys: &Keys) -> Item {
        let mut item = keys.walk();
        if let Some(after) = &self.after {
            item.insert("a".into(), AttributeValue::S(after.clone()));
        }
        if let Some((id, producer)) = &self.within {
            item.insert("i".into(), AttributeValue::S(id.clone()));
            item.insert("q".into(), AttributeValue::S(producer.clone()));
        }
        if self.queued {
            item.insert("bf".into(), AttributeValue::N("1".into()));
        }
        match &self.tombstones {
            Pass::Start => {}
            Pass::After((pk, sk)) => {
                item.insert("tp".into(), AttributeValue::S(pk.clone()));
                item.insert("tk".into(), AttributeValue::S(sk.clone()));
            }
            Pass::Done => {
                item.insert("td".into(), AttributeValue::N("1".into()));
            }
        }
        item
    }
}

/// The page a step looks at, kept in its unit between the two phases.
#[derive(Clone)]
pub(crate) struct Page {
    cursor: Cursor,
    /// The directory's paths after the cursor, with their path items as
    /// read (`None`: no item).
    streams: Vec<(String, Option<Entry>)>,
    /// Whether the page reaches the directory's end.
    last: bool,
}

/// Phase 1: reads the next page of the directory into the unit, and hands
/// the retired streams with no forks left to the engine in `found`.
pub(crate) async fn look(
    unit: &mut DynamoUnit,
    below: u64,
    found: &mut Sweepable,
) -> Result<(), StreamError> {
    let shared = Arc::clone(&unit.shared);
    let keys = &shared.keys;
    let item = shared
        .table
        .get_item(keys.walk())
        .await
        .map_err(|e| table_error("reading where the sweep's walk is", e))?;
    let cursor = Cursor::decode(item.as_ref());
    let mut query = Query::partition(keys.directory()).limit(PAGE);
    if let Some(after) = &cursor.after {
        query = query.start_after(Some(keys.directory_entry(after)));
    }
    let page = shared
        .table
        .query(query)
        .await
        .map_err(|e| table_error("reading the directory", e))?;
    let paths: Vec<String> = page
        .items
        .iter()
        .filter_map(|item| keys.sort_of(item).map(str::to_owned))
        .collect();
    let mut loaded = std::collections::HashMap::new();
    if !paths.is_empty() {
        let items = shared
            .table
            .batch_get_item(paths.iter().map(|path| keys.path(path)).collect())
            .await
            .map_err(|e| table_error("reading the directory's streams", e))?;
        for item in &items {
            if let Some(path) = keys.path_of(item) {
                let read = path_item::decode(item)?;
                let entry = Entry {
                    token: Some(read.token),
                    state: read.state,
                    dirty: false,
                };
                loaded.insert(path, entry);
            }
        }
    }
    let mut last = page.last_evaluated_key.is_none();
    let mut streams = Vec::with_capacity(paths.len());
    let mut room = MAX_PER_STEP.saturating_sub(found.streams.len());
    for path in paths {
        let entry = loaded.remove(&path);
        if let Some(entry) = entry.as_ref().filter(|entry| left_over(entry, below)) {
            if found.streams.contains(&path) {
                continue;
            }
            if room == 0 {
                // The rest is the next step's.
                last = false;
                break;
            }
            room -= 1;
            unit.state
                .paths
                .entry(path.clone())
                .or_insert_with(|| entry.clone());
            found.streams.push(path.clone());
        }
        streams.push((path, entry));
    }
    unit.state.walk = Some(Page {
        cursor,
        streams,
        last,
    });
    Ok(())
}

/// Whether the path item is a retired stream that no fork reads any more
/// and is past the grace: what a removal in steps cut short leaves.
fn left_over(entry: &Entry, below: u64) -> bool {
    match &entry.state {
        PathState::Stream(stream) => {
            stream.record.soft_deleted()
                && stream.forks == 0
                && stream.legacy_forks.is_empty()
                && stream.record.incarnation() < below
        }
        PathState::Absent | PathState::Tombstone(_) => false,
    }
}

/// What the walk does to one stream in a step.
struct Visit {
    /// Expired producers to delete.
    drops: Vec<String>,
    /// Where to go on inside the stream next step, if it stopped there:
    /// the last producer looked at (`None`: from the first).
    stopped: Option<Option<String>>,
}

/// Phase 2: deletes expired producers of the page's streams (and queues
/// their expiry on the first lap), as far as the unit's transaction has
/// room, and moves the walk's item on; how many producers it dropped.
pub(crate) async fn drop_expired(
    unit: &mut DynamoUnit,
    cutoff_ms: i64,
    max: usize,
) -> Result<u64, StreamError> {
    let Some(page) = unit.state.walk.take() else {
        return Ok(0);
    };
    // The walk's item is one item more.
    let Some(mut room) = MAX_ITEMS.checked_sub(item_count(&unit.state) + 1) else {
        return Ok(0);
    };
    let mut budget = Budget {
        drops: max.min(MAX_DROPS),
        reads: PRODUCER_READS,
        queries: PRODUCER_QUERIES,
    };
    let mut cursor = page.cursor.clone();
    let mut dropped = 0;
    let mut finished = true;
    for (index, (path, read)) in page.streams.iter().enumerate() {
        // The unit's own entry when it has one: it may have changed it.
        let entry = unit.state.paths.get(path).or(read.as_ref()).cloned();
        let removed = unit.state.removed.iter().any(|r| r.path == *path);
        let Some(mut entry) = entry.filter(|_| !removed) else {
            cursor.after = Some(path.clone());
            cursor.within = None;
            continue;
        };
        let PathState::Stream(stream) = &mut entry.state else {
            cursor.after = Some(path.clone());
            cursor.within = None;
            continue;
        };
        let id = Arc::clone(&stream.id);
        let queue = match stream.record.expires_at_ms() {
            Some(at) if !page.cursor.queued => {
                let at = u64::try_from(at).unwrap_or(0);
                Some((EXPIRING, keys::sweep_sort(at, &id)))
            }
            _ => None,
        };
        let queue_cost = usize::from(queue.is_some());
        if room < queue_cost {
            finished = false;
            break;
        }
        let from = match &page.cursor.within {
            Some((within, producer)) if index == 0 && **within == *id => Some(producer.clone()),
            _ => None,
        };
        let visit = if stream.producers == 0 {
            Visit {
                drops: Vec::new(),
                stopped: None,
            }
        } else {
            // Room for the path item too, if the unit does not write it.
            let path_cost = usize::from(!unit.state.paths.contains_key(path));
            let space = (room - queue_cost).saturating_sub(path_cost);
            visit(unit, &id, from, cutoff_ms, space, &mut budget).await?
        };
        if let Some(queue) = queue {
            let entries = &mut unit.state.sweep_entries;
            entries.entry(queue).or_insert_with(|| Some(path.clone()));
            room -= 1;
        }
        if !visit.drops.is_empty() {
            let count = visit.drops.len();
            stream.producers = stream.producers.saturating_sub(count as u64);
            entry.dirty = true;
            let new_path = !unit.state.paths.contains_key(path);
            room = room.saturating_sub(usize::from(new_path) + count);
            unit.state.paths.insert(path.clone(), entry);
            dropped += count as u64;
            let data = unit.state.data.entry(Arc::clone(&id)).or_default();
            for producer in visit.drops {
                let cached = (Arc::clone(&id), producer.clone());
                data.dropped_producers.insert(producer);
                unit.state.producers_read.insert(cached, None);
            }
        }
        match visit.stopped {
            Some(producer) => {
                cursor.within = producer.map(|producer| (id.to_string(), producer));
                finished = false;
                break;
            }
            None => {
                cursor.after = Some(path.clone());
                cursor.within = None;
            }
        }
    }
    if finished && page.last {
        // A lap is done: the next step starts at the first path.
        cursor.after = None;
        cursor.within = None;
        cursor.queued = true;
    }
    if cursor.tombstones != Pass::Done && room > 0 {
        let after = match &cursor.tombstones {
            Pass::After(key) => Some(key.clone()),
            Pass::Start | Pass::Done => None,
        };
        cursor.tombstones = match old_tombstones::step(unit, after, room).await? {
            Some(key) => Pass::After(key),
            None => Pass::Done,
        };
    }
    if cursor != page.cursor {
        unit.state.walk_cursor = Some(cursor);
    }
    Ok(dropped)
}

/// What a step may still spend on producers.
struct Budget {
    drops: usize,
    reads: usize,
    queries: usize,
}

/// Reads stream `id`'s producer items from after `from` (or the first)
/// within the budget, and picks the expired ones, at most `space` (the
/// transaction's room) and the budget's drops.
async fn visit(
    unit: &DynamoUnit,
    id: &Arc<str>,
    from: Option<String>,
    cutoff_ms: i64,
    space: usize,
    budget: &mut Budget,
) -> Result<Visit, StreamError> {
    let keys = &unit.shared.keys;
    let written = unit.state.data.get(id);
    let mut query = Query::partition(keys.data(id))
        .sort(SortCondition::BeginsWith(AttributeValue::S(
            keys::PRODUCERS.into(),
        )))
        .start_after(
            from.as_ref()
                .map(|producer| keys.data_item(id, keys::producer(producer))),
        );
    let mut drops = Vec::new();
    let mut looked = from;
    loop {
        if budget.reads == 0 || budget.queries == 0 {
            return Ok(Visit {
                drops,
                stopped: Some(looked),
            });
        }
        budget.queries -= 1;
        let page = unit
            .shared
            .table
            .query(query.clone().limit(budget.reads))
            .await
            .map_err(|e| table_error("reading producers", e))?;
        budget.reads = budget.reads.saturating_sub(page.items.len());
        for item in &page.items {
            let Some((producer, state)) = stored_producer(keys, item)? else {
                continue;
            };
            let fresh = written.is_some_and(|data| data.producers.contains_key(producer));
            if state.last_ms <= cutoff_ms && !fresh {
                if drops.len() >= space.min(budget.drops) {
                    // Taken next step, from here.
                    budget.drops -= drops.len().min(budget.drops);
                    return Ok(Visit {
                        drops,
                        stopped: Some(looked),
                    });
                }
                drops.push(producer.to_owned());
            }
            looked = Some(producer.to_owned());
        }
        match page.last_evaluated_key {
            Some(last) => query = query.start_after(Some(last)),
            None => break,
        }
    }
    budget.drops -= drops.len().min(budget.drops);
    Ok(Visit {
        drops,
        stopped: None,
    })
}
