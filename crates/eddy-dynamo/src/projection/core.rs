//! The row core: applies prepared events to read-model rows, several rows
//! at once. Per row it reads the row once, folds every contributing
//! (source, stream instance) in a fixed order (source declaration order,
//! then stream id, then version; see `fold.rs`), and writes the row once,
//! guarded by its revision or its checkpoints. A lost race folds again from
//! the row the failed condition returned, after a jittered backoff. A
//! single-source projection is the one-source case.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use super::effects::EffectCommit;
use super::fold::RowPlan;
use super::limits::Limits;
use super::options::{Mode, Removal, Revision};
use super::repair::Repair;
use super::slots::CheckpointSlots;
use super::step::{EvolveError, Step};
use super::write::{row_item, write_row, Fit};
use super::{RecordFailure, RowOutcome};
use crate::entity::Entity;
use crate::error::{Error, TableError};
use crate::event_item::{EventItem, StreamId, StreamIdentity};
use crate::item::{AttributeValue, Item};
use crate::key_schema::TableSchema;
use crate::outbox::Deliver;
use crate::tombstone::is_tombstone;

/// How an event folds into a row's state: `evolve` with the event bound.
pub(crate) type Fold<M> = Arc<dyn Fn(M) -> Result<Step<M>, EvolveError> + Send + Sync>;

/// The encoded outbox effects of an applied event, given the row's next
/// state (`None`: the event removed the row), with the event bound.
pub(crate) type Effects<M> =
    Arc<dyn Fn(Option<&M>) -> Result<Vec<AttributeValue>, Error> + Send + Sync>;

/// An event bound into what the core does with it.
pub(crate) struct Bound<M> {
    pub fold: Fold<M>,
    /// Present when the projection has an outbox.
    pub effects: Option<Effects<M>>,
}

impl<M> Clone for Bound<M> {
    fn clone(&self) -> Self {
        Self {
            fold: Arc::clone(&self.fold),
            effects: self.effects.clone(),
        }
    }
}

/// A decoded event of one source, ready to fold into whichever row it names.
pub(crate) struct Prepared<M, K> {
    /// The source's position in the projection's declaration.
    pub source: usize,
    pub instance: StreamId,
    pub version: u64,
    /// The row it contributes to, or `None` for no row.
    pub row: Option<K>,
    pub bound: Bound<M>,
}

/// One source of a projection, as the core sees it.
#[async_trait]
pub(crate) trait Source<M, K>: Send + Sync {
    /// Its name (where its checkpoints are kept, what outcomes report).
    fn name(&self) -> &str;
    /// How its events fold.
    fn mode(&self) -> Mode {
        Mode::Fold
    }
    /// Decodes a stored event of its stream and names its row.
    fn prepare(&self, source: usize, item: EventItem) -> Result<Prepared<M, K>, Error>;
    /// The stored events of an instance with versions `from..=to` (gap
    /// fill).
    async fn history(
        &self,
        instance: &StreamId,
        from: u64,
        to: u64,
    ) -> Result<Vec<EventItem>, Error>;
    /// Whether an `evolve` failure is accepted: the event is rejected and
    /// the checkpoint moves past it.
    fn is_terminal(&self, error: &EvolveError) -> bool;
    /// Whether it reads this stream.
    fn reads(&self, stream: &StreamIdentity) -> bool;
    /// Whether its events may start a removed row again when the
    /// projection restricts that to some sources (see
    /// `RowCore::restarts_restricted`).
    fn restarts_removed_rows(&self) -> bool {
        false
    }
}

/// What an instance's non-terminal failure does to its other events in the
/// write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFailure {
    /// The events before the failed one are written, the checkpoint stops
    /// before it (single-source projections).
    KeepPrefix,
    /// None of the instance's events are written, its checkpoint stays
    /// (multi-source projections: one instance's failure is its own).
    DropInstance,
}

/// A projection's rows, sources and guards.
pub(crate) struct RowCore<M, K> {
    pub name: String,
    pub read_model: Entity<M>,
    pub initial: Arc<dyn Fn(&K) -> M + Send + Sync>,
    pub sources: Vec<Arc<dyn Source<M, K>>>,
    pub slots: Arc<dyn CheckpointSlots>,
    pub revision: Option<Revision>,
    pub removal: Option<Removal>,
    /// Only the sources that say so may start a removed row again; the
    /// others' events on it are recorded in its checkpoints and skipped.
    /// Off (the spec's rule: any later event starts it again) unless a
    /// source declared it.
    pub restarts_restricted: bool,
    /// Where applied events' effects are committed (the outbox).
    pub outbox: Option<Arc<dyn EffectCommit>>,
    pub on_failure: OnFailure,
    pub max_attempts: u32,
    /// Rows applied at once: their writes share group commits (embedded
    /// SQLite) and overlap their round trips (DynamoDB).
    pub concurrency: usize,
}

/// An event of a row's instance: its batch position (`None` for one read by
/// gap fill), version and fold.
pub(crate) struct Pending<M> {
    pub index: Option<usize>,
    pub version: u64,
    pub bound: Bound<M>,
}

/// The events of one row, by (source, instance) in fold order.
pub(crate) struct RowWork<M, K> {
    /// The row's table key, and its printable form.
    pub key: Item,
    pub id: String,
    pub row: K,
    pub instances: BTreeMap<(usize, StreamId), Vec<Pending<M>>>,
}

impl<M, K> RowCore<M, K>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    K: serde::Serialize + Send + Sync + 'static,
{
    /// Groups prepared events by row (rows in first-seen order) and applies
    /// each row; reports the batch positions that were not applied. With
    /// `deliver`, each row whose write enqueued effects has them delivered
    /// right after its write.
    pub(crate) async fn apply(
        &self,
        prepared: Vec<(Option<usize>, Prepared<M, K>)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        let mut rows: Vec<RowWork<M, K>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        let mut failures = Vec::new();
        // The previous event's key values and row: consecutive events of
        // one row compose its key once.
        let mut last: Option<(Item, usize)> = None;
        for (index, event) in prepared {
            let Some(row) = event.row else { continue };
            let values = match self.read_model.composite_values(&row) {
                Ok(values) => values,
                Err(e) => {
                    failures.extend(index.map(|i| RecordFailure::new(i, &e)));
                    continue;
                }
            };
            let at = match &last {
                Some((known, at)) if *known == values => *at,
                _ => {
                    let key = match self.read_model.key_of_item(&values) {
                        Ok(key) => key,
                        Err(e) => {
                            failures.extend(index.map(|i| RecordFailure::new(i, &e)));
                            continue;
                        }
                    };
                    let id = row_id(self.read_model.table().schema(), &key);
                    let at = match by_key.get(&id) {
                        Some(at) => *at,
                        None => {
                            by_key.insert(id.clone(), rows.len());
                            rows.push(RowWork {
                                key,
                                id,
                                row,
                                instances: BTreeMap::new(),
                            });
                            rows.len() - 1
                        }
                    };
                    last = Some((values, at));
                    at
                }
            };
            rows[at]
                .instances
                .entry((event.source, event.instance))
                .or_default()
                .push(Pending {
                    index,
                    version: event.version,
                    bound: event.bound,
                });
        }
        let applied: Vec<_> = futures::stream::iter(
            rows.into_iter()
                .map(|row| self.apply_delivering(row, deliver)),
        )
        .buffered(self.concurrency.max(1))
        .collect()
        .await;
        let mut outcomes = Vec::with_capacity(applied.len());
        for (outcome, mut failed) in applied {
            outcomes.push(outcome);
            failures.append(&mut failed);
        }
        (outcomes, failures)
    }

    /// [`apply_row`](Self::apply_row), then, when the write enqueued
    /// effects, delivers the row's pending effects in order (the outbox's
    /// drain). A failed delivery is reported in the outcome, never as a
    /// failure of the row's events: they are committed.
    async fn apply_delivering(
        &self,
        work: RowWork<M, K>,
        deliver: Option<&dyn Deliver>,
    ) -> (RowOutcome<M>, Vec<RecordFailure>) {
        let (mut outcome, failures) = self.apply_row(work).await;
        if let (Some(deliver), Some(outbox)) = (deliver, &self.outbox) {
            if outcome.written && outcome.enqueued > 0 {
                outcome.delivery = Some(outbox.drain(&outcome.key, deliver).await);
            }
        }
        (outcome, failures)
    }

    /// Reads, folds and writes one row, retrying lost races.
    pub(crate) async fn apply_row(
        &self,
        work: RowWork<M, K>,
    ) -> (RowOutcome<M>, Vec<RecordFailure>) {
        self.drive(work, None).await
    }

    /// Reads, folds and writes one row until all its events are written (a
    /// write over DynamoDB's limits takes a prefix, the next one the rest,
    /// from the row it wrote), retrying lost races from the row the failed
    /// condition returned. With `repair`, the events are the instances'
    /// histories, read after the row, and read again after a lost race.
    pub(crate) async fn drive(
        &self,
        mut work: RowWork<M, K>,
        repair: Option<&Repair>,
    ) -> (RowOutcome<M>, Vec<RecordFailure>) {
        // The row as the last failed condition returned it, or as the last
        // partial write left it: no re-read.
        let mut known: Option<Option<Item>> = None;
        let mut fresh = matches!(repair, Some(Repair::Rebuild(_)));
        let mut histories = repair.is_some();
        let mut written: Option<RowOutcome<M>> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let read = match self.read_row(&work, known.take()).await {
                Ok(read) => read,
                Err(e) => return after(written, self.row_failed(&work, None, e)),
            };
            if let (Some(how), true) = (repair, histories) {
                match self.repair_events(&work, &read, how).await {
                    Ok(events) => work.instances = events,
                    Err(e) => return after(written, self.row_failed(&work, None, e)),
                }
                histories = false;
            }
            match self.attempt(&work, &read, fresh).await {
                Ok(Written::Done(outcome, failures)) => return after(written, (outcome, failures)),
                Ok(Written::More(outcome, item)) => {
                    written = Some(match written {
                        Some(earlier) => earlier.then(outcome),
                        None => outcome,
                    });
                    known = Some(Some(item));
                    (fresh, attempt) = (false, 0);
                }
                Err(lost) => {
                    if let Err(e) = self.lost_race(&work, attempt).await {
                        return after(written, self.row_failed(&work, Some(*lost.plan), e));
                    }
                    known = Some(lost.item);
                    histories = repair.is_some();
                }
            }
        }
    }

    /// The row at the work's key: `known` when a failed condition returned
    /// it, else read.
    pub(crate) async fn read_row(
        &self,
        work: &RowWork<M, K>,
        known: Option<Option<Item>>,
    ) -> Result<ReadRow, Error> {
        let item = match known {
            Some(item) => item,
            None => self.read_model.table().get_item(work.key.clone()).await?,
        };
        Ok(self.classify(item))
    }

    /// Plans the row from `read` and writes it once, as much of it as
    /// DynamoDB's limits let one write hold (the greatest prefix). `fresh`
    /// plans from `initial` with every checkpoint cleared (a rebuild),
    /// keeping only the revision; the write is still conditioned on the row
    /// as read.
    async fn attempt(&self, work: &RowWork<M, K>, read: &ReadRow, fresh: bool) -> Attempt<M> {
        let cleared;
        let from = match read {
            ReadRow::Row(item) | ReadRow::Tombstone(item) if fresh => {
                let mut cleared_item = item.clone();
                self.slots.clear(&mut cleared_item);
                cleared = ReadRow::Cleared {
                    item: cleared_item,
                    before: item.clone(),
                };
                &cleared
            }
            read => read,
        };
        let mut limits = Limits::one_write();
        let (plan, writes) = loop {
            let plan = match self.plan(work, from, &limits).await {
                Ok(plan) => plan,
                Err(e) => return Ok(Written::from(self.row_failed(work, None, e))),
            };
            if !plan.write {
                return Ok(Written::from(self.finish(work, plan, false)));
            }
            match self.fit(work, &plan, read, &limits) {
                Ok(Fit::Writes(writes)) => break (plan, writes),
                Ok(Fit::Again(tighter)) => limits = tighter,
                Err(e) => return Ok(Written::from(self.row_failed(work, Some(plan), e))),
            }
        };
        // Where the next write starts, when this one took a prefix.
        let rest = if plan.cut {
            row_item(&writes).cloned()
        } else {
            None
        };
        match write_row(self.read_model.table().as_ref(), writes).await {
            Ok(()) => {
                crate::metrics::enqueued(self.read_model.entity_type(), plan.effects.len());
                let (outcome, failures) = self.finish(work, plan, true);
                Ok(match rest {
                    Some(item) => Written::More(outcome, item),
                    None => Written::Done(outcome, failures),
                })
            }
            // Without the row (a backend that does not return it), read again.
            Err(TableError::ConditionalCheckFailed { item }) => Err(LostRace {
                item: item.map(|i| *i),
                plan: Box::new(plan),
            }),
            Err(e) => Ok(Written::from(self.row_failed(work, Some(plan), e.into()))),
        }
    }

    /// Counts a lost race and waits a jittered backoff before the next
    /// attempt; after `max_attempts`, the row fails with `WriteContention`.
    pub(crate) async fn lost_race(&self, work: &RowWork<M, K>, attempt: u32) -> Result<(), Error> {
        crate::metrics::write_conflict(&self.name);
        if attempt >= self.max_attempts {
            return Err(Error::WriteContention {
                target: work.id.clone(),
                attempts: attempt,
            });
        }
        let ceiling = 2u64 << attempt.min(8);
        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..=ceiling))).await;
        Ok(())
    }

    /// What a read found at the row's key: the row, its tombstone, or
    /// nothing (another entity's item there reads as nothing).
    pub(crate) fn classify(&self, item: Option<Item>) -> ReadRow {
        match item {
            Some(item) if self.read_model.owns(&item) => ReadRow::Row(item),
            Some(item) if is_tombstone(self.read_model.entity_type(), &item) => {
                ReadRow::Tombstone(item)
            }
            _ => ReadRow::Absent,
        }
    }

    /// The outcome of a row that was written (or had nothing to write), and
    /// the batch positions its instances did not cover.
    fn finish(
        &self,
        work: &RowWork<M, K>,
        plan: RowPlan<M>,
        written: bool,
    ) -> (RowOutcome<M>, Vec<RecordFailure>) {
        let failures = uncovered(work, &plan.instances, None);
        let failure = every_instance_failed(work, &plan.instances);
        let state = if written {
            Some(plan.state)
        } else {
            plan.read_state
        };
        let outcome = RowOutcome {
            projection: self.name.clone(),
            key: work.key.clone(),
            instances: plan.instances,
            revision: if written {
                plan.revision
            } else {
                plan.revision_read
            },
            written,
            removed: written && plan.removed,
            enqueued: if written { plan.effects.len() } else { 0 },
            state: if written && plan.removed { None } else { state },
            failure,
            delivery: None,
        };
        (outcome, failures)
    }

    /// The outcome of a row that failed as a whole: nothing written, every
    /// batch event above its instance's checkpoint (as read) reported.
    fn row_failed(
        &self,
        work: &RowWork<M, K>,
        plan: Option<RowPlan<M>>,
        error: Error,
    ) -> (RowOutcome<M>, Vec<RecordFailure>) {
        let instances = match plan {
            Some(plan) => plan.unwritten(),
            None => Vec::new(),
        };
        let failures = uncovered(work, &instances, Some(&error));
        let outcome = RowOutcome {
            projection: self.name.clone(),
            key: work.key.clone(),
            instances,
            revision: None,
            written: false,
            removed: false,
            enqueued: 0,
            state: None,
            failure: Some(error),
            delivery: None,
        };
        (outcome, failures)
    }
}

/// What one planned write of a row came to.
pub(crate) enum Written<M> {
    /// The row's outcome (written, nothing to write, or failed) and the
    /// batch positions it did not cover.
    Done(RowOutcome<M>, Vec<RecordFailure>),
    /// A write over DynamoDB's limits took a prefix: its outcome, and the
    /// row item it wrote, where the next write starts.
    More(RowOutcome<M>, Item),
}

impl<M> From<(RowOutcome<M>, Vec<RecordFailure>)> for Written<M> {
    fn from((outcome, failures): (RowOutcome<M>, Vec<RecordFailure>)) -> Self {
        Written::Done(outcome, failures)
    }
}

/// The last write's outcome after the earlier ones (a row written in
/// parts); the failures are the last one's, which covers what the earlier
/// ones wrote.
fn after<M>(
    written: Option<RowOutcome<M>>,
    (last, failures): (RowOutcome<M>, Vec<RecordFailure>),
) -> (RowOutcome<M>, Vec<RecordFailure>) {
    match written {
        Some(earlier) => (earlier.then(last), failures),
        None => (last, failures),
    }
}

/// A planned write of a row that another writer got to first.
pub(crate) struct LostRace<M> {
    /// The row as it is now, when the backend returned it.
    pub item: Option<Item>,
    /// The plan that lost.
    pub plan: Box<RowPlan<M>>,
}

/// What one planned write of a row came to, or a lost race.
pub(crate) type Attempt<M> = Result<Written<M>, LostRace<M>>;

/// What a read found at a row's key.
pub(crate) enum ReadRow {
    /// Nothing (or another entity's item).
    Absent,
    /// The row.
    Row(Item),
    /// The row's tombstone: no state, but its checkpoints and revision.
    Tombstone(Item),
    /// What a rebuild plans from: the item read with its checkpoints
    /// cleared, no state, only its revision; and the item as read, whose
    /// checkpoints say which events the row had applied (and committed
    /// the effects of) before.
    Cleared { item: Item, before: Item },
}

impl ReadRow {
    /// The item read, row or tombstone.
    pub(crate) fn item(&self) -> Option<&Item> {
        match self {
            ReadRow::Absent => None,
            ReadRow::Row(item) | ReadRow::Tombstone(item) | ReadRow::Cleared { item, .. } => {
                Some(item)
            }
        }
    }

    /// The row, when there is one (not a tombstone).
    pub(crate) fn row(&self) -> Option<&Item> {
        match self {
            ReadRow::Row(item) => Some(item),
            _ => None,
        }
    }
}

/// The batch positions of a row that its instances did not cover, each with
/// the failure that kept it out (the instance's, or the row's). Outcomes are
/// in the order of the row's instances.
fn uncovered<M, K>(
    work: &RowWork<M, K>,
    instances: &[super::InstanceOutcome],
    row_failure: Option<&Error>,
) -> Vec<RecordFailure> {
    let mut failures = Vec::new();
    for (at, events) in work.instances.values().enumerate() {
        let outcome = instances.get(at);
        let Some(error) = row_failure.or_else(|| outcome.and_then(|o| o.failure.as_ref())) else {
            continue;
        };
        for event in events {
            let covered = outcome.is_some_and(|o| o.covers(event.version));
            if let (Some(index), false) = (event.index, covered) {
                failures.push(RecordFailure::new(index, error));
            }
        }
    }
    failures
}

/// The row's failure when every instance failed (nothing was written):
/// each instance keeps its own, the row's names the first.
fn every_instance_failed<M, K>(
    work: &RowWork<M, K>,
    instances: &[super::InstanceOutcome],
) -> Option<Error> {
    let failures: Vec<&Error> = instances
        .iter()
        .map(|i| i.failure.as_ref())
        .collect::<Option<_>>()?;
    let first = failures.first()?;
    Some(Error::InstancesFailed {
        row: work.id.clone(),
        count: failures.len(),
        first: crate::table_error::error_chain(*first),
        retryable: first.is_retryable(),
    })
}

/// A printable identity of a table key: `pk=<value>|sk=<value>`, in key
/// schema order.
pub(crate) fn row_id(schema: &TableSchema, key: &Item) -> String {
    let mut id = String::with_capacity(64);
    for name in schema.key.names() {
        if !id.is_empty() {
            id.push('|');
        }
        id.push_str(name);
        id.push('=');
        match key.get(name) {
            Some(crate::item::AttributeValue::S(text)) => id.push_str(text),
            Some(other) => id.push_str(&format!("{other:?}")),
            None => {}
        }
    }
    id
}
