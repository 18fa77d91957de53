//! Planning one row's write: fold every contributing (source, instance) in
//! order into the row as read, each from its own checkpoint, filling gaps
//! from the event store.

use super::core::{Fold, OnFailure, Pending, RowCore, RowWork, Source};
use super::slots::read_counter;
use super::step::Step;
use super::InstanceOutcome;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::Item;

/// What one row's write will be.
pub(crate) struct RowPlan<M> {
    /// The row as read, decoded (`None`: there was no row).
    pub read_state: Option<M>,
    /// The state after every instance's events.
    pub state: M,
    /// The revision as read, and the one the write sets (when declared).
    pub revision_read: Option<u64>,
    pub revision: Option<u64>,
    /// The row's checkpoint slots with every instance that moved recorded.
    pub slots: Item,
    /// One outcome per instance, in fold order, and its checkpoint as read.
    pub instances: Vec<InstanceOutcome>,
    pub checkpoints_read: Vec<u64>,
    /// Whether there is anything to write: some checkpoint moved, and the
    /// row exists or an event was applied (rejections alone create no row).
    pub write: bool,
}

impl<M> RowPlan<M> {
    /// The instance outcomes as they stand when the write did not happen:
    /// checkpoints as read, nothing applied.
    pub(crate) fn unwritten(self) -> Vec<InstanceOutcome> {
        let mut instances = self.instances;
        for (outcome, checkpoint) in instances.iter_mut().zip(self.checkpoints_read) {
            outcome.checkpoint = checkpoint;
            outcome.applied.clear();
            outcome.rejected.clear();
            outcome.skipped.clear();
        }
        instances
    }
}

/// One event to fold, as the instance's history presents it.
enum Planned<M> {
    /// An event of this row.
    Fold(Fold<M>),
    /// An event of another row, or of none: considered, not folded.
    Elsewhere,
}

impl<M, K> RowCore<M, K>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    K: serde::Serialize + Send + Sync + 'static,
{
    /// Plans the write of a row from the row as read. An error fails the
    /// whole row (it does not decode, its revision cannot move).
    pub(crate) async fn plan(
        &self,
        work: &RowWork<M, K>,
        read: Option<&Item>,
    ) -> Result<RowPlan<M>, Error> {
        let read_state = read
            .map(|item| self.read_model.decode(item.clone()))
            .transpose()?;
        let revision_read = match (&self.revision, read) {
            (Some(field), Some(item)) => read_counter(item, field, &work.id)?,
            _ => None,
        };
        let revision = match &self.revision {
            None => None,
            Some(_) => Some(revision_read.unwrap_or(0).checked_add(1).ok_or_else(|| {
                Error::CounterOverflow {
                    counter: format!("the revision of row {}", work.id),
                }
            })?),
        };
        let mut state = match &read_state {
            Some(state) => state.clone(),
            None => (self.initial)(&work.row),
        };
        let mut slots = read.cloned().unwrap_or_default();
        let (mut instances, mut checkpoints_read) = (Vec::new(), Vec::new());
        let (mut moved, mut applied) = (false, false);
        for ((source, instance), events) in &work.instances {
            let src = &self.sources[*source];
            let mut outcome = InstanceOutcome::new(src.name(), instance.clone(), 0);
            let checkpoint = match self.slots.read(&slots, src.name(), instance, &work.id) {
                Ok(checkpoint) => checkpoint.unwrap_or(0),
                Err(e) => {
                    outcome.failure = Some(e);
                    checkpoints_read.push(0);
                    instances.push(outcome);
                    continue;
                }
            };
            outcome.checkpoint = checkpoint;
            checkpoints_read.push(checkpoint);
            let before = state.clone();
            let folded = self
                .fold_instance(
                    work,
                    src.as_ref(),
                    *source,
                    instance,
                    events,
                    &mut state,
                    &mut outcome,
                )
                .await;
            if let Err(e) = folded {
                outcome.failure = Some(e);
                if self.on_failure == OnFailure::DropInstance {
                    state = before;
                    outcome.applied.clear();
                    outcome.rejected.clear();
                    outcome.skipped.clear();
                    outcome.checkpoint = checkpoint;
                }
            }
            if outcome.checkpoint > checkpoint {
                self.slots
                    .record(&mut slots, src.name(), instance, outcome.checkpoint);
                moved = true;
            }
            applied |= !outcome.applied.is_empty();
            instances.push(outcome);
        }
        Ok(RowPlan {
            write: moved && (read.is_some() || applied),
            read_state,
            state,
            revision_read,
            revision,
            slots,
            instances,
            checkpoints_read,
        })
    }

    /// Folds one instance's events above its checkpoint into `state`, in
    /// version order, recording what happened in `outcome`. Stops at the
    /// first failure that `terminal` does not accept.
    #[allow(clippy::too_many_arguments)]
    async fn fold_instance(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        source: usize,
        instance: &StreamId,
        events: &[Pending<M>],
        state: &mut M,
        outcome: &mut InstanceOutcome,
    ) -> Result<(), Error> {
        let checkpoint = outcome.checkpoint;
        let mut already: Vec<u64> = events
            .iter()
            .map(|e| e.version)
            .filter(|v| *v <= checkpoint)
            .collect();
        already.sort_unstable();
        already.dedup();
        outcome.already_applied = already;
        let steps = self
            .steps_above(work, src, source, instance, checkpoint, events)
            .await?;
        for (version, step) in steps {
            let fold = match step? {
                Planned::Elsewhere => {
                    outcome.checkpoint = version; // considered: not this row's
                    continue;
                }
                Planned::Fold(fold) => fold,
            };
            match fold(state.clone()) {
                Ok(Step::Next(next)) => {
                    *state = next;
                    outcome.applied.push(version);
                    outcome.checkpoint = version;
                }
                Ok(Step::Skip) => outcome.skipped.push(version),
                Ok(Step::Remove) => {
                    return Err(Error::InvalidArgument(format!(
                        "evolve asked to remove row {} of projection {}, which declares no removal",
                        work.id, self.name
                    )))
                }
                Err(e) if src.is_terminal(&e) => {
                    outcome.rejected.push(version);
                    outcome.checkpoint = version;
                }
                Err(e) => {
                    return Err(Error::Evolve {
                        instance: instance.to_string(),
                        version,
                        source: e.into_inner(),
                    })
                }
            }
        }
        Ok(())
    }

    /// The events to fold above `checkpoint`, in version order: the batch's
    /// own when they continue the checkpoint without a gap (nothing read),
    /// otherwise every version up to the batch's last, read from the store
    /// and checked complete.
    #[allow(clippy::type_complexity)]
    async fn steps_above(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        source: usize,
        instance: &StreamId,
        checkpoint: u64,
        events: &[Pending<M>],
    ) -> Result<Vec<(u64, Result<Planned<M>, Error>)>, Error> {
        let mut pending: Vec<&Pending<M>> =
            events.iter().filter(|e| e.version > checkpoint).collect();
        pending.sort_by_key(|e| e.version);
        pending.dedup_by_key(|e| e.version);
        let Some(last) = pending.last().map(|e| e.version) else {
            return Ok(Vec::new());
        };
        // Versions above the checkpoint, so `version - checkpoint` is at least 1.
        let contiguous = pending
            .iter()
            .enumerate()
            .all(|(i, e)| e.version - checkpoint == i as u64 + 1);
        if contiguous {
            return Ok(pending
                .into_iter()
                .map(|e| (e.version, Ok(Planned::Fold(e.fold.clone()))))
                .collect());
        }
        let from = checkpoint + 1;
        let history = src.history(instance, from, last).await?;
        // Every version from the checkpoint up to the batch's last must be
        // there: a shorter history is never folded.
        let returned: std::collections::BTreeSet<u64> = history.iter().map(|i| i.version).collect();
        let missing: Vec<u64> = (from..=last)
            .filter(|v| !returned.contains(v))
            .take(10)
            .collect();
        if !missing.is_empty() || history.len() as u64 != last - checkpoint {
            return Err(Error::HistoryIncomplete {
                instance: instance.to_string(),
                from,
                to: last,
                missing,
            });
        }
        Ok(history
            .into_iter()
            .map(|item| (item.version, self.step_of(work, src, source, item)))
            .collect())
    }

    /// A stored event as a step of this row: folded when it names this row.
    fn step_of(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        source: usize,
        item: crate::event_item::EventItem,
    ) -> Result<Planned<M>, Error> {
        let prepared = src.prepare(source, item)?;
        let Some(row) = prepared.row else {
            return Ok(Planned::Elsewhere);
        };
        let key = self.read_model.key(&row)?;
        Ok(
            if super::core::row_id(self.read_model.table().schema(), &key) == work.id {
                Planned::Fold(prepared.fold)
            } else {
                Planned::Elsewhere
            },
        )
    }
}
