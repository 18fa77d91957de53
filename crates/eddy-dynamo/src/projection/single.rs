//! The single-source projection: one event stream folded into read-model
//! rows, each row keeping one checkpoint and the stream instance it belongs
//! to. It is the row core with one source and scalar checkpoint slots.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::core::{Bound, OnFailure, Prepared, RowCore, Source};
use super::options::Revision;
use super::slots::{read_counter, ScalarCheckpoint};
use super::step::{EvolveError, Step};
use super::{RecordFailure, RowOutcome};
use crate::entity::Entity;
use crate::error::Error;
use crate::event_item::{EventItem, StreamId, StreamIdentity};
use crate::event_stream::{EventStream, StoredEvent};
use crate::outbox::Deliver;

type KeyFn<E, K> = dyn Fn(&StreamId, &StoredEvent<E>) -> Option<K> + Send + Sync;
type InitialFn<K, M> = dyn Fn(&K) -> M + Send + Sync;
type EvolveFn<E, M> = dyn Fn(M, &StoredEvent<E>) -> Result<Step<M>, EvolveError> + Send + Sync;
type TerminalFn = dyn Fn(&EvolveError) -> bool + Send + Sync;

/// A projection of one event stream `E` into rows of the read model `M`,
/// keyed by `K`: a serializable value holding the row's key composites (a
/// struct with those fields, or a tuple of their values in composite order).
///
/// Built with [`Projection::builder`]. For each row it keeps, in the row,
/// the version up to which the row's stream instance has been considered
/// (the checkpoint field) and which instance that is
/// ([`SOURCE_ATTRIBUTE`](super::SOURCE_ATTRIBUTE)); a second instance
/// feeding the same row is refused with `ProjectionSourceConflict`.
pub struct Projection<E, M, K> {
    core: Arc<RowCore<M, K>>,
    source: Arc<StreamSource<E, M, K>>,
    checkpoint_field: String,
}

impl<E, M, K> Clone for Projection<E, M, K> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            source: Arc::clone(&self.source),
            checkpoint_field: self.checkpoint_field.clone(),
        }
    }
}

impl<E, M, K> std::fmt::Debug for Projection<E, M, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("name", &self.core.name)
            .field("checkpoint_field", &self.checkpoint_field)
            .field("revision_field", &self.core.revision)
            .finish_non_exhaustive()
    }
}

/// The stream of a single-source projection, as the row core sees it.
struct StreamSource<E, M, K> {
    stream: EventStream<E>,
    key: Arc<KeyFn<E, K>>,
    evolve: Arc<EvolveFn<E, M>>,
    terminal: Arc<TerminalFn>,
}

impl<E, M, K> StreamSource<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Send + 'static,
{
    fn prepared(&self, source: usize, event: StoredEvent<E>) -> Prepared<M, K> {
        let evolve = Arc::clone(&self.evolve);
        let (instance, version) = (event.stream_id.clone(), event.version);
        let row = (self.key)(&event.stream_id, &event);
        Prepared {
            source,
            instance,
            version,
            row,
            bound: Bound {
                fold: Arc::new(move |state| evolve(state, &event)),
                effects: None,
            },
        }
    }
}

#[async_trait]
impl<E, M, K> Source<M, K> for StreamSource<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Send + 'static,
    K: Send + Sync + 'static,
{
    fn name(&self) -> &str {
        self.stream.name()
    }

    fn prepare(&self, source: usize, item: EventItem) -> Result<Prepared<M, K>, Error> {
        Ok(self.prepared(source, self.stream.decode_owned(item)?))
    }

    async fn history(
        &self,
        instance: &StreamId,
        from: u64,
        to: u64,
    ) -> Result<Vec<EventItem>, Error> {
        self.stream.read_items_range(instance, from, to).await
    }

    fn is_terminal(&self, error: &EvolveError) -> bool {
        (self.terminal)(error)
    }

    fn reads(&self, stream: &StreamIdentity) -> bool {
        self.stream.identity() == *stream
    }
}

/// Builds a [`Projection`]; `key`, `initial` and `evolve` are required.
pub struct ProjectionBuilder<E, M, K> {
    name: String,
    read_model: Entity<M>,
    stream: EventStream<E>,
    key: Option<Arc<KeyFn<E, K>>>,
    initial: Option<Arc<InitialFn<K, M>>>,
    evolve: Option<Arc<EvolveFn<E, M>>>,
    terminal: Arc<TerminalFn>,
    checkpoint_field: String,
    revision_field: Option<Revision>,
    max_attempts: u32,
    concurrency: Option<usize>,
}

impl<E, M, K> Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    /// Starts a projection named `name` from `stream` into `read_model`.
    /// The checkpoint field defaults to `checkpoint`; no failure is terminal
    /// and there is no revision until declared.
    pub fn builder(
        name: impl Into<String>,
        read_model: Entity<M>,
        stream: EventStream<E>,
    ) -> ProjectionBuilder<E, M, K> {
        ProjectionBuilder {
            name: name.into(),
            read_model,
            stream,
            key: None,
            initial: None,
            evolve: None,
            terminal: Arc::new(|_| false),
            checkpoint_field: "checkpoint".into(),
            revision_field: None,
            max_attempts: 20,
            concurrency: None,
        }
    }

    /// The projection's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The stream it reads.
    pub fn stream(&self) -> &EventStream<E> {
        &self.source.stream
    }

    /// The read model it writes.
    pub fn read_model(&self) -> &Entity<M> {
        &self.core.read_model
    }

    /// The checkpoint of the row `key`: the version up to which its stream
    /// instance has been considered, 0 when the row does not exist (or was
    /// written before the projection).
    pub async fn checkpoint(&self, key: &K) -> Result<u64, Error> {
        let Some(item) = self.core.read_model.get_item(key).await? else {
            return Ok(0);
        };
        let table = self.core.read_model.table();
        let row = super::core::row_id(table.schema(), &self.core.read_model.key(key)?);
        Ok(read_counter(&item, &self.checkpoint_field, &row)?.unwrap_or(0))
    }

    /// Applies events directly (not from a change feed), grouped by row.
    /// Events keyed to no row are left out. Redelivered events are
    /// recognised by the rows' checkpoints. A row key that does not compose
    /// is refused before anything is written.
    pub async fn apply_batch(
        &self,
        events: Vec<StoredEvent<E>>,
    ) -> Result<Vec<RowOutcome<M>>, Error> {
        let prepared: Vec<_> = events
            .into_iter()
            .map(|event| self.source.prepared(0, event))
            .collect();
        for event in &prepared {
            if let Some(row) = &event.row {
                self.core.read_model.key(row)?;
            }
        }
        let indexed = prepared.into_iter().map(|p| (None, p)).collect();
        Ok(self.core.apply(indexed, None).await.0)
    }

    /// The row's checkpoint as (source, instance, version): the stream
    /// instance that owns the row, empty when there is no row (or it was
    /// written before the projection).
    pub async fn checkpoints(&self, key: &K) -> Result<Vec<(String, StreamId, u64)>, Error> {
        self.core.checkpoints_of(key).await
    }

    /// Re-derives the row `key` from its stream instance `instance`: folds
    /// every event of the instance keyed to the row from `initial` and
    /// writes the checkpoint (and the owner) from scratch. Safe beside live
    /// delivery: the row is read before the history, and the write is
    /// conditioned on the revision (or, without one, the checkpoint) read,
    /// so a write that lost to a live one plans again from both. A row
    /// owned by another instance is rebuilt from `instance` (the repair of
    /// a wrong owner).
    pub async fn rebuild(&self, key: K, instance: &StreamId) -> Result<RowOutcome<M>, Error> {
        let instances =
            super::RebuildInstances::new().add(self.core.sources[0].name(), instance.clone());
        self.core.rebuild(key, &instances).await
    }

    /// Brings the row `key` up to its stream instance's head: reads the
    /// events above its checkpoint (never delivered, or lost with a
    /// trimmed change feed) and applies them like a delivery.
    pub async fn catch_up(&self, key: K) -> Result<RowOutcome<M>, Error> {
        self.core.catch_up(key).await
    }

    /// Decodes stored events (with their batch positions) and applies
    /// them; reports the positions that were not applied.
    pub(crate) async fn apply_items(
        &self,
        items: Vec<(usize, EventItem)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        let mut failures = Vec::new();
        let mut prepared = Vec::with_capacity(items.len());
        for (index, item) in items {
            match self.source.prepare(0, item) {
                Ok(event) => prepared.push((Some(index), event)),
                Err(e) => failures.push(RecordFailure::new(index, &e)),
            }
        }
        let (outcomes, mut row_failures) = self.core.apply(prepared, deliver).await;
        failures.append(&mut row_failures);
        (outcomes, failures)
    }

    /// Whether it reads this stream.
    pub(crate) fn reads(&self, stream: &StreamIdentity) -> bool {
        self.source.stream.identity() == *stream
    }
}

impl<E, M, K> ProjectionBuilder<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    /// Names the row an event contributes to, or `None` for no row.
    pub fn key(
        mut self,
        key: impl Fn(&StreamId, &StoredEvent<E>) -> Option<K> + Send + Sync + 'static,
    ) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// The state of a row before its first event.
    pub fn initial(mut self, initial: impl Fn(&K) -> M + Send + Sync + 'static) -> Self {
        self.initial = Some(Arc::new(initial));
        self
    }

    /// Folds one event into a row's state: returns the next state (or a
    /// [`Step`]: skip the event, remove the row), or an [`EvolveError`]
    /// made from an error of any type (`?` converts), which
    /// [`terminal`](Self::terminal) classifies by that type.
    pub fn evolve<S: Into<Step<M>>>(
        mut self,
        evolve: impl Fn(M, &StoredEvent<E>) -> Result<S, EvolveError> + Send + Sync + 'static,
    ) -> Self {
        self.evolve = Some(Arc::new(move |state, event| {
            evolve(state, event).map(Into::into)
        }));
        self
    }

    /// Accepts the `evolve` failures of type `X` for which `terminal`
    /// holds: the event is reported as rejected and the checkpoint moves
    /// past it. Every other failure stops the row at that event.
    pub fn terminal<X: std::error::Error + 'static>(
        mut self,
        terminal: impl Fn(&X) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.terminal = Arc::new(move |e| e.downcast_ref::<X>().is_some_and(&terminal));
        self
    }

    /// The row attribute holding the checkpoint.
    pub fn checkpoint(mut self, field: impl Into<String>) -> Self {
        self.checkpoint_field = field.into();
        self
    }

    /// A revision attribute (a field name, or a [`Revision`] with its
    /// initial value), incremented by every write and used as its guard
    /// instead of the checkpoint. (Without it, [`Projection::rebuild`] is
    /// guarded by the checkpoint it read.)
    pub fn revision(mut self, field: impl Into<Revision>) -> Self {
        self.revision_field = Some(field.into());
        self
    }

    /// How many times a write lost to a concurrent writer is retried.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How many rows a batch applies at once: their writes overlap (and
    /// share group commits on the embedded table). Without it, the read
    /// model's table decides ([`Table::rows_at_once`](crate::Table::rows_at_once): 16 on DynamoDB, the
    /// whole batch on the embedded table).
    pub fn concurrency(mut self, rows: usize) -> Self {
        self.concurrency = Some(rows.max(1));
        self
    }

    /// Builds the projection; `InvalidArgument` when a required part is missing.
    pub fn build(self) -> Result<Projection<E, M, K>, Error> {
        let missing =
            |what: &str| Error::InvalidArgument(format!("projection {} needs {what}", self.name));
        let source = Arc::new(StreamSource {
            key: self.key.clone().ok_or_else(|| missing("key"))?,
            evolve: self.evolve.clone().ok_or_else(|| missing("evolve"))?,
            terminal: self.terminal,
            stream: self.stream,
        });
        let checkpoint = self.checkpoint_field.as_str();
        let revision = self.revision_field.as_ref().map(Revision::field);
        if checkpoint == super::SOURCE_ATTRIBUTE || revision == Some(checkpoint) {
            return Err(Error::InvalidArgument(format!(
                "projection {}: attribute {checkpoint} is declared twice, as the checkpoint and as the {}",
                self.name,
                if revision == Some(checkpoint) { "revision" } else { "row's owner" }
            )));
        }
        let concurrency = self
            .concurrency
            .unwrap_or_else(|| self.read_model.table().rows_at_once());
        let core = RowCore {
            initial: self.initial.clone().ok_or_else(|| missing("initial"))?,
            name: self.name,
            read_model: self.read_model,
            sources: vec![Arc::clone(&source) as Arc<dyn Source<M, K>>],
            slots: Arc::new(ScalarCheckpoint {
                field: self.checkpoint_field.clone(),
            }),
            revision: self.revision_field,
            removal: None,
            restarts_restricted: false,
            outbox: None,
            on_failure: OnFailure::KeepPrefix,
            max_attempts: self.max_attempts,
            concurrency,
        };
        Ok(Projection {
            core: Arc::new(core),
            source,
            checkpoint_field: self.checkpoint_field,
        })
    }
}
