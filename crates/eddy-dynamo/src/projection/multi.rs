//! The multi-source projection: several event streams folded into one
//! read model, each row keeping a checkpoint per source instance and a
//! revision that serialises every writer.

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::core::{Bound, OnFailure, Prepared, RowCore, Source};
use super::effects::{encode_effects, EffectCommit, EffectEvent, EffectsFn, OutboxDecl};
use super::fold::effect_event;
use super::options::{Mode, Removal, Revision};
use super::repair::RebuildInstances;
use super::slot_map::Checkpoints;
use super::step::{EvolveError, Step};
use super::{RecordFailure, RowOutcome};
use crate::entity::Entity;
use crate::error::Error;
use crate::event_item::{EventItem, StreamId, StreamIdentity};
use crate::event_stream::{EventStream, StoredEvent};
use crate::outbox::{Deliver, DrainReport, PendingReport, RowPending};

/// Where an event is folded: the source that read it and its stream
/// instance, as `evolve` sees them.
#[derive(Debug, Clone, Copy)]
pub struct SourceContext<'a> {
    /// The source's name.
    pub source: &'a str,
    /// The event's stream instance.
    pub stream_id: &'a StreamId,
}

type KeyFn<E, K> = dyn Fn(&StreamId, &StoredEvent<E>) -> Option<K> + Send + Sync;
type EvolveFn<E, M> =
    dyn Fn(M, &StoredEvent<E>, &SourceContext<'_>) -> Result<Step<M>, EvolveError> + Send + Sync;
type TerminalFn = dyn Fn(&EvolveError) -> bool + Send + Sync;
type InitialFn<K, M> = dyn Fn(&K) -> M + Send + Sync;
/// Builds a declared source once the projection's outbox is known.
type MakeSource<M, K> =
    Box<dyn FnOnce(Option<EffectsFn<M>>) -> Result<Arc<dyn Source<M, K>>, Error> + Send>;

/// Writes of a row retried by default: writers of several sources contend
/// for hot rows by design, each loss costs one jittered backoff.
const MAX_ATTEMPTS: u32 = 32;

/// A projection of several event streams into rows of the read model `M`,
/// keyed by `K`. Built with [`MultiProjection::builder`]; each source is
/// declared with [`MultiProjectionBuilder::source`], whose helper infers the
/// stream's event type.
pub struct MultiProjection<M, K> {
    core: Arc<RowCore<M, K>>,
    checkpoints: Checkpoints,
    sources_of: Option<Arc<SourcesOfFn<K>>>,
}

/// `sources_of`: the instances a row is rebuilt from.
type SourcesOfFn<K> =
    dyn Fn(&K) -> BoxFuture<'static, Result<RebuildInstances, Error>> + Send + Sync;

impl<M, K> Clone for MultiProjection<M, K> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            checkpoints: self.checkpoints.clone(),
            sources_of: self.sources_of.clone(),
        }
    }
}

impl<M, K> std::fmt::Debug for MultiProjection<M, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiProjection")
            .field("name", &self.core.name)
            .field(
                "sources",
                &self
                    .core
                    .sources
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>(),
            )
            .field("checkpoints", &self.checkpoints)
            .field("revision", &self.core.revision)
            .finish_non_exhaustive()
    }
}

/// Declares one source of a [`MultiProjection`]: `key` and `evolve` are
/// required.
pub struct SourceBuilder<E, M, K> {
    stream: EventStream<E>,
    key: Option<Arc<KeyFn<E, K>>>,
    evolve: Option<Arc<EvolveFn<E, M>>>,
    terminal: Arc<TerminalFn>,
    mode: Mode,
    restarts: bool,
}

impl<E, M, K> SourceBuilder<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Send + 'static,
    K: Send + Sync + 'static,
{
    /// Names the row an event contributes to (`None`: no row). One stream
    /// instance may feed many rows.
    pub fn key(
        mut self,
        key: impl Fn(&StreamId, &StoredEvent<E>) -> Option<K> + Send + Sync + 'static,
    ) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Folds one event into the whole row: the next state (or a [`Step`]:
    /// skip the event, remove the row), or an [`EvolveError`]. Sources
    /// interleave in any order across writes: one source's `evolve` must
    /// not assume another's has run.
    pub fn evolve<S: Into<Step<M>>>(
        mut self,
        evolve: impl Fn(M, &StoredEvent<E>, &SourceContext<'_>) -> Result<S, EvolveError>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.evolve = Some(Arc::new(move |state, event, context| {
            evolve(state, event, context).map(Into::into)
        }));
        self
    }

    /// Accepts this source's `evolve` failures of type `X` for which
    /// `terminal` holds: the event is rejected and the checkpoint moves
    /// past it.
    pub fn terminal<X: std::error::Error + 'static>(
        mut self,
        terminal: impl Fn(&X) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.terminal = Arc::new(move |e| e.downcast_ref::<X>().is_some_and(&terminal));
        self
    }

    /// How this source's events fold (default [`Mode::Fold`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Whether this source's events may start a removed row again. By
    /// default (no source says so) any later event does, as the spec has
    /// it; once a source says `true`, only the sources that said so do,
    /// and the other sources' events on a removed row (its tombstone, or a
    /// removal earlier in the same write) are recorded in its checkpoints
    /// and skipped ([`InstanceOutcome::after_removal`](crate::InstanceOutcome::after_removal)).
    /// The projection must declare removal. See the crate docs on why
    /// (another shard's old news after a tombstone).
    pub fn restarts_removed_rows(mut self, restarts: bool) -> Self {
        self.restarts = restarts;
        self
    }
}

/// A declared source, as the row core sees it.
struct StreamSource<E, M, K> {
    name: String,
    stream: EventStream<E>,
    key: Arc<KeyFn<E, K>>,
    evolve: Arc<EvolveFn<E, M>>,
    terminal: Arc<TerminalFn>,
    mode: Mode,
    restarts: bool,
    effects: Option<EffectsFn<M>>,
}

#[async_trait]
impl<E, M, K> Source<M, K> for StreamSource<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Send + Sync + 'static,
    K: Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn prepare(&self, source: usize, item: EventItem) -> Result<Prepared<M, K>, Error> {
        // The outbox sees the event's type and data as stored.
        let raw = self
            .effects
            .as_ref()
            .map(|_| (item.event_type.clone(), item.data.clone()));
        let event = self.stream.decode_owned(item)?;
        let (instance, version) = (event.stream_id.clone(), event.version);
        let row = (self.key)(&event.stream_id, &event);
        let effects = match (&self.effects, raw) {
            (Some(effects), Some((event_type, data))) => {
                let (effects, name, id) =
                    (Arc::clone(effects), self.name.clone(), instance.clone());
                let bound: super::core::Effects<M> = Arc::new(move |next: Option<&M>| {
                    effects(&effect_event(&name, &id, version, &event_type, &data), next)
                });
                Some(bound)
            }
            _ => None,
        };
        let (evolve, name) = (Arc::clone(&self.evolve), self.name.clone());
        Ok(Prepared {
            source,
            instance,
            version,
            row,
            bound: Bound {
                fold: Arc::new(move |state| {
                    let context = SourceContext {
                        source: &name,
                        stream_id: &event.stream_id,
                    };
                    evolve(state, &event, &context)
                }),
                effects,
            },
        })
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

    fn restarts_removed_rows(&self) -> bool {
        self.restarts
    }
}

/// Builds a [`MultiProjection`]: `initial`, at least one source,
/// `checkpoints` and `revision` are required.
pub struct MultiProjectionBuilder<M, K> {
    name: String,
    read_model: Entity<M>,
    initial: Option<Arc<InitialFn<K, M>>>,
    sources: Vec<(String, MakeSource<M, K>)>,
    checkpoints: Option<Checkpoints>,
    revision: Option<Revision>,
    removal: Option<Removal>,
    outbox: Option<OutboxDecl<M>>,
    sources_of: Option<Arc<SourcesOfFn<K>>>,
    max_attempts: u32,
    concurrency: Option<usize>,
}

impl<M, K> MultiProjection<M, K>
where
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    /// Starts declaring a projection named `name` into `read_model`.
    pub fn builder(name: impl Into<String>, read_model: Entity<M>) -> MultiProjectionBuilder<M, K> {
        MultiProjectionBuilder {
            name: name.into(),
            read_model,
            initial: None,
            sources: Vec::new(),
            checkpoints: None,
            revision: None,
            removal: None,
            outbox: None,
            sources_of: None,
            max_attempts: MAX_ATTEMPTS,
            concurrency: None,
        }
    }

    /// The projection's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The read model.
    pub fn read_model(&self) -> &Entity<M> {
        &self.core.read_model
    }

    /// The sources' names, in declaration order.
    pub fn source_names(&self) -> Vec<&str> {
        self.core.sources.iter().map(|s| s.name()).collect()
    }

    /// Applies stored events directly (not from a change feed): each goes
    /// to every source that reads its stream, grouped by row. Redelivered
    /// events are recognised by the rows' checkpoints.
    pub async fn apply_batch(&self, events: Vec<EventItem>) -> Result<Vec<RowOutcome<M>>, Error> {
        self.apply_events(events, None).await
    }

    /// [`apply_batch`](Self::apply_batch), delivering each written row's
    /// effects in order right after its write (claim → deliver → delete,
    /// as [`drain`](Self::drain)). A failed delivery leaves the effect at
    /// the head of its row, reported in the row's
    /// [`delivery`](RowOutcome::delivery); it never fails the row.
    pub async fn apply_batch_delivering(
        &self,
        events: Vec<EventItem>,
        deliver: &dyn Deliver,
    ) -> Result<Vec<RowOutcome<M>>, Error> {
        self.apply_events(events, Some(deliver)).await
    }

    async fn apply_events(
        &self,
        events: Vec<EventItem>,
        deliver: Option<&dyn Deliver>,
    ) -> Result<Vec<RowOutcome<M>>, Error> {
        let mut prepared = Vec::new();
        for item in events {
            for (at, source) in self.core.sources.iter().enumerate() {
                if source.reads(&item.stream) {
                    let event = source.prepare(at, item.clone())?;
                    if let Some(row) = &event.row {
                        self.core.read_model.key(row)?;
                    }
                    prepared.push((None, event));
                }
            }
        }
        Ok(self.core.apply(prepared, deliver).await.0)
    }

    /// Decodes stored events (with their batch positions) for every source
    /// that reads them and applies them; reports the positions that were
    /// not applied.
    pub(crate) async fn apply_items(
        &self,
        items: Vec<(usize, EventItem)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        let mut failures = Vec::new();
        let mut prepared = Vec::with_capacity(items.len());
        for (index, item) in items {
            let readers: Vec<usize> = (0..self.core.sources.len())
                .filter(|&s| self.core.sources[s].reads(&item.stream))
                .collect();
            for at in readers {
                match self.core.sources[at].prepare(at, item.clone()) {
                    Ok(event) => prepared.push((Some(index), event)),
                    Err(e) => failures.push(RecordFailure::new(index, &e)),
                }
            }
        }
        let (outcomes, mut row_failures) = self.core.apply(prepared, deliver).await;
        failures.append(&mut row_failures);
        (outcomes, failures)
    }

    /// Re-derives the row `key` from `instances`: folds each instance's
    /// events keyed to the row from `initial` (sources in declaration
    /// order, then stream id, then version), writes every checkpoint from
    /// scratch (a field-mapped scalar goes to the first instance in fold
    /// order) with the next revision. Safe alongside live delivery: the
    /// write is conditioned on the revision read.
    pub async fn rebuild(
        &self,
        key: K,
        instances: &RebuildInstances,
    ) -> Result<RowOutcome<M>, Error> {
        self.core.rebuild(key, instances).await
    }

    /// [`rebuild`](Self::rebuild) from the instances `sources_of` finds.
    pub async fn rebuild_found(&self, key: K) -> Result<RowOutcome<M>, Error> {
        let find = self.sources_of.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "projection {} declares no sources_of: name the instances to rebuild from",
                self.core.name
            ))
        })?;
        let instances = find(&key).await?;
        self.core.rebuild(key, &instances).await
    }

    /// Brings every instance the row's checkpoints know up to its head.
    pub async fn catch_up(&self, key: K) -> Result<RowOutcome<M>, Error> {
        self.core.catch_up(key).await
    }

    /// The row's checkpoints: (source, instance, version), by source then
    /// instance. Empty when there is no row.
    pub async fn checkpoints(&self, key: &K) -> Result<Vec<(String, StreamId, u64)>, Error> {
        self.core.checkpoints_of(key).await
    }

    /// Delivers the pending effects of the row `key`, strictly in order:
    /// claim the head, deliver it, delete it, repeat (see
    /// [`Outbox::drain`](crate::Outbox::drain)). `InvalidArgument` when the
    /// projection has no outbox.
    pub async fn drain(&self, key: &K, deliver: &dyn Deliver) -> Result<DrainReport, Error> {
        let row = self.core.read_model.key(key)?;
        self.outbox()?.drain(&row, deliver).await
    }

    /// Delivers the pending effects of every row that has some, found
    /// through the outbox index (see
    /// [`Outbox::drain_pending`](crate::Outbox::drain_pending)).
    pub async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error> {
        self.outbox()?.drain_pending(deliver).await
    }

    /// The pending effects of the row `key`: how many, the head, the
    /// oldest claim.
    pub async fn pending(&self, key: &K) -> Result<RowPending, Error> {
        let row = self.core.read_model.key(key)?;
        self.outbox()?.pending(&row).await
    }

    /// Every row with pending effects (through the outbox index).
    pub async fn pending_rows(&self) -> Result<Vec<RowPending>, Error> {
        self.outbox()?.pending_rows().await
    }

    /// Unparks the row `key`: the next drain tries its parked head again
    /// (see [`Outbox::unpark`](crate::Outbox::unpark)).
    pub async fn unpark(&self, key: &K) -> Result<Option<crate::Parked>, Error> {
        let row = self.core.read_model.key(key)?;
        self.outbox()?.unpark(&row).await
    }

    /// Drops the row's parked head `effect`, so the row goes on (see
    /// [`Outbox::drop_parked`](crate::Outbox::drop_parked)).
    pub async fn drop_parked(&self, key: &K, effect: &crate::Effect) -> Result<bool, Error> {
        let row = self.core.read_model.key(key)?;
        self.outbox()?.drop_parked(&row, effect).await
    }

    /// Whether it declares an outbox.
    pub fn has_outbox(&self) -> bool {
        self.core.outbox.is_some()
    }

    fn outbox(&self) -> Result<&Arc<dyn EffectCommit>, Error> {
        self.core.outbox.as_ref().ok_or_else(|| {
            Error::InvalidArgument(format!("projection {} declares no outbox", self.core.name))
        })
    }

    /// Whether one of its sources reads this stream.
    pub(crate) fn reads(&self, stream: &StreamIdentity) -> bool {
        self.core.sources.iter().any(|s| s.reads(stream))
    }
}

impl<M, K> MultiProjectionBuilder<M, K>
where
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    /// The state of a row before its first event (and after a removal).
    pub fn initial(mut self, initial: impl Fn(&K) -> M + Send + Sync + 'static) -> Self {
        self.initial = Some(Arc::new(initial));
        self
    }

    /// Declares the source `name` reading `stream`; `declare` sets its key,
    /// evolve, terminal and mode on a helper typed by the stream's events.
    /// Within one write, sources fold in declaration order, then by stream
    /// id, then by version.
    pub fn source<E>(
        mut self,
        name: impl Into<String>,
        stream: EventStream<E>,
        declare: impl FnOnce(SourceBuilder<E, M, K>) -> SourceBuilder<E, M, K>,
    ) -> Self
    where
        E: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let name = name.into();
        let declared = declare(SourceBuilder {
            stream,
            key: None,
            evolve: None,
            terminal: Arc::new(|_| false),
            mode: Mode::Fold,
            restarts: false,
        });
        let label = name.clone();
        let make: MakeSource<M, K> = Box::new(move |effects| {
            let missing =
                |what: &str| Error::InvalidArgument(format!("source {label} needs {what}"));
            Ok(Arc::new(StreamSource {
                key: declared.key.clone().ok_or_else(|| missing("key"))?,
                evolve: declared.evolve.clone().ok_or_else(|| missing("evolve"))?,
                terminal: declared.terminal,
                mode: declared.mode,
                restarts: declared.restarts,
                stream: declared.stream,
                name: label,
                effects,
            }) as Arc<dyn Source<M, K>>)
        });
        self.sources.push((name, make));
        self
    }

    /// Where rows keep their per-instance checkpoints.
    pub fn checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// The revision (a field name, or a [`Revision`] with its initial
    /// value): required.
    pub fn revision(mut self, revision: impl Into<Revision>) -> Self {
        self.revision = Some(revision.into());
        self
    }

    /// Lets `evolve` remove rows (leaving tombstones).
    pub fn removal(mut self, removal: Removal) -> Self {
        self.removal = Some(removal);
        self
    }

    /// An outbox: `effects` returns what an applied event produces given
    /// the row's next state (`None` when it removed the row), encoded with
    /// serde and committed by `commit` in the same transaction as the row.
    pub fn outbox<X: Serialize + 'static>(
        mut self,
        commit: Arc<dyn EffectCommit>,
        effects: impl Fn(&EffectEvent<'_>, Option<&M>) -> Vec<X> + Send + Sync + 'static,
    ) -> Self {
        self.outbox = Some(OutboxDecl {
            effects: Arc::new(move |event, next| encode_effects(effects(event, next))),
            commit,
        });
        self
    }

    /// Finds the instances a row is rebuilt from (for example over a
    /// stream index), for [`MultiProjection::rebuild_found`].
    pub fn sources_of(
        mut self,
        find: impl Fn(&K) -> BoxFuture<'static, Result<RebuildInstances, Error>> + Send + Sync + 'static,
    ) -> Self {
        self.sources_of = Some(Arc::new(find));
        self
    }

    /// How many times a write lost to a concurrent writer is retried
    /// (default 32), each after a jittered backoff.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How many rows a batch applies at once. Without it, the read model's
    /// table decides ([`Table::rows_at_once`](crate::Table::rows_at_once): 16 on DynamoDB, the whole
    /// batch on the embedded table).
    pub fn concurrency(mut self, rows: usize) -> Self {
        self.concurrency = Some(rows.max(1));
        self
    }

    /// Builds the projection; `InvalidArgument` when a required part is
    /// missing or the declaration does not hold together.
    pub fn build(self) -> Result<MultiProjection<M, K>, Error> {
        let name = self.name;
        let invalid = |what: String| Error::InvalidArgument(format!("projection {name}: {what}"));
        let initial = self
            .initial
            .ok_or_else(|| invalid("needs initial".into()))?;
        let checkpoints = self
            .checkpoints
            .ok_or_else(|| invalid("needs checkpoints".into()))?;
        let revision = self.revision.ok_or_else(|| {
            invalid("needs a revision (required by multi-source projections)".into())
        })?;
        if self.sources.is_empty() {
            return Err(invalid("needs at least one source".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for (source, _) in &self.sources {
            if source.is_empty() || source.contains('#') {
                return Err(invalid(format!(
                    "source name {source:?} must be non-empty and free of '#'"
                )));
            }
            if !seen.insert(source.as_str()) {
                return Err(invalid(format!("source {source} is declared twice")));
            }
            if checkpoints.map.is_none() && !checkpoints.fields.contains_key(source) {
                return Err(invalid(format!(
                    "source {source} has no checkpoint field and no checkpoint map is declared"
                )));
            }
        }
        if let Some(unknown) = checkpoints
            .fields
            .keys()
            .find(|f| !seen.contains(f.as_str()))
        {
            return Err(invalid(format!(
                "checkpoint field for unknown source {unknown}"
            )));
        }
        // One attribute for two purposes: each would take the other's value
        // for its own (a checkpoint read as another instance's, events
        // dropped as already applied).
        let mut used = std::collections::HashSet::new();
        let attributes = checkpoints.attributes();
        if let Some(twice) = attributes
            .iter()
            .copied()
            .chain([revision.field.as_str()])
            .find(|a| !used.insert(*a))
        {
            return Err(invalid(format!(
                "attribute {twice} is declared twice among the checkpoint map, the sources' checkpoint and instance fields and the revision"
            )));
        }
        let schema = self.read_model.table().schema();
        let reserved: Vec<&str> = schema.key.names().collect();
        if let Some(clash) = attributes
            .into_iter()
            .chain([revision.field.as_str()])
            .find(|a| reserved.contains(a))
        {
            return Err(invalid(format!("{clash} is a key attribute of the table")));
        }
        if let Some(removal) = &self.removal {
            if removal.ttl.is_some() && schema.ttl_attribute.is_none() {
                return Err(invalid(
                    "removal has a ttl but the table schema names no TTL attribute".into(),
                ));
            }
        }
        let effects = self.outbox.as_ref().map(|o| Arc::clone(&o.effects));
        let mut sources = Vec::with_capacity(self.sources.len());
        for (_, make) in self.sources {
            sources.push(make(effects.clone())?);
        }
        let restarts_restricted = sources.iter().any(|s| s.restarts_removed_rows());
        if restarts_restricted && self.removal.is_none() {
            return Err(invalid(
                "a source restarts removed rows, but the projection declares no removal".into(),
            ));
        }
        let concurrency = self
            .concurrency
            .unwrap_or_else(|| self.read_model.table().rows_at_once());
        let core = RowCore {
            name,
            read_model: self.read_model,
            initial,
            sources,
            slots: Arc::new(checkpoints.clone()),
            revision: Some(revision),
            removal: self.removal,
            restarts_restricted,
            outbox: self.outbox.map(|o| o.commit),
            on_failure: OnFailure::DropInstance,
            max_attempts: self.max_attempts,
            concurrency,
        };
        Ok(MultiProjection {
            core: Arc::new(core),
            checkpoints,
            sources_of: self.sources_of,
        })
    }
}
