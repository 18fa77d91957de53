//! Planning one row's write: fold every contributing (source, instance) in
//! order into the row as read, each from its own checkpoint, filling gaps
//! from the event store (`fold` mode) or taking the newest event (`latest`
//! mode).

use super::core::{Bound, OnFailure, Pending, ReadRow, RowCore, RowWork, Source};
use super::effects::{EffectEvent, PendingEffect};
use super::limits::{Limits, ITEM_LIMIT};
use super::options::Mode;
use super::slots::read_counter;
use super::step::Step;
use super::InstanceOutcome;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::Item;

/// What one row's write will be.
pub(crate) struct RowPlan<M> {
    /// The row as read, decoded (`None`: there was no row, or a tombstone).
    pub read_state: Option<M>,
    /// The state after every instance's events.
    pub state: M,
    /// Whether the last applied event removed the row.
    pub removed: bool,
    /// The revision as read, and the one the write sets (when declared).
    pub revision_read: Option<u64>,
    pub revision: Option<u64>,
    /// The row's checkpoint slots with every instance that moved recorded.
    pub slots: Item,
    /// One outcome per instance, in fold order, and its checkpoint as read.
    pub instances: Vec<InstanceOutcome>,
    pub checkpoints_read: Vec<u64>,
    /// The outbox effects of the applied events, in fold order.
    pub effects: Vec<PendingEffect>,
    /// Whether there is anything to write: some checkpoint moved, and the
    /// row exists or an event was applied (rejections alone create no row).
    pub write: bool,
    /// The fold stopped at the limits' cap: events wait for the next write.
    pub cut: bool,
    /// An instance without a checkpoint in the row got one.
    pub new_slots: bool,
}

impl<M> RowPlan<M> {
    /// The instance outcomes as they stand when the write did not happen:
    /// checkpoints as read, nothing applied.
    pub(crate) fn unwritten(self) -> Vec<InstanceOutcome> {
        let mut instances = self.instances;
        for (outcome, checkpoint) in instances.iter_mut().zip(self.checkpoints_read) {
            outcome.checkpoint = checkpoint;
            clear(outcome);
        }
        instances
    }
}

fn clear(outcome: &mut InstanceOutcome) {
    outcome.applied.clear();
    outcome.rejected.clear();
    outcome.skipped.clear();
    outcome.superseded.clear();
    outcome.after_removal.clear();
}

/// One event to fold, as the instance's history presents it.
enum Planned<M> {
    /// An event of this row.
    Fold(Bound<M>),
    /// An event of another row, or of none: considered, not folded.
    Elsewhere,
}

/// The row's state as the fold goes.
struct Folding<M> {
    state: M,
    removed: bool,
    /// How many removals were applied.
    removals: usize,
    effects: Vec<PendingEffect>,
    /// The instance being folded had applied its events up to this
    /// version before a rebuild: their effects were committed then, and
    /// are not committed again.
    committed_up_to: u64,
    /// How many applied events produced effects, and how many may.
    effectful: usize,
    cap: Option<usize>,
    /// The fold stopped at the cap: the rest waits for the next write.
    cut: bool,
}

/// The first instance of a row that failed in a write, which the instances
/// after it wait for when the projection declares removal.
struct Failed {
    instance: String,
    cause: &'static str,
    retryable: bool,
}

impl Failed {
    fn of(instance: &StreamId, error: &Error) -> Self {
        Self {
            instance: instance.to_string(),
            cause: error.code(),
            retryable: error.is_retryable(),
        }
    }

    /// The failure of an instance that waits for this one.
    fn deferring(&self, instance: &StreamId) -> Error {
        Error::Deferred {
            instance: instance.to_string(),
            failed: self.instance.clone(),
            cause: self.cause,
            retryable: self.retryable,
        }
    }
}

/// The versions of a batch at or below an instance's checkpoint: delivered
/// again.
fn already_applied<M>(events: &[Pending<M>], checkpoint: u64) -> Vec<u64> {
    let mut already: Vec<u64> = events
        .iter()
        .map(|e| e.version)
        .filter(|v| *v <= checkpoint)
        .collect();
    already.sort_unstable();
    already.dedup();
    already
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
        read: &ReadRow,
        limits: &Limits,
    ) -> Result<RowPlan<M>, Error> {
        let read_state = read
            .row()
            .map(|item| self.read_model.decode(item.clone()))
            .transpose()?;
        let revision_read = match (&self.revision, read.item()) {
            (Some(revision), Some(item)) => read_counter(item, &revision.field, &work.id)?,
            _ => None,
        };
        let revision = match &self.revision {
            None => None,
            Some(revision) => Some(match revision_read {
                None => revision.initial,
                Some(read) => read.checked_add(1).ok_or_else(|| Error::CounterOverflow {
                    counter: format!("the revision of row {}", work.id),
                })?,
            }),
        };
        let mut row = self.folding(work, read, &read_state, limits);
        let mut slots = read.item().cloned().unwrap_or_default();
        let (mut instances, mut checkpoints_read) = (Vec::new(), Vec::new());
        let (mut moved, mut applied, mut new_slots) = (false, false, false);
        // Events recorded on a removed row: its tombstone is written again.
        let mut recorded = false;
        // With removal declared, the first failed instance: the instances
        // after it in fold order wait for it.
        let holds_back = self.removal.is_some() && self.on_failure == OnFailure::DropInstance;
        let mut failed: Option<Failed> = None;
        for ((source, instance), events) in &work.instances {
            let src = &self.sources[*source];
            let mut outcome = InstanceOutcome::new(src.name(), instance.clone(), 0);
            let read_slot = self
                .slots
                .read(&slots, src.name(), instance, &work.id)
                .and_then(|checkpoint| match (checkpoint, limits.refuse_new) {
                    (None, Some(size)) => Err(Error::LimitExceeded {
                        row: work.id.clone(),
                        what: format!(
                            "the row item with a checkpoint for stream instance {instance} of source {}, which it has none of yet",
                            src.name()
                        ),
                        size,
                        limit: ITEM_LIMIT,
                    }),
                    (checkpoint, _) => Ok(checkpoint),
                });
            let is_new = matches!(read_slot, Ok(None));
            let checkpoint = match read_slot {
                Ok(checkpoint) => checkpoint.unwrap_or(0),
                Err(e) => {
                    // An instance refused for a full row never applies: no
                    // order to keep, nothing to wait for.
                    let refused = matches!(e, Error::LimitExceeded { .. });
                    if holds_back && failed.is_none() && !refused {
                        failed = Some(Failed::of(instance, &e));
                    }
                    outcome.failure = Some(e);
                    checkpoints_read.push(0);
                    instances.push(outcome);
                    continue;
                }
            };
            outcome.checkpoint = checkpoint;
            outcome.already_applied = already_applied(events, checkpoint);
            checkpoints_read.push(checkpoint);
            if let Some(first) = &failed {
                outcome.failure = Some(first.deferring(instance));
                instances.push(outcome);
                continue;
            }
            if row.cut {
                // Past the write's limits: the next write takes it.
                instances.push(outcome);
                continue;
            }
            row.committed_up_to = match read {
                ReadRow::Cleared { before, .. } => self
                    .slots
                    .read(before, src.name(), instance, &work.id)
                    .ok()
                    .flatten()
                    .unwrap_or(0),
                _ => 0,
            };
            let (before, removed_before, removals_before, effects_before) = (
                row.state.clone(),
                row.removed,
                row.removals,
                row.effects.len(),
            );
            let folded = self
                .fold_instance(
                    work,
                    src.as_ref(),
                    *source,
                    instance,
                    events,
                    &mut row,
                    &mut outcome,
                )
                .await;
            if let Err(e) = folded {
                if holds_back {
                    failed = Some(Failed::of(instance, &e));
                }
                outcome.failure = Some(e);
                if self.on_failure == OnFailure::DropInstance {
                    row.state = before;
                    row.removed = removed_before;
                    row.removals = removals_before;
                    row.effects.truncate(effects_before);
                    clear(&mut outcome);
                    outcome.checkpoint = checkpoint;
                }
            }
            if outcome.checkpoint > checkpoint {
                self.slots
                    .record(&mut slots, src.name(), instance, outcome.checkpoint);
                moved = true;
                new_slots |= is_new;
            }
            applied |= !outcome.applied.is_empty();
            recorded |= !outcome.after_removal.is_empty();
            instances.push(outcome);
        }
        if let (Some(first), true) = (&failed, row.removals > 0) {
            // A removal before the failed instance: nothing of the row is
            // written, so the retry folds the removal and the failed
            // instance together, in order.
            for (outcome, checkpoint) in instances.iter_mut().zip(&checkpoints_read) {
                if outcome.failure.is_none() {
                    outcome.failure = Some(first.deferring(&outcome.instance));
                    clear(outcome);
                    outcome.checkpoint = *checkpoint;
                }
            }
            row = self.folding(work, read, &read_state, limits);
            slots = read.item().cloned().unwrap_or_default();
            (moved, applied, new_slots, recorded) = (false, false, false, false);
        }
        Ok(RowPlan {
            write: moved && (read.row().is_some() || applied || recorded),
            read_state,
            state: row.state,
            removed: row.removed,
            revision_read,
            revision,
            slots,
            instances,
            checkpoints_read,
            effects: row.effects,
            cut: row.cut,
            new_slots,
        })
    }

    /// The fold's start: the row as read, or `initial` when there is none.
    fn folding(
        &self,
        work: &RowWork<M, K>,
        read: &ReadRow,
        read_state: &Option<M>,
        limits: &Limits,
    ) -> Folding<M> {
        Folding {
            state: match read_state {
                Some(state) => state.clone(),
                None => (self.initial)(&work.row),
            },
            // A tombstone is a removed row until an event starts it again.
            removed: matches!(read, ReadRow::Tombstone(_)),
            removals: 0,
            effects: Vec::new(),
            committed_up_to: 0,
            effectful: 0,
            cap: limits.cap,
            cut: false,
        }
    }

    /// Folds one instance's events above its checkpoint into `row`,
    /// recording what happened in `outcome`. Stops at the first failure
    /// that `terminal` does not accept.
    #[allow(clippy::too_many_arguments)]
    async fn fold_instance(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        source: usize,
        instance: &StreamId,
        events: &[Pending<M>],
        row: &mut Folding<M>,
        outcome: &mut InstanceOutcome,
    ) -> Result<(), Error> {
        let checkpoint = outcome.checkpoint;
        if src.mode() == Mode::Latest {
            return self.fold_latest(work, src, instance, events, row, outcome);
        }
        let steps = self
            .steps_above(work, src, source, instance, checkpoint, events)
            .await?;
        for (version, step) in steps {
            let bound = match step? {
                // Another row's event: covered by the checkpoint of a later
                // applied or rejected event of this row, not on its own (the
                // checkpoint stops at the last applied or rejected event, so
                // an instance whose events here were all skipped records
                // nothing).
                Planned::Elsewhere => continue,
                Planned::Fold(bound) => bound,
            };
            match self.fold_one(work, src, instance, version, &bound, row)? {
                Decided::Applied => {
                    outcome.applied.push(version);
                    outcome.checkpoint = version;
                }
                Decided::Skipped => outcome.skipped.push(version),
                Decided::Rejected => {
                    outcome.rejected.push(version);
                    outcome.checkpoint = version;
                }
                Decided::AfterRemoval => {
                    outcome.after_removal.push(version);
                    outcome.checkpoint = version;
                }
                Decided::Cut => break,
            }
        }
        Ok(())
    }

    /// `latest` mode: the newest event above the checkpoint that applies,
    /// trying older ones past rejections and skips; nothing is read.
    fn fold_latest(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        instance: &StreamId,
        events: &[Pending<M>],
        row: &mut Folding<M>,
        outcome: &mut InstanceOutcome,
    ) -> Result<(), Error> {
        let mut pending: Vec<&Pending<M>> = events
            .iter()
            .filter(|e| e.version > outcome.checkpoint)
            .collect();
        pending.sort_by_key(|e| std::cmp::Reverse(e.version));
        pending.dedup_by_key(|e| e.version);
        let mut newest_rejected = None;
        for (at, event) in pending.iter().enumerate() {
            match self.fold_one(work, src, instance, event.version, &event.bound, row)? {
                Decided::Applied => {
                    outcome.applied.push(event.version);
                    outcome.checkpoint = newest_rejected.unwrap_or(event.version);
                    outcome.superseded =
                        pending[at + 1..].iter().rev().map(|e| e.version).collect();
                    return Ok(());
                }
                Decided::Skipped => outcome.skipped.insert(0, event.version),
                Decided::Rejected => {
                    outcome.rejected.insert(0, event.version);
                    newest_rejected.get_or_insert(event.version);
                }
                // Nothing of the instance in this write: never an older
                // event in place of the newest.
                Decided::Cut => {
                    clear(outcome);
                    return Ok(());
                }
                Decided::AfterRemoval => {
                    outcome.after_removal.push(event.version);
                    outcome.checkpoint = newest_rejected.unwrap_or(event.version);
                    outcome.superseded =
                        pending[at + 1..].iter().rev().map(|e| e.version).collect();
                    return Ok(());
                }
            }
        }
        if let Some(version) = newest_rejected {
            outcome.checkpoint = version;
        }
        Ok(())
    }

    /// Folds one event into `row`.
    fn fold_one(
        &self,
        work: &RowWork<M, K>,
        src: &dyn Source<M, K>,
        instance: &StreamId,
        version: u64,
        bound: &Bound<M>,
        row: &mut Folding<M>,
    ) -> Result<Decided, Error> {
        let next = match (bound.fold)(row.state.clone()) {
            Ok(Step::Next(next)) => Some(next),
            Ok(Step::Skip) => return Ok(Decided::Skipped),
            Ok(Step::Remove) if self.removal.is_some() => None,
            Ok(Step::Remove) => {
                return Err(Error::InvalidArgument(format!(
                    "evolve asked to remove row {} of projection {}, which declares no removal",
                    work.id, self.name
                )))
            }
            Err(e) if src.is_terminal(&e) => return Ok(Decided::Rejected),
            Err(e) => {
                return Err(Error::Evolve {
                    instance: instance.to_string(),
                    version,
                    source: e.into_inner(),
                })
            }
        };
        // What would start a removed row again, from a source that may
        // not: recorded, not applied (a skip or a rejection is decided as
        // anywhere, so a redelivery decides it the same way).
        if self.may_not_restart(src, row) {
            return Ok(Decided::AfterRemoval);
        }
        let committed = version <= row.committed_up_to;
        if let (Some(effects), false) = (&bound.effects, committed) {
            let payloads = effects(next.as_ref())?;
            if !payloads.is_empty() {
                if row.cap == Some(row.effectful) {
                    row.cut = true;
                    return Ok(Decided::Cut);
                }
                row.effectful += 1;
            }
            for payload in payloads {
                row.effects.push(PendingEffect {
                    source: src.name().to_owned(),
                    stream_id: instance.clone(),
                    version,
                    payload,
                });
            }
        }
        match next {
            Some(next) => {
                row.state = next;
                row.removed = false;
            }
            None => {
                // A later event starts the row again from `initial`.
                row.state = (self.initial)(&work.row);
                row.removed = true;
                row.removals += 1;
            }
        }
        Ok(Decided::Applied)
    }

    /// Whether the row is removed and `src` may not start it again: only
    /// when the projection restricts restarts to some sources.
    fn may_not_restart(&self, src: &dyn Source<M, K>, row: &Folding<M>) -> bool {
        row.removed && self.restarts_restricted && !src.restarts_removed_rows()
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
                .map(|e| (e.version, Ok(Planned::Fold(e.bound.clone()))))
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
                Planned::Fold(prepared.bound)
            } else {
                Planned::Elsewhere
            },
        )
    }
}

/// What became of one event.
enum Decided {
    Applied,
    Skipped,
    Rejected,
    /// Not folded: the write is full, the next one takes it.
    Cut,
    /// On a removed row, from a source that may not start it again:
    /// recorded in the checkpoint, not applied.
    AfterRemoval,
}

/// The outbox's view of an applied event: used by sources to bind effects.
pub(crate) fn effect_event<'a>(
    source: &'a str,
    stream_id: &'a StreamId,
    version: u64,
    event_type: &'a str,
    data: &'a crate::item::AttributeValue,
) -> EffectEvent<'a> {
    EffectEvent {
        source,
        stream_id,
        version,
        event_type,
        data,
    }
}
