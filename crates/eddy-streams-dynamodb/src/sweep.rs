//! What the sweep may remove, found in bounded reads.
//!
//! Two partitions are the sweep's queues, each ordered by time: `ds|x`
//! has an entry for every stream created with an expiry, keyed by the
//! earliest time it may expire (its expiry when created: reads and
//! appends only move a sliding TTL later), and `ds|t` one for every
//! tombstone, keyed by its incarnation. An entry names the stream's id
//! and holds its path. Entries are hints: the creates and deletes that
//! write them never read or delete them, and a step here checks each
//! one it takes against its path item (one `BatchGetItem`):
//!
//! - a stream not expired yet (touched since) moves to its new expiry;
//! - one expired but younger than the sweep's grace moves to the end of
//!   the grace;
//! - one expired (or retired) and old enough is handed to the engine,
//!   which removes it if nothing live reads it (its path item
//!   kept in the unit, so the engine's reads of it cost nothing and the
//!   commit is conditioned on it), its entry deleted in the unit's
//!   transaction; an expired one with forks gets an entry a grace later
//!   too, in case a live fork keeps it (a retired one goes with its last
//!   fork);
//! - a tombstone still there is handed to the engine, which drops it and
//!   its entry in the unit's transaction;
//! - an entry whose stream or tombstone is no longer at its path (removed,
//!   created again) is deleted.
//!
//! So one step costs two `Query`s of at most [`MAX_PER_STEP`] entries,
//! one `BatchGetItem`, at most one `TransactWriteItems` of moved and
//! deleted entries, and the engine's transaction.

use std::collections::{BTreeMap, HashMap};

use eddy_dynamo::{AttributeValue, Delete, Put, Query, SortCondition, TransactWriteItem};
use eddy_streams::backend::Sweepable;
use eddy_streams::StreamError;

use crate::errors::table_error;
use crate::keys::{self, EXPIRING, TOMBSTONES};
use crate::path_item::{self, PathState};
use crate::unit::{DynamoUnit, Entry};

/// The most streams (and, apart, tombstones) one step takes, so that the
/// engine's transaction stays within 100 items (a removed stream writes
/// about four; more are removed in steps, see `steps.rs`).
pub(crate) const MAX_PER_STEP: usize = 16;

/// An entry of a sweep queue as read.
pub(crate) struct Queued {
    pub(crate) sort: String,
    /// The time (or incarnation) it is queued at.
    pub(crate) at: u64,
    pub(crate) id: String,
    pub(crate) path: String,
}

/// The entries of `partition` queued before `before`, oldest first.
pub(crate) async fn queued(
    unit: &DynamoUnit,
    partition: &'static str,
    before: u64,
    max: usize,
) -> Result<Vec<Queued>, StreamError> {
    let keys = &unit.shared.keys;
    let query = Query::partition(AttributeValue::S(partition.into()))
        .sort(SortCondition::Lt(AttributeValue::S(keys::sweep_before(
            before,
        ))))
        .limit(max);
    let page = unit
        .shared
        .table
        .query(query)
        .await
        .map_err(|e| table_error("reading the sweep's queue", e))?;
    Ok(page
        .items
        .iter()
        .filter_map(|item| {
            let sort = keys.sort_of(item)?;
            let (at, id) = sort.split_once('|')?;
            let path = match item.get("p") {
                Some(AttributeValue::S(path)) => path.clone(),
                _ => return None,
            };
            Some(Queued {
                sort: sort.to_owned(),
                at: at.parse().ok()?,
                id: id.to_owned(),
                path,
            })
        })
        .collect())
}

/// The path items at `paths` (sorted, without repeats), by path: one
/// `BatchGetItem`.
pub(crate) async fn path_items(
    unit: &DynamoUnit,
    paths: &[String],
) -> Result<HashMap<String, Entry>, StreamError> {
    let keys = &unit.shared.keys;
    let items = unit
        .shared
        .table
        .batch_get_item(paths.iter().map(|path| keys.path(path)).collect())
        .await
        .map_err(|e| table_error("reading the streams a sweep queue names", e))?;
    let mut loaded = HashMap::with_capacity(items.len());
    for item in &items {
        if let Some(path) = keys.path_of(item) {
            let found = path_item::decode(item)?;
            let entry = Entry {
                token: Some(found.token),
                state: found.state,
                dirty: false,
            };
            loaded.insert(path, entry);
        }
    }
    Ok(loaded)
}

/// What may be swept now (see the module's note).
pub(crate) async fn sweepable(
    unit: &mut DynamoUnit,
    now_ms: i64,
    below: u64,
    max: usize,
) -> Result<Sweepable, StreamError> {
    let max = max.clamp(1, MAX_PER_STEP);
    let now = u64::try_from(now_ms).unwrap_or(0);
    let expiring = queued(unit, EXPIRING, now, max).await?;
    let tombstones = queued(unit, TOMBSTONES, below, max).await?;
    let mut paths: Vec<String> = expiring
        .iter()
        .chain(&tombstones)
        .map(|q| q.path.clone())
        .collect();
    paths.sort();
    paths.dedup();
    if paths.is_empty() {
        return Ok(Sweepable::default());
    }
    let loaded = path_items(unit, &paths).await?;
    // Now and the end of the grace, in ms: a stream created at
    // incarnation `i` (µs) may be swept after `i / 1000 + grace`.
    let grace_ms = now.saturating_sub(below / 1000);
    let mut moves = Moves::default();
    let mut found = Sweepable::default();
    let take = |unit: &mut DynamoUnit, path: &str| {
        if let Some(entry) = loaded.get(path) {
            unit.state
                .paths
                .entry(path.to_owned())
                .or_insert_with(|| entry.clone());
        }
    };
    for queued in &expiring {
        let state = loaded.get(&queued.path).map(|entry| &entry.state);
        let stream = match state {
            Some(PathState::Stream(stream)) if *stream.id == *queued.id => stream,
            _ => {
                moves.delete(EXPIRING, &queued.sort);
                continue;
            }
        };
        let record = &stream.record;
        let expires = record
            .expires_at_ms()
            .map(|at| u64::try_from(at).unwrap_or(0));
        let retired = record.soft_deleted();
        match expires {
            None => moves.delete(EXPIRING, &queued.sort),
            Some(at) if at > now && !retired => {
                moves.requeue(queued, at);
            }
            Some(_) if record.incarnation() >= below => {
                let after_grace = record.incarnation() / 1000 + grace_ms + 1;
                moves.requeue(queued, after_grace);
            }
            Some(_) => {
                // A retired stream goes with its last fork, when a live
                // one keeps it now; an expired one with forks may be
                // kept by a live fork, so it is looked at again later.
                let has_forks = stream.forks > 0 || !stream.legacy_forks.is_empty();
                let entries = &mut unit.state.sweep_entries;
                entries.insert((EXPIRING, queued.sort.clone()), None);
                if has_forks && !retired {
                    let later = keys::sweep_sort(now + grace_ms, &queued.id);
                    entries.insert((EXPIRING, later), Some(queued.path.clone()));
                }
                take(unit, &queued.path);
                found.streams.push(queued.path.clone());
            }
        }
    }
    for queued in &tombstones {
        match loaded.get(&queued.path).map(|entry| &entry.state) {
            Some(PathState::Tombstone(incarnation)) if *incarnation == queued.at => {
                let sort = queued.sort.clone();
                unit.state
                    .found_tombstones
                    .insert(queued.path.clone(), sort);
                take(unit, &queued.path);
                found.tombstones.push(queued.path.clone());
            }
            _ => moves.delete(TOMBSTONES, &queued.sort),
        }
    }
    found.streams.dedup();
    found.tombstones.dedup();
    if !moves.0.is_empty() {
        let keys = &unit.shared.keys;
        let items: Vec<TransactWriteItem> = (moves.0)
            .into_iter()
            .map(|((partition, sort), path)| {
                let mut item = keys.sweep_entry(partition, sort);
                match path {
                    Some(path) => {
                        item.insert("p".into(), AttributeValue::S(path));
                        Put::new(item).into()
                    }
                    None => Delete::new(item).into(),
                }
            })
            .collect();
        unit.shared
            .table
            .transact_write_items(items)
            .await
            .map_err(|e| table_error("moving the sweep's queue", e))?;
    }
    Ok(found)
}

/// The sweep entries a step moves or deletes outside the unit, by
/// (partition, sort key): a put (with its path) or a delete, at most one
/// of them per item (a transaction names an item once). A put wins: an
/// entry too many costs a read later, one too few loses a sweep.
#[derive(Default)]
struct Moves(BTreeMap<(&'static str, String), Option<String>>);

impl Moves {
    fn delete(&mut self, partition: &'static str, sort: &str) {
        self.0.entry((partition, sort.to_owned())).or_insert(None);
    }

    /// Moves an expiring stream's entry to `at`.
    fn requeue(&mut self, queued: &Queued, at: u64) {
        let sort = keys::sweep_sort(at, &queued.id);
        self.0.insert((EXPIRING, sort), Some(queued.path.clone()));
        self.delete(EXPIRING, &queued.sort);
    }
}
