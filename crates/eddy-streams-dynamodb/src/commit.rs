//! A unit's commit: one `TransactWriteItems`.
//!
//! Each path the unit read or wrote is one item of the transaction,
//! conditioned on the write token it had when loaded (or on having no
//! item): a written path is put (or deleted) with a new token, a path
//! only read gets a condition check. Then the data items: packs of new
//! messages (and deletes of those retention dropped, rewrites and
//! deletes of those compaction dropped), producers' states
//! (and deletes of expired ones), directory entries, garbage entries of
//! removed streams, sweep and retention entries. DynamoDB applies all or
//! nothing; a failed condition means another writer got there first, and
//! the store runs the call again.

use std::sync::Arc;

use eddy_dynamo::{
    item_size, AttributeValue, Condition, ConditionCheck, Delete, Item, Put, TableErrorKind,
    TransactWriteItem, MAX_ITEM_SIZE,
};
use eddy_streams::backend::{Commit, ProducerState};
use eddy_streams::StreamError;

use crate::backend::{purge_later, Shared};
use crate::errors::table_error;
use crate::keys::{self, Keys};
use crate::pack::{self, ITEM_OVERHEAD};
use crate::path_item::{self, new_token, PathState};
use crate::unit::State;
use crate::{staging, steps};

/// The most items of one transaction (DynamoDB's limit).
pub(crate) const MAX_ITEMS: usize = 100;

/// The most bytes of one transaction's items: DynamoDB's 4 MB less a
/// margin for what the estimates leave out.
pub(crate) const MAX_BYTES: usize = 4_000_000;

/// Whether the unit writes anything.
fn writes(state: &State) -> bool {
    state.paths.values().any(|entry| entry.dirty)
        || !state.data.is_empty()
        || !state.directory.is_empty()
        || !state.fork_refs.is_empty()
        || !state.removed.is_empty()
        || !state.sweep_entries.is_empty()
        || !state.staged.is_empty()
        || state.walk_cursor.is_some()
}

/// How many items the unit's transaction holds.
pub(crate) fn item_count(state: &State) -> usize {
    let data: usize = state
        .data
        .values()
        .map(|data| {
            data.producers.len()
                + data.dropped_producers.len()
                + data.dropped_messages.len()
                + data.rewrites.len()
                + data.packs.iter().map(pack::Pack::items).sum::<usize>()
        })
        .sum();
    state.paths.len()
        + state.directory.len()
        + state.fork_refs.len()
        + state.removed.len()
        + state.sweep_entries.len()
        + state.staged.len()
        + usize::from(state.walk_cursor.is_some())
        + data
}

/// Moves the forks that path items written by the unit still list in
/// themselves (tables written before fork references) into fork
/// references, as many as the transaction has room for: the legacy sets
/// shrink with every write until they are gone.
fn migrate_legacy_forks(state: &mut State) {
    let mut room = MAX_ITEMS.saturating_sub(item_count(state));
    for entry in state.paths.values_mut() {
        let PathState::Stream(stream) = &mut entry.state else {
            continue;
        };
        while entry.dirty && room > 0 {
            let Some(fork) = stream.legacy_forks.pop_first() else {
                break;
            };
            stream.forks += 1;
            state.fork_refs.insert((Arc::clone(&stream.id), fork), true);
            room -= 1;
        }
    }
}

/// Why the unit cannot be one transaction, if it cannot.
pub(crate) fn overflow(keys: &Keys, state: &State) -> Option<StreamError> {
    if !writes(state) {
        return None;
    }
    let items = item_count(state);
    let bytes = match estimated_bytes(keys, state) {
        Ok(bytes) => bytes,
        Err(too_large) => return Some(too_large),
    };
    if bytes > MAX_BYTES {
        return Some(StreamError::TooLarge {
            size: bytes,
            limit: MAX_BYTES,
        });
    }
    // A removal of many streams is committed in steps (`steps.rs`): only
    // its last step must fit one transaction, which `commit` checks.
    // A new stream's data is written ahead when it does not fit
    // (`staging.rs`).
    let fixed = items - staging::stageable(state) + staging::entries(state);
    if fixed > MAX_ITEMS && state.removed.is_empty() {
        return Some(too_many_items(items));
    }
    None
}

/// About how many bytes the unit's transaction writes; an error when a
/// path item it writes is larger than DynamoDB takes (refused here, as
/// too large, before anything is sent).
pub(crate) fn estimated_bytes(keys: &Keys, state: &State) -> Result<usize, StreamError> {
    let mut bytes = ITEM_OVERHEAD * item_count(state);
    for (path, entry) in &state.paths {
        if entry.dirty {
            if let Ok(Some(item)) = path_item::encode(keys, path, "0000000000000000", &entry.state)
            {
                let size = item_size(&item);
                if size > MAX_ITEM_SIZE {
                    return Err(StreamError::TooLarge {
                        size,
                        limit: MAX_ITEM_SIZE,
                    });
                }
                bytes += size;
            }
        }
    }
    bytes += state
        .fork_refs
        .keys()
        .map(|(id, fork)| id.len() + fork.len())
        .sum::<usize>();
    bytes += state
        .sweep_entries
        .iter()
        .map(|((_, sort), path)| sort.len() + path.as_ref().map_or(0, String::len))
        .sum::<usize>();
    for data in state.data.values() {
        bytes += data
            .producers
            .keys()
            .chain(&data.dropped_producers)
            .chain(&data.dropped_messages)
            .map(|id| id.len() + ITEM_OVERHEAD)
            .sum::<usize>();
        bytes += data.packs.iter().map(pack::Pack::size).sum::<usize>();
        bytes += data.rewrites.values().map(item_size).sum::<usize>();
    }
    Ok(bytes)
}

fn too_many_items(items: usize) -> StreamError {
    StreamError::internal(format!(
        "the call writes {items} items, more than the {MAX_ITEMS} one DynamoDB transaction holds"
    ))
}

/// A producer's state from its item.
pub(crate) fn producer_state(item: &Item) -> Result<ProducerState, StreamError> {
    fn number<T: std::str::FromStr>(item: &Item, name: &str) -> Result<T, StreamError> {
        match item.get(name) {
            Some(AttributeValue::N(n)) => n
                .parse()
                .map_err(|_| StreamError::internal("a producer item has a bad number")),
            _ => Err(StreamError::internal(
                "a producer item lacks its epoch or seq",
            )),
        }
    }
    let last_ms = match item.get("t") {
        Some(_) => number(item, "t")?,
        None => written_before_expiry(),
    };
    Ok(ProducerState {
        epoch: number(item, "e")?,
        seq: number(item, "s")?,
        last_ms,
    })
}

/// A producer item's producer id and state; `None` for a data item that
/// is no producer's.
pub(crate) fn stored_producer<'a>(
    keys: &Keys,
    item: &'a Item,
) -> Result<Option<(&'a str, ProducerState)>, StreamError> {
    let sort = keys.sort_of(item);
    match sort.and_then(|sk| sk.strip_prefix(keys::PRODUCERS)) {
        Some(producer) => Ok(Some((producer, producer_state(item)?))),
        None => Ok(None),
    }
}

/// The item of a producer's state on stream `id`.
pub(crate) fn producer_item(keys: &Keys, id: &str, producer: &str, state: &ProducerState) -> Item {
    let mut item = keys.data_item(id, keys::producer(producer));
    encode_producer(&mut item, state);
    item
}

/// When a producer item written before producer states expired (one
/// without `t`) counts as last written: when this process first met one,
/// so that it keeps a whole expiry window after the upgrade.
fn written_before_expiry() -> i64 {
    static UPGRADE_MS: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *UPGRADE_MS.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    })
}

/// A producer item's attributes besides its key.
fn encode_producer(item: &mut Item, state: &ProducerState) {
    item.insert("e".into(), AttributeValue::N(state.epoch.to_string()));
    item.insert("s".into(), AttributeValue::N(state.seq.to_string()));
    item.insert("t".into(), AttributeValue::N(state.last_ms.to_string()));
}

/// A path item a transaction puts, and the write token it gives it: the
/// mark by which a commit recognises its own write.
struct Mark {
    key: Item,
    token: String,
}

/// The transaction's items, and the mark of its first path item put.
fn transaction(
    keys: &Keys,
    state: &State,
) -> Result<(Vec<TransactWriteItem>, Option<Mark>), StreamError> {
    let mut items = Vec::new();
    let mut mark = None;
    for (path, entry) in &state.paths {
        let condition = match &entry.token {
            Some(token) => Condition::eq("v", AttributeValue::S(token.clone())),
            None => Condition::not_exists(keys.pk.clone()),
        };
        let key = keys.path(path);
        items.push(if !entry.dirty {
            ConditionCheck { key, condition }.into()
        } else {
            let token = new_token();
            match path_item::encode(keys, path, &token, &entry.state)? {
                Some(item) => {
                    mark.get_or_insert(Mark { key, token });
                    Put::new(item).when(condition).into()
                }
                None if entry.token.is_some() => Delete::new(key).when(condition).into(),
                None => ConditionCheck { key, condition }.into(),
            }
        });
    }
    for (path, live) in &state.directory {
        let key = keys.directory_entry(path);
        items.push(if *live {
            Put::new(key).into()
        } else {
            Delete::new(key).into()
        });
    }
    for ((id, fork), live) in &state.fork_refs {
        let mut key = keys.fork_ref(id, fork);
        let end = state.fork_ends.get(&(Arc::clone(id), fork.clone()));
        items.push(if *live {
            if let Some(end) = end {
                key.insert("e".into(), AttributeValue::N(end.to_string()));
            }
            Put::new(key).into()
        } else {
            Delete::new(key).into()
        });
    }
    for removal in &state.removed {
        items.push(Put::new(keys.garbage_entry(&removal.id)).into());
    }
    for id in &state.staged {
        let committable = Condition::exists(keys.pk.clone()).and(Condition::not_exists("purging"));
        items.push(Delete::new(keys.garbage_entry(id)).when(committable).into());
    }
    for ((partition, sort), path) in &state.sweep_entries {
        let mut key = keys.sweep_entry(partition, sort.clone());
        items.push(match path {
            Some(path) => {
                key.insert("p".into(), AttributeValue::S(path.clone()));
                Put::new(key).into()
            }
            None => Delete::new(key).into(),
        });
    }
    if let Some(cursor) = &state.walk_cursor {
        items.push(Put::new(cursor.item(keys)).into());
    }
    for (id, data) in &state.data {
        for pack in &data.packs {
            items.extend(
                pack::items(keys, id, pack)
                    .into_iter()
                    .map(|item| Put::new(item).into()),
            );
        }
        for (producer, state) in &data.producers {
            items.push(Put::new(producer_item(keys, id, producer, state)).into());
        }
        for producer in &data.dropped_producers {
            items.push(Delete::new(keys.data_item(id, keys::producer(producer))).into());
        }
        for sort in &data.dropped_messages {
            items.push(Delete::new(keys.data_item(id, sort.clone())).into());
        }
        for item in data.rewrites.values() {
            items.push(Put::new(item.clone()).into());
        }
    }
    Ok((items, mark))
}

/// Commits a unit's state.
pub(crate) async fn commit(shared: &Arc<Shared>, mut state: State) -> Result<Commit, StreamError> {
    if !writes(&state) {
        return Ok(Commit::Done);
    }
    if let Some(overflow) = overflow(&shared.keys, &state) {
        return Err(overflow);
    }
    let mut deferred = None;
    if item_count(&state) > MAX_ITEMS {
        if steps::remove_in_steps(shared, &mut state).await? == Commit::Conflict {
            return Ok(Commit::Conflict);
        }
        if item_count(&state) > MAX_ITEMS {
            deferred = Some(steps::defer_released(&mut state));
        }
        if item_count(&state) > MAX_ITEMS && staging::stageable(&state) > 0 {
            if let Err(e) = staging::stage(shared, &mut state).await {
                purge_later(shared, state.staged);
                return Err(e);
            }
        }
        let items = item_count(&state);
        if items > MAX_ITEMS {
            purge_later(shared, std::mem::take(&mut state.staged));
            return Err(too_many_items(items));
        }
    }
    migrate_legacy_forks(&mut state);
    let staged = state.staged.clone();
    let committed = transact(shared, state).await;
    if !matches!(committed, Ok(Commit::Done)) && !staged.is_empty() {
        // Not committed: what was written ahead is garbage.
        purge_later(shared, staged);
    }
    if let (Ok(Commit::Done), Some(deferred)) = (&committed, deferred) {
        // The call is done; what it released is dead, and a step that
        // fails leaves it to the sweep.
        if let Err(error) = steps::remove_deferred(shared, deferred).await {
            tracing::warn!(%error, "released sources left to the sweep");
        }
    }
    committed
}

/// Writes `state` in one transaction (the unit's, or one step of it).
pub(crate) async fn transact(shared: &Arc<Shared>, state: State) -> Result<Commit, StreamError> {
    let (items, mark) = transaction(&shared.keys, &state)?;
    if let Err(e) = shared.table.transact_write_items(items).await {
        let unknown = matches!(
            e.kind(),
            TableErrorKind::ConditionFailed
                | TableErrorKind::Conflict
                | TableErrorKind::Throttled
                | TableErrorKind::Unavailable
        );
        if !unknown || !landed(shared, mark.as_ref()).await? {
            return match e.kind() {
                TableErrorKind::ConditionFailed | TableErrorKind::Conflict => Ok(Commit::Conflict),
                _ => Err(table_error("committing", e)),
            };
        }
        tracing::debug!(error = %e, "a commit whose answer was an error had landed");
    }
    if !state.removed.is_empty() {
        purge_later(shared, state.removed.into_iter().map(|r| r.id).collect());
    }
    Ok(Commit::Done)
}

/// Whether a transaction that failed had landed after all: its marked path
/// item holds its write token (one strongly consistent read). A commit
/// that put no path item cannot tell, and counts as not landed.
async fn landed(shared: &Arc<Shared>, mark: Option<&Mark>) -> Result<bool, StreamError> {
    let Some(mark) = mark else {
        return Ok(false);
    };
    let item = shared
        .table
        .get_item(mark.key.clone())
        .await
        .map_err(|e| table_error("reading back a commit whose outcome was unknown", e))?;
    Ok(item
        .as_ref()
        .and_then(|item| item.get("v"))
        .is_some_and(|v| matches!(v, AttributeValue::S(token) if *token == mark.token)))
}
