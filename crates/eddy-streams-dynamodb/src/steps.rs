//! A removal too large for one transaction, committed in steps.
//!
//! When a call removes more streams than one `TransactWriteItems` holds
//! (a stream with many dead forks, a chain of sources released by the
//! last fork), the removals of streams that were already dead (deleted
//! or expired, nothing live reading them) are committed first, a step
//! per transaction, forks before their sources; then the rest of the
//! call is one transaction as usual. A dead stream can never be live
//! again, so removing one is right whatever else happens: each step is a
//! removal the engine would make at any time, and between steps every
//! stream stands as the engine says (the dead ones read as gone or not
//! found until they are removed, the others as before). What the call
//! itself decides (the stream a delete removes, and the sources up its
//! chain it releases) is in the call's transaction, so the call succeeds
//! or fails as a whole. A step that loses a race ends the call as a lost
//! race; the engine runs it again and finds less to remove.
//!
//! A chain of released sources deeper than that transaction holds (each
//! retired, each the next one's only reader) is cut: the sources
//! farthest up the chain are left out of it and removed after it, in
//! steps. Once the call's transaction committed, nothing live reads them
//! (its last reader is gone), so they are dead streams like those above,
//! and the source next to the cut is written in that transaction with
//! its fork count lowered. A step that fails or loses a race after the
//! call committed leaves the rest as retired streams with no forks,
//! which the sweep's walk over the directory finds and removes
//! (`walk.rs`); the call is answered either way.

use std::collections::HashSet;
use std::sync::Arc;

use eddy_streams::backend::Commit;
use eddy_streams::StreamError;

use crate::backend::Shared;
use crate::commit::{item_count, transact, MAX_ITEMS};
use crate::errors::table_error;
use crate::path_item::{self, PathState};
use crate::unit::{Entry, Removal, State};

/// Commits the removals of `state` that may go first, in steps, until
/// the rest fits one transaction or nothing more may go first. A
/// [`Commit::Conflict`] when a step lost a race.
pub(crate) async fn remove_in_steps(
    shared: &Arc<Shared>,
    state: &mut State,
) -> Result<Commit, StreamError> {
    let last = decided(state);
    while item_count(state) > MAX_ITEMS {
        let step = next_step(state, &last, MAX_ITEMS);
        if step.removed.is_empty() {
            break;
        }
        tracing::debug!(
            streams = step.removed.len(),
            "removing dead streams in a step"
        );
        if transact(shared, step).await? == Commit::Conflict {
            return Ok(Commit::Conflict);
        }
    }
    Ok(Commit::Done)
}

/// Removals taken out of a call's last transaction, to commit after it.
pub(crate) struct Deferred {
    /// What is left to remove.
    rest: State,
    /// The paths whose items the transaction before wrote anew (sources
    /// it kept, with their fork counts lowered): their tokens are read
    /// again before the next step.
    written: Vec<String>,
}

/// Takes out of `state`, while it does not fit one transaction, the
/// removals of the retired sources the call releases, farthest up the
/// chain first. After the call's transaction they are dead (retired, and
/// no fork reads them any more), so they go after it in steps
/// (`remove_deferred`). A source kept whose fork the transaction removes
/// is written with its fork count lowered, so that a step cut short
/// leaves it exact (the sweep's walk finds retired streams with none).
pub(crate) fn defer_released(state: &mut State) -> Deferred {
    let last = decided(state);
    let mut rest = State::default();
    while item_count(state) + boundaries(&rest, state).len() > MAX_ITEMS {
        let farthest = state.removed.iter().position(|removal| {
            let source_removed = removal
                .source
                .as_deref()
                .is_some_and(|source| state.removed.iter().any(|r| r.path == source));
            removal.retired
                && last.contains(&removal.path)
                && gone(state, &removal.path)
                && !source_removed
        });
        let Some(index) = farthest else {
            break;
        };
        take(state, index, &mut rest);
    }
    let written = keep_boundaries(&rest, state);
    Deferred { rest, written }
}

/// Commits the removals a call deferred, a step per transaction, after
/// its own. A step that loses a race ends it: another call removed them
/// or changed them, and whatever is left is dead and found by the sweep.
pub(crate) async fn remove_deferred(
    shared: &Arc<Shared>,
    deferred: Deferred,
) -> Result<(), StreamError> {
    let Deferred {
        mut rest,
        mut written,
    } = deferred;
    let none = HashSet::new();
    while !rest.removed.is_empty() {
        if !read_tokens(shared, &mut rest, &written).await? {
            return Ok(());
        }
        // Room for the path item of the source a step leaves (a chain
        // has one).
        let mut step = next_step(&mut rest, &none, MAX_ITEMS - 1);
        written = keep_boundaries(&rest, &mut step);
        if step.removed.is_empty() || item_count(&step) > MAX_ITEMS {
            return Err(StreamError::internal(
                "released sources that no step of one transaction could take",
            ));
        }
        tracing::debug!(
            streams = step.removed.len(),
            "removing released sources in a step"
        );
        if transact(shared, step).await? == Commit::Conflict {
            return Ok(());
        }
    }
    Ok(())
}

/// The indexes in `rest` of the removals that are sources of removals in
/// `kept`: their path items stay in `kept`'s transaction.
fn boundaries(rest: &State, kept: &State) -> Vec<usize> {
    (0..rest.removed.len())
        .filter(|&index| {
            let path = rest.removed[index].path.as_str();
            kept.removed
                .iter()
                .any(|r| r.source.as_deref() == Some(path))
        })
        .collect()
}

/// Puts in `kept` the path items of the sources that `rest` removes later
/// and `kept` removes forks of: as they stood when removed, with the forks
/// still left in `rest` counted. Their paths.
fn keep_boundaries(rest: &State, kept: &mut State) -> Vec<String> {
    let mut written = Vec::new();
    for index in boundaries(rest, kept) {
        let removal = &rest.removed[index];
        let Some(token) = rest.paths.get(&removal.path).map(|e| e.token.clone()) else {
            continue;
        };
        let left = rest
            .removed
            .iter()
            .filter(|r| r.source.as_deref() == Some(removal.path.as_str()))
            .filter(|r| reference_of(rest, r).is_some())
            .count() as u64;
        let mut stream = removal.before.clone();
        stream.forks += left;
        let entry = Entry {
            token,
            state: PathState::Stream(stream),
            dirty: true,
        };
        kept.paths.insert(removal.path.clone(), entry);
        written.push(removal.path.clone());
    }
    written
}

/// Reads again the write tokens of `paths` in `rest`, which a transaction
/// just wrote; false when one holds another stream than `rest` removes.
async fn read_tokens(
    shared: &Arc<Shared>,
    rest: &mut State,
    paths: &[String],
) -> Result<bool, StreamError> {
    for path in paths {
        let item = shared
            .table
            .get_item(shared.keys.path(path))
            .await
            .map_err(|e| table_error("reading a released source again", e))?;
        let Some(item) = item else {
            return Ok(false);
        };
        let read = path_item::decode(&item)?;
        let removal = rest.removed.iter().find(|r| r.path == *path);
        let same = match (&read.state, removal) {
            (PathState::Stream(stream), Some(removal)) => stream.id == removal.id,
            _ => false,
        };
        match rest.paths.get_mut(path) {
            Some(entry) if same => entry.token = Some(read.token),
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// The paths whose removal the call decides, kept for the last
/// transaction: a stream a delete removes (not retired before, and
/// tombstoned now), and every source up its chain that the unit removes
/// with it.
fn decided(state: &State) -> HashSet<String> {
    let mut last = HashSet::new();
    let removed = |path: &str| state.removed.iter().find(|r| r.path == path);
    for removal in &state.removed {
        let tombstoned = state
            .paths
            .get(&removal.path)
            .is_some_and(|entry| matches!(entry.state, PathState::Tombstone(_)));
        if removal.retired || !tombstoned {
            continue;
        }
        let mut next = Some(removal);
        while let Some(removal) = next {
            if !last.insert(removal.path.clone()) {
                break;
            }
            next = removal.source.as_deref().and_then(removed);
        }
    }
    last
}

/// Moves out of `state` the next step: removals of dead streams none of
/// whose forks the unit still removes, as many as one transaction holds
/// (a fork and its source may go in one step, the fork taken first).
fn next_step(state: &mut State, last: &HashSet<String>, room: usize) -> State {
    let mut step = State::default();
    let mut items = 0;
    loop {
        let mut took = false;
        let mut index = 0;
        while index < state.removed.len() {
            let removal = &state.removed[index];
            let cost = cost(state, removal);
            let is_source = state
                .removed
                .iter()
                .any(|r| r.source.as_deref() == Some(removal.path.as_str()));
            // A fork listed in its source's item itself (an older table)
            // has no reference to delete: it goes with its source's write.
            let listed_in_source =
                removal.source.is_some() && reference_of(state, removal).is_none();
            // A path the unit writes a new stream at (a create meeting a
            // dead one) is the call's own write.
            if !gone(state, &removal.path)
                || last.contains(&removal.path)
                || is_source
                || listed_in_source
                || items + cost > room
            {
                index += 1;
                continue;
            }
            take(state, index, &mut step);
            items += cost;
            took = true;
        }
        if !took {
            return step;
        }
    }
}

/// Whether the unit leaves nothing at `path` (removed, or tombstoned).
fn gone(state: &State, path: &str) -> bool {
    state
        .paths
        .get(path)
        .is_some_and(|entry| matches!(entry.state, PathState::Absent | PathState::Tombstone(_)))
}

/// The items the removal at `removal` writes: its path item, directory
/// and garbage entries, fork reference and sweep entries.
fn cost(state: &State, removal: &Removal) -> usize {
    let entries = state
        .sweep_entries
        .values()
        .filter(|path| path.as_deref() == Some(removal.path.as_str()))
        .count();
    3 + usize::from(reference_of(state, removal).is_some()) + entries
}

/// Moves the removal at `index` of `state`, with every item it writes,
/// into `step`.
fn take(state: &mut State, index: usize, step: &mut State) {
    let reference = reference_of(state, &state.removed[index]);
    let removal = state.removed.remove(index);
    if let Some(entry) = state.paths.remove(&removal.path) {
        step.paths.insert(removal.path.clone(), entry);
    }
    if let Some(live) = state.directory.remove(&removal.path) {
        step.directory.insert(removal.path.clone(), live);
    }
    if let Some(reference) = reference {
        state.fork_refs.remove(&reference);
        step.fork_refs.insert(reference, false);
    }
    let entries: Vec<_> = state
        .sweep_entries
        .iter()
        .filter(|(_, path)| path.as_deref() == Some(removal.path.as_str()))
        .map(|(key, _)| key.clone())
        .collect();
    for key in entries {
        if let Some(path) = state.sweep_entries.remove(&key) {
            step.sweep_entries.insert(key, path);
        }
    }
    step.removed.push(removal);
}

/// The key of the fork reference to delete with `removal`, if any: the
/// one the unit deletes, or, for a fork whose source the unit removes
/// too (before it: the engine removes sources first), its reference in
/// that source's partition, which its step must delete since the source
/// stays until a later one.
fn reference_of(state: &State, removal: &Removal) -> Option<(Arc<str>, String)> {
    let deleted = state
        .fork_refs
        .iter()
        .find(|((_, fork), live)| *fork == removal.path && !**live)
        .map(|(key, _)| key.clone());
    deleted.or_else(|| {
        let source = removal.source.as_deref()?;
        let source = state.removed.iter().find(|r| r.path == source)?;
        Some((Arc::clone(&source.id), removal.path.clone()))
    })
}
