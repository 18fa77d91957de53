//! A new stream whose data items do not fit in its creating transaction
//! (a restore of a stream with thousands of producers), written ahead.
//!
//! A stream created by the unit has a new id, so its data partition is
//! read by no one until the transaction that puts its path item commits.
//! Its packs and producers' states are then written first, 100 items per
//! transaction, under a garbage entry of that id marked `staged`; the
//! unit's transaction deletes the garbage entry, conditioned on its still
//! being there and not being purged. If that transaction fails, the
//! staged items are the garbage entry's, and its purge deletes them.
//!
//! A purge (`backend.rs`) first marks the garbage entry `purging`
//! (conditioned on its existing), so that a staged stream is either
//! committed before the purge starts (the entry is gone, the purge stops)
//! or never (its transaction's condition fails, and the call runs again
//! with another id).

use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Put, TransactWriteItem};
use eddy_streams::StreamError;

use crate::backend::Shared;
use crate::commit::MAX_ITEMS;
use crate::errors::table_error;
use crate::pack;
use crate::unit::State;

/// How many of the unit's items are new streams' data, which may be
/// written ahead.
pub(crate) fn stageable(state: &State) -> usize {
    fresh_data(state).map(|(_, items)| items).sum()
}

/// How many garbage entries staging would add to the transaction.
pub(crate) fn entries(state: &State) -> usize {
    fresh_data(state).filter(|(_, items)| *items > 0).count()
}

/// Each new stream of the unit, with how many data items it writes.
fn fresh_data(state: &State) -> impl Iterator<Item = (&Arc<str>, usize)> {
    state
        .data
        .iter()
        .filter(|(id, _)| state.fresh.contains(*id))
        .map(|(id, data)| {
            let packs: usize = data.packs.iter().map(pack::Pack::items).sum();
            (id, packs + data.producers.len())
        })
}

/// Writes every new stream's data items of `state` ahead, under a staged
/// garbage entry each, and leaves in `state` the deletes of those entries
/// (`State::staged`). On an error, what was staged is left for the purge
/// (`state.staged` says which).
pub(crate) async fn stage(shared: &Arc<Shared>, state: &mut State) -> Result<(), StreamError> {
    let keys = &shared.keys;
    let ids: Vec<Arc<str>> = fresh_data(state)
        .filter(|(_, items)| *items > 0)
        .map(|(id, _)| Arc::clone(id))
        .collect();
    for id in ids {
        let Some(data) = state.data.get_mut(&id) else {
            continue;
        };
        let mut items: Vec<TransactWriteItem> = Vec::new();
        for pack in data.packs.drain(..) {
            items.extend(
                pack::items(keys, &id, &pack)
                    .into_iter()
                    .map(|item| Put::new(item).into()),
            );
        }
        for (producer, position) in std::mem::take(&mut data.producers) {
            items.push(
                Put::new(crate::commit::producer_item(
                    keys, &id, &producer, &position,
                ))
                .into(),
            );
        }
        let mut entry = keys.garbage_entry(&id);
        entry.insert("staged".into(), AttributeValue::Bool(true));
        state.staged.push(Arc::clone(&id));
        shared
            .table
            .put_item(Put::new(entry))
            .await
            .map_err(|e| table_error("staging a new stream's items", e))?;
        while !items.is_empty() {
            let rest = items.split_off(items.len().min(MAX_ITEMS));
            shared
                .table
                .transact_write_items(std::mem::replace(&mut items, rest))
                .await
                .map_err(|e| table_error("staging a new stream's items", e))?;
        }
    }
    Ok(())
}
