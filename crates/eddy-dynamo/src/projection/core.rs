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

use super::fold::RowPlan;
use super::slots::CheckpointSlots;
use super::step::{EvolveError, Step};
use super::{RecordFailure, RowOutcome};
use crate::condition::Condition;
use crate::entity::Entity;
use crate::error::{Error, TableError};
use crate::event_item::{EventItem, StreamId};
use crate::item::{n, Item};
use crate::key_schema::TableSchema;
use crate::request::Put;

/// How an event folds into a row's state: `evolve` with the event bound.
pub(crate) type Fold<M> = Arc<dyn Fn(M) -> Result<Step<M>, EvolveError> + Send + Sync>;

/// A decoded event of one source, ready to fold into whichever row it names.
pub(crate) struct Prepared<M, K> {
    /// The source's position in the projection's declaration.
    pub source: usize,
    pub instance: StreamId,
    pub version: u64,
    /// The row it contributes to, or `None` for no row.
    pub row: Option<K>,
    pub fold: Fold<M>,
}

/// One source of a projection, as the core sees it.
#[async_trait]
pub(crate) trait Source<M, K>: Send + Sync {
    /// Its name (where its checkpoints are kept, what outcomes report).
    fn name(&self) -> &str;
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
    #[allow(dead_code)]
    DropInstance,
}

/// A projection's rows, sources and guards.
pub(crate) struct RowCore<M, K> {
    pub name: String,
    pub read_model: Entity<M>,
    pub initial: Arc<dyn Fn(&K) -> M + Send + Sync>,
    pub sources: Vec<Arc<dyn Source<M, K>>>,
    pub slots: Arc<dyn CheckpointSlots>,
    pub revision: Option<String>,
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
    pub fold: Fold<M>,
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
    /// each row; reports the batch positions that were not applied.
    pub(crate) async fn apply(
        &self,
        prepared: Vec<(Option<usize>, Prepared<M, K>)>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        let mut rows: Vec<RowWork<M, K>> = Vec::new();
        let mut by_key: HashMap<String, usize> = HashMap::new();
        let mut failures = Vec::new();
        for (index, event) in prepared {
            let Some(row) = event.row else { continue };
            let key = match self.read_model.key(&row) {
                Ok(key) => key,
                Err(e) => {
                    failures.extend(index.map(|i| RecordFailure::new(i, &e)));
                    continue;
                }
            };
            let id = row_id(self.read_model.table().schema(), &key);
            let at = *by_key.entry(id.clone()).or_insert_with(|| {
                rows.push(RowWork {
                    key,
                    id,
                    row,
                    instances: BTreeMap::new(),
                });
                rows.len() - 1
            });
            rows[at]
                .instances
                .entry((event.source, event.instance))
                .or_default()
                .push(Pending {
                    index,
                    version: event.version,
                    fold: event.fold,
                });
        }
        let applied: Vec<_> =
            futures::stream::iter(rows.into_iter().map(|row| self.apply_row(row)))
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

    /// Reads, folds and writes one row, retrying lost races.
    async fn apply_row(&self, work: RowWork<M, K>) -> (RowOutcome<M>, Vec<RecordFailure>) {
        let table = self.read_model.table();
        // The row as the last failed condition returned it: no re-read.
        let mut known: Option<Item> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let read = match known.take() {
                Some(item) => Ok(Some(item)),
                None => table.get_item(work.key.clone()).await.map_err(Error::from),
            };
            let read = match read {
                Ok(item) => item.filter(|i| self.read_model.owns(i)),
                Err(e) => return self.row_failed(&work, None, e),
            };
            let plan = match self.plan(&work, read.as_ref()).await {
                Ok(plan) => plan,
                Err(e) => return self.row_failed(&work, None, e),
            };
            if !plan.write {
                return self.finish(&work, plan, false);
            }
            let put = match self.row_put(&work, &plan, read.as_ref()) {
                Ok(put) => put,
                Err(e) => return self.row_failed(&work, Some(plan), e),
            };
            match table.put_item(put).await {
                Ok(()) => return self.finish(&work, plan, true),
                Err(TableError::ConditionalCheckFailed { item }) if attempt < self.max_attempts => {
                    known = item.map(|i| *i);
                    let ceiling = 2u64 << attempt.min(8);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..=ceiling))).await;
                }
                Err(TableError::ConditionalCheckFailed { .. }) => {
                    let e = Error::WriteContention {
                        target: work.id.clone(),
                        attempts: attempt,
                    };
                    return self.row_failed(&work, Some(plan), e);
                }
                Err(e) => return self.row_failed(&work, Some(plan), e.into()),
            }
        }
    }

    /// The write of a planned row: its state, its slots as planned and the
    /// next revision, on the condition that the row is still as read.
    fn row_put(
        &self,
        work: &RowWork<M, K>,
        plan: &RowPlan<M>,
        read: Option<&Item>,
    ) -> Result<Put, Error> {
        let mut item = self.read_model.to_item(&plan.state)?;
        if work
            .key
            .iter()
            .any(|(name, value)| item.get(name) != Some(value))
        {
            return Err(Error::InvalidArgument(format!(
                "projection {}: the row state must keep the key attributes of row {}",
                self.name, work.id
            )));
        }
        self.slots.copy(&plan.slots, &mut item);
        let pk = self.read_model.table().schema().key.partition.name.clone();
        let condition = match (read, &self.revision) {
            (None, _) => Condition::not_exists(pk),
            (Some(_), Some(field)) => match plan.revision_read {
                Some(value) => Condition::eq(field.clone(), n(value)),
                None => Condition::exists(pk).and(Condition::absent(field.clone())),
            },
            (Some(read), None) => Condition::exists(pk).and(self.slots.guard(read)),
        };
        if let (Some(field), Some(next)) = (&self.revision, plan.revision) {
            item.insert(field.clone(), n(next));
        }
        Ok(Put::new(item).when(condition))
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
            state,
            failure: None,
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
            state: None,
            failure: Some(error),
        };
        (outcome, failures)
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
