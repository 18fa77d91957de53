//! Single-source projections: one event stream folded into read-model rows,
//! each row guarded by its checkpoint (or a revision).

mod apply;
mod outcome;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::outcome::{RecordFailure, RowOutcome, RowReport};
use crate::entity::Entity;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::event_stream::{EventStream, StoredEvent};

/// The attribute that names the stream instance a row is folded from.
pub const SOURCE_ATTRIBUTE: &str = "__edd_src__";

/// A failure of `evolve`. Whether it is accepted (the checkpoint moves past
/// the event) or fails the row is up to the projection's `terminal`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvolveError(pub String);

impl EvolveError {
    /// An evolve failure with this message.
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self(message.to_string())
    }
}

type KeyFn<E, K> = dyn Fn(&StreamId, &StoredEvent<E>) -> Option<K> + Send + Sync;
type InitialFn<K, M> = dyn Fn(&K) -> M + Send + Sync;
type EvolveFn<E, M> = dyn Fn(M, &StoredEvent<E>) -> Result<M, EvolveError> + Send + Sync;
type TerminalFn = dyn Fn(&EvolveError) -> bool + Send + Sync;

/// A projection of one event stream `E` into rows of the read model `M`,
/// keyed by `K` (any serializable value holding the row's key attributes).
///
/// Built with [`Projection::builder`]. For each row it keeps, in the row,
/// the version up to which the row's stream instance has been considered
/// (the checkpoint field) and which instance that is.
pub struct Projection<E, M, K> {
    name: String,
    read_model: Entity<M>,
    stream: EventStream<E>,
    key: Arc<KeyFn<E, K>>,
    initial: Arc<InitialFn<K, M>>,
    evolve: Arc<EvolveFn<E, M>>,
    terminal: Arc<TerminalFn>,
    checkpoint_field: String,
    revision_field: Option<String>,
    max_attempts: u32,
}

impl<E, M, K> Clone for Projection<E, M, K> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            read_model: self.read_model.clone(),
            stream: self.stream.clone(),
            key: Arc::clone(&self.key),
            initial: Arc::clone(&self.initial),
            evolve: Arc::clone(&self.evolve),
            terminal: Arc::clone(&self.terminal),
            checkpoint_field: self.checkpoint_field.clone(),
            revision_field: self.revision_field.clone(),
            max_attempts: self.max_attempts,
        }
    }
}

impl<E, M, K> std::fmt::Debug for Projection<E, M, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("name", &self.name)
            .field("checkpoint_field", &self.checkpoint_field)
            .field("revision_field", &self.revision_field)
            .finish_non_exhaustive()
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
    revision_field: Option<String>,
    max_attempts: u32,
}

impl<E, M, K> Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
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
        }
    }

    /// The projection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream it reads.
    pub fn stream(&self) -> &EventStream<E> {
        &self.stream
    }

    /// The read model it writes.
    pub fn read_model(&self) -> &Entity<M> {
        &self.read_model
    }

    /// The checkpoint of the row `key`: the version up to which its stream
    /// instance has been considered, 0 when the row does not exist.
    pub async fn checkpoint(&self, key: &K) -> Result<u64, Error> {
        let item = self.read_model.get_item(key).await?;
        Ok(item
            .and_then(|i| crate::item::get_u64(&i, &self.checkpoint_field))
            .unwrap_or(0))
    }
}

impl<E, M, K> ProjectionBuilder<E, M, K>
where
    E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
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

    /// Folds one event into a row's state.
    pub fn evolve(
        mut self,
        evolve: impl Fn(M, &StoredEvent<E>) -> Result<M, EvolveError> + Send + Sync + 'static,
    ) -> Self {
        self.evolve = Some(Arc::new(evolve));
        self
    }

    /// Decides which evolve failures are accepted: the event is reported as
    /// rejected and the checkpoint moves past it. Others fail the row.
    pub fn terminal(
        mut self,
        terminal: impl Fn(&EvolveError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.terminal = Arc::new(terminal);
        self
    }

    /// The row attribute holding the checkpoint.
    pub fn checkpoint(mut self, field: impl Into<String>) -> Self {
        self.checkpoint_field = field.into();
        self
    }

    /// A revision attribute, incremented by every write and used as its
    /// guard instead of the checkpoint.
    pub fn revision(mut self, field: impl Into<String>) -> Self {
        self.revision_field = Some(field.into());
        self
    }

    /// How many times a write lost to a concurrent writer is retried.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Builds the projection; `InvalidArgument` when a required part is missing.
    pub fn build(self) -> Result<Projection<E, M, K>, Error> {
        let missing =
            |what: &str| Error::InvalidArgument(format!("projection {} needs {what}", self.name));
        Ok(Projection {
            key: self.key.clone().ok_or_else(|| missing("key"))?,
            initial: self.initial.clone().ok_or_else(|| missing("initial"))?,
            evolve: self.evolve.clone().ok_or_else(|| missing("evolve"))?,
            name: self.name,
            read_model: self.read_model,
            stream: self.stream,
            terminal: self.terminal,
            checkpoint_field: self.checkpoint_field,
            revision_field: self.revision_field,
            max_attempts: self.max_attempts,
        })
    }
}
