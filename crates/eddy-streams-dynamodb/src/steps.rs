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
//! itself decides (the stream a delete removes, and the sources it
//! releases) is always in the last transaction, so the call succeeds or
//! fails as a whole. A step that loses a race ends the call as a lost
//! race; the engine runs it again and finds less to remove.

use std::collections::HashSet;
use std::sync::Arc;

use eddy_streams::backend::Commit;
use eddy_streams::StreamError;

use crate::backend::Shared;
use crate::commit::{item_count, transact, MAX_ITEMS};
use crate::path_item::PathState;
use crate::unit::{Removal, State};

/// Commits the removals of `state` that may go first, in steps, until
/// the rest fits one transaction or nothing more may go first. A
/// [`Commit::Conflict`] when a step lost a race.
pub(crate) async fn remove_in_steps(
    shared: &Arc<Shared>,
    state: &mut State,
) -> Result<Commit, StreamError> {
    let last = decided(state);
    while item_count(state) > MAX_ITEMS {
        let step = next_step(state, &last);
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
/// whose forks the unit still removes, as many as one transaction holds.
fn next_step(state: &mut State, last: &HashSet<String>) -> State {
    let sources: HashSet<String> = state
        .removed
        .iter()
        .filter_map(|r| r.source.clone())
        .collect();
    let mut step = State::default();
    let mut items = 0;
    let mut index = 0;
    while index < state.removed.len() {
        let removal = &state.removed[index];
        let reference = reference_of(state, removal);
        let entries: Vec<_> = state
            .sweep_entries
            .iter()
            .filter(|(_, path)| path.as_deref() == Some(removal.path.as_str()))
            .map(|(key, _)| key.clone())
            .collect();
        let cost = 3 + usize::from(reference.is_some()) + entries.len();
        // A fork listed in its source's item itself (an older table) has
        // no reference to delete: it goes with its source's write.
        let listed_in_source = removal.source.is_some() && reference.is_none();
        // A path the unit writes a new stream at (a create meeting a dead
        // one) is the call's own write.
        let gone = state.paths.get(&removal.path).is_some_and(|entry| {
            matches!(entry.state, PathState::Absent | PathState::Tombstone(_))
        });
        if !gone
            || last.contains(&removal.path)
            || sources.contains(&removal.path)
            || listed_in_source
            || items + cost > MAX_ITEMS
        {
            index += 1;
            continue;
        }
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
        for key in entries {
            if let Some(path) = state.sweep_entries.remove(&key) {
                step.sweep_entries.insert(key, path);
            }
        }
        step.removed.push(removal);
        items += cost;
    }
    step
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
