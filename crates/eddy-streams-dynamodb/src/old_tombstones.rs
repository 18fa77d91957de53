//! The one-time pass that queues tombstones written before the tombstone
//! queue (`ds|t`) existed.
//!
//! Such a tombstone is a path item that no partition a `Query` reads
//! lists (the directory lists streams only), so the pass reads the whole
//! table once with `Scan`, a page per sweep step (at most [`PAGE`] items,
//! as far as the step's transaction has room), and puts a queue entry in
//! the step's transaction for each tombstone it meets. The walk's item
//! (`walk.rs`) keeps where the scan is, and that it is done. A tombstone
//! that already had an entry gets a second one, under another sort key:
//! the first one due drops it, the second then finds it gone and is
//! deleted.

use eddy_dynamo::{AttributeValue, Item, Scan};
use eddy_streams::StreamError;

use crate::errors::table_error;
use crate::keys::{self, Keys, TOMBSTONES};
use crate::path_item::{self, PathState};
use crate::unit::DynamoUnit;

/// The most items a step of the pass reads.
pub(crate) const PAGE: usize = 1_000;

/// The stored key `(pk, sk)` of a table item.
pub(crate) type StoredKey = (String, String);

/// Where the pass goes on after one step: the last key it looked at, or
/// `None` when it has read the whole table.
pub(crate) async fn step(
    unit: &mut DynamoUnit,
    after: Option<StoredKey>,
    room: usize,
) -> Result<Option<StoredKey>, StreamError> {
    let keys = unit.shared.keys.clone();
    let scan = Scan::table()
        .limit(PAGE)
        .start_after(after.as_ref().map(|(pk, sk)| item_key(&keys, pk, sk)));
    let page = unit
        .shared
        .table
        .scan(scan)
        .await
        .map_err(|e| table_error("reading the table for tombstones", e))?;
    let mut looked = after;
    let mut queued = 0;
    for item in &page.items {
        if let Some((path, incarnation)) = tombstone(&keys, item)? {
            let kept = match unit.state.paths.get(&path).map(|entry| &entry.state) {
                None => true,
                Some(state) => matches!(state, PathState::Tombstone(i) if *i == incarnation),
            };
            if kept {
                if queued == room {
                    return Ok(looked);
                }
                let sort = keys::sweep_sort(incarnation, &path_id(&path));
                unit.state
                    .sweep_entries
                    .entry((TOMBSTONES, sort))
                    .or_insert(Some(path));
                queued += 1;
            }
        }
        looked = stored_key(&keys, item).or(looked);
    }
    Ok(page.last_evaluated_key.as_ref().and(looked))
}

/// The path and incarnation of a tombstone's path item.
fn tombstone(keys: &Keys, item: &Item) -> Result<Option<(String, u64)>, StreamError> {
    let Some(path) = keys.path_of(item) else {
        return Ok(None);
    };
    match path_item::decode(item)?.state {
        PathState::Tombstone(incarnation) => Ok(Some((path, incarnation))),
        PathState::Absent | PathState::Stream(_) => Ok(None),
    }
}

fn stored_key(keys: &Keys, item: &Item) -> Option<StoredKey> {
    match (item.get(&keys.pk), item.get(&keys.sk)) {
        (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => {
            Some((pk.clone(), sk.clone()))
        }
        _ => None,
    }
}

fn item_key(keys: &Keys, pk: &str, sk: &str) -> Item {
    Item::from([
        (keys.pk.clone(), AttributeValue::S(pk.into())),
        (keys.sk.clone(), AttributeValue::S(sk.into())),
    ])
}

/// A stand-in for the deleted stream's id in the entry's sort key (a
/// tombstone keeps no id): stable per path (64-bit FNV-1a), so that a
/// step run again puts the same entry.
fn path_id(path: &str) -> String {
    let hash = path.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("t{hash:016x}")
}
