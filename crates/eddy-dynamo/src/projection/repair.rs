//! Repairing one row: `rebuild` re-derives it from named stream instances,
//! from `initial`, with every checkpoint written from scratch; `catch_up`
//! brings every instance its checkpoints know up to the instance's head.

use std::collections::BTreeMap;

use super::core::{Pending, ReadRow, RowCore, RowWork};
use super::RowOutcome;
use crate::error::Error;
use crate::event_item::{EventItem, StreamId};
use crate::item::Item;

/// The stream instances a row is rebuilt from, by source name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildInstances {
    pub(crate) instances: Vec<(String, StreamId)>,
}

impl RebuildInstances {
    /// No instances yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an instance of `source`.
    pub fn add(mut self, source: impl Into<String>, instance: StreamId) -> Self {
        self.instances.push((source.into(), instance));
        self
    }

    /// The instances, as added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &StreamId)> {
        self.instances.iter().map(|(s, i)| (s.as_str(), i))
    }
}

/// Where a row's events are read from before it is applied.
pub(crate) enum Repair {
    /// From scratch: the named instances' whole histories.
    Rebuild(Vec<(usize, StreamId)>),
    /// From each instance's checkpoint on, for every instance the row's
    /// checkpoints know.
    CatchUp,
}

impl<M, K> RowCore<M, K>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    K: serde::Serialize + Send + Sync + 'static,
{
    /// Rebuilds the row `row` from `instances` (see the module docs).
    pub(crate) async fn rebuild(
        &self,
        row: K,
        instances: &RebuildInstances,
    ) -> Result<RowOutcome<M>, Error> {
        let mut named = Vec::new();
        for (source, instance) in instances.iter() {
            named.push((self.source_index(source)?, instance.clone()));
        }
        self.repair(row, Repair::Rebuild(named)).await
    }

    /// Brings every instance the row's checkpoints know up to its head.
    pub(crate) async fn catch_up(&self, row: K) -> Result<RowOutcome<M>, Error> {
        self.repair(row, Repair::CatchUp).await
    }

    /// The (source, instance) pairs a row's checkpoints know, with their
    /// checkpoints.
    pub(crate) async fn checkpoints_of(
        &self,
        row: &K,
    ) -> Result<Vec<(String, StreamId, u64)>, Error> {
        let key = self.read_model.key(row)?;
        let id = super::core::row_id(self.read_model.table().schema(), &key);
        let read = self.read_model.table().get_item(key).await?;
        let known = self.known_instances(&self.classify(read), &id)?;
        Ok(known
            .into_iter()
            .map(|(at, instance, checkpoint)| {
                (self.sources[at].name().to_owned(), instance, checkpoint)
            })
            .collect())
    }

    /// The instances the slots of a row as read know: (source, instance,
    /// checkpoint).
    fn known_instances(
        &self,
        read: &ReadRow,
        id: &str,
    ) -> Result<Vec<(usize, StreamId, u64)>, Error> {
        let empty = Item::new();
        let slots = read.item().unwrap_or(&empty);
        let mut known = Vec::new();
        for (source, instance) in self.slots.instances(slots) {
            // A single-source row names no source: its only one.
            let at = if source.is_empty() {
                0
            } else {
                self.source_index(&source)?
            };
            let checkpoint = self
                .slots
                .read(slots, self.sources[at].name(), &instance, id)?
                .unwrap_or(0);
            known.push((at, instance, checkpoint));
        }
        Ok(known)
    }

    fn source_index(&self, name: &str) -> Result<usize, Error> {
        self.sources
            .iter()
            .position(|s| s.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("projection {} has no source {name}", self.name))
            })
    }

    /// Repairs one row. The row is read first and the histories after it,
    /// and the write is conditioned on the row as read (its revision, or
    /// its checkpoints): an event that live delivery applied before the
    /// row was read is in the row's checkpoints (catch-up) or in the
    /// history read after it (rebuild), and one it applied after that
    /// moved the row, so the write fails and the repair plans again from
    /// the row as it is now, reading the histories again.
    async fn repair(&self, row: K, how: Repair) -> Result<RowOutcome<M>, Error> {
        let key = self.read_model.key(&row)?;
        let id = super::core::row_id(self.read_model.table().schema(), &key);
        let work = RowWork {
            key,
            id,
            row,
            instances: BTreeMap::new(),
        };
        let (outcome, _) = self.drive(work, Some(&how)).await;
        match outcome.failure {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    /// The events a repair folds, read after the row: the named instances'
    /// whole histories (rebuild), or each known instance's from its
    /// checkpoint in the row as read (catch-up).
    pub(crate) async fn repair_events(
        &self,
        work: &RowWork<M, K>,
        read: &ReadRow,
        how: &Repair,
    ) -> Result<BTreeMap<(usize, StreamId), Vec<Pending<M>>>, Error> {
        let from = match how {
            Repair::Rebuild(named) => named.iter().map(|(at, i)| (*at, i.clone(), 0)).collect(),
            Repair::CatchUp => self.known_instances(read, &work.id)?,
        };
        self.events_of(work, from).await
    }

    /// Each instance's stored events above its `from` that are keyed to
    /// the row (events of other rows are considered by the gap fill).
    async fn events_of(
        &self,
        work: &RowWork<M, K>,
        instances: Vec<(usize, StreamId, u64)>,
    ) -> Result<BTreeMap<(usize, StreamId), Vec<Pending<M>>>, Error> {
        let mut events: BTreeMap<(usize, StreamId), Vec<Pending<M>>> = BTreeMap::new();
        for (at, instance, from) in instances {
            let source = &self.sources[at];
            let history: Vec<EventItem> = source.history(&instance, from + 1, u64::MAX / 2).await?;
            let mine = events.entry((at, instance)).or_default();
            for item in history {
                let prepared = source.prepare(at, item)?;
                let Some(event_row) = &prepared.row else {
                    continue;
                };
                let event_key = self.read_model.key(event_row)?;
                if super::core::row_id(self.read_model.table().schema(), &event_key) == work.id {
                    mine.push(Pending {
                        index: None,
                        version: prepared.version,
                        bound: prepared.bound,
                    });
                }
            }
        }
        events.retain(|_, e| !e.is_empty());
        Ok(events)
    }
}
