//! Declarations: what a projection reads, keeps and writes, with typed
//! handles to each input and output.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{JsonStream, Route, StateStream};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::commit::Compensate;
use crate::handler::Kernel;
use crate::handles::{
    Collection, Decoder, Input, InputSpec, Output, OutputKind, OutputSpec, Place, StateOutput,
};
use crate::params::param_names;
use crate::{CommitKind, ProjectionError, Result};

/// The bounds every parameter type meets: serde both ways, cloneable,
/// shareable across tasks.
pub trait Params: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Params for T {}

/// The bounds every state type meets: serde both ways (it is
/// checkpointed), cloneable, sendable.
pub trait State: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> State for T {}

/// Which constructor built a declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// One entry updates the state.
    Fold,
    /// One batch (or each entry) runs effects.
    Process,
    /// One entry writes output items.
    Emit,
    /// One entry updates the state and writes output items.
    MapAccum,
    /// One batch updates the state and writes output items.
    MapAccumBatch,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Fold => "fold",
            Kind::Process => "process",
            Kind::Emit => "emit",
            Kind::MapAccum => "mapAccum",
            Kind::MapAccumBatch => "mapAccumBatch",
        }
    }

    pub(crate) fn has_state(self) -> bool {
        matches!(self, Kind::Fold | Kind::MapAccum | Kind::MapAccumBatch)
    }

    fn has_outputs(self) -> bool {
        matches!(self, Kind::Emit | Kind::MapAccum | Kind::MapAccumBatch)
    }
}

/// Every declaration gets its own number, so that its handles cannot be
/// mistaken for another's.
static DECLARATIONS: AtomicU64 = AtomicU64::new(1);

/// A declaration being built: its id, parameters `P`, inputs and outputs.
///
/// Adding an input or output returns its typed handle; a constructor
/// ([`fold`](Declare::fold), [`emit`](Declare::emit),
/// [`map_accum`](Declare::map_accum), [`process_each`](Declare::process_each),
/// [`process`](Declare::process), [`map_accum_batch`](Declare::map_accum_batch))
/// takes the handlers and finishes it into a [`Projection`], checking the
/// whole declaration: a broken rule fails with `load/invalid-options`.
///
/// ```
/// use eddy_projection::{Commit, Declare};
/// use eddy_streams::JsonStream;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = JsonStream::<f64>::new("Shop/Orders", "orders")?;
/// let refunds = JsonStream::<u32>::new("Shop/Refunds", "refunds")?;
/// let declare = Declare::<()>::new("balance");
/// let orders = declare.input("orders", &orders);
/// let refunds = declare.input("refunds", &refunds);
/// let balance = declare
///     .fold(0.0)
///     .on(orders, |sum, entry, _unit| sum + entry.item)
///     .on(refunds, |sum, entry, _unit| sum - f64::from(*entry.item))
///     .build()?;
/// assert_eq!(balance.id(), "balance");
/// # Ok(()) }
/// ```
///
/// Adding an input or output takes `&self` (the declaration records it
/// behind a `RefCell`), so a declaration needs no `mut`.
pub struct Declare<P> {
    pub(crate) id: String,
    pub(crate) number: u64,
    pub(crate) version: u32,
    pub(crate) inputs: RefCell<Vec<InputSpec>>,
    pub(crate) outputs: RefCell<Vec<OutputSpec>>,
    pub(crate) forget_gone: bool,
    /// Mistakes found while declaring, reported when the constructor runs.
    pub(crate) mistakes: RefCell<Vec<String>>,
    params: std::marker::PhantomData<fn() -> P>,
}

impl<P> fmt::Debug for Declare<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declare")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl<P: Params> Declare<P> {
    /// A declaration named `id` (the checkpoint key's first part).
    pub fn new(id: impl Into<String>) -> Self {
        Declare {
            id: id.into(),
            number: DECLARATIONS.fetch_add(1, Ordering::Relaxed),
            version: 1,
            inputs: RefCell::default(),
            outputs: RefCell::default(),
            forget_gone: true,
            mistakes: RefCell::default(),
            params: std::marker::PhantomData,
        }
    }

    /// This declaration with another version (generation), part of the
    /// checkpoint key: bump it to rebuild from the start. Defaults to 1.
    pub fn with_version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// This declaration keeping a binding's checkpoint after the final
    /// unit of a gone input (by default it is forgotten).
    pub fn with_keep_gone(mut self) -> Self {
        self.forget_gone = false;
        self
    }

    fn place(&self, index: usize) -> Place {
        Place {
            declaration: self.number,
            index,
        }
    }

    fn add_input<T>(&self, name: &str, route: Route, decode: Decoder) -> Input<T> {
        let mut inputs = self.inputs.borrow_mut();
        inputs.push(InputSpec {
            name: name.to_owned(),
            route,
            decode,
            accepts_dropped: false,
            accepts_compaction: false,
        });
        Input::new(self.place(inputs.len() - 1))
    }

    /// Adds an input from a typed JSON stream: its entries and slices give
    /// `T` items.
    pub fn input<T>(&self, name: &str, stream: &JsonStream<T>) -> Input<T>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let codec = stream.clone();
        let decode: Decoder = Arc::new(move |messages| {
            let items = messages
                .iter()
                .enumerate()
                .map(|(i, m)| codec.decode(m).map_err(|e| (i, e.to_string())))
                .collect::<std::result::Result<Vec<T>, _>>()?;
            Ok(Box::new(items))
        });
        self.add_input(name, stream.route().clone(), decode)
    }

    /// Adds an input at a bare route whose JSON messages decode into `T`.
    pub fn input_route<T>(&self, name: &str, route: Route) -> Input<T>
    where
        T: DeserializeOwned + Send + Sync + 'static,
    {
        let decode: Decoder = Arc::new(|messages| {
            let items = messages
                .iter()
                .enumerate()
                .map(|(i, m)| serde_json::from_slice(m).map_err(|e| (i, e.to_string())))
                .collect::<std::result::Result<Vec<T>, _>>()?;
            Ok(Box::new(items))
        });
        self.add_input(name, route, decode)
    }

    /// Adds an input at `route` whose messages are not decoded: its items
    /// are the raw messages, so any stream can be this input.
    pub fn input_bytes(&self, name: &str, route: Route) -> Input<Bytes> {
        let decode: Decoder = Arc::new(|messages| Ok(Box::new(messages.to_vec())));
        self.add_input(name, route, decode)
    }

    /// Lets a binding of `input` go on from the earliest message its
    /// stream keeps when the stream's retention policy dropped messages
    /// the binding had not read (for a new binding: the stream's first
    /// messages), instead of failing with `history-unavailable`. The unit
    /// that goes on reads from the earliest kept offset; the dropped
    /// messages are never handled. Right only for handlers that do not
    /// need every message (a latest-value fold, a recent window).
    pub fn accept_dropped_history<T>(&self, input: &Input<T>) {
        self.mark_input(input, "dropped history", |spec| spec.accepts_dropped = true);
    }

    /// Lets a binding of `input` read a compacted stream (one created with
    /// an `Eddy-Compaction` policy) where a pass dropped messages the
    /// binding had not read, instead of failing with `history-unavailable`.
    ///
    /// Compaction drops a state change that a later change of the same
    /// row supersedes, so only a handler whose result depends on the
    /// latest message of each key alone is right on what it keeps: one
    /// that materializes rows (upserts and deletes by key), or keeps the
    /// latest value per key. A handler that counts, sums or otherwise
    /// folds every message would silently get another result.
    ///
    /// The handler sees the messages the stream kept, in order, each at
    /// its own offset: [`Entry::offset`](crate::Entry::offset) and
    /// [`Slice::offset_of`](crate::Slice::offset_of) give the store's
    /// offsets, with gaps where messages were dropped, and a unit's
    /// [`Range::len`](crate::Range::len) counts the items it holds, not
    /// the positions from its start to its end. A pinned unit replays
    /// exactly the items it pinned: if a later pass dropped some of them,
    /// the replay fails with `range-unreproducible` and the pin stays.
    ///
    /// The store keeps a delete for the stream's delete lifetime (one day
    /// by default), then drops it with the row's older changes. A binding
    /// further behind than that, resuming from its checkpoint before the
    /// dropped delete, may have read an older change of the row and would
    /// keep it: it fails with `history-unavailable` instead, naming the
    /// delete's offset. Keep such bindings within the lifetime, or
    /// rebuild one that failed from the start
    /// ([`Host::forget`](crate::Host::forget), then run it). A binding
    /// that reads from the stream's start, or that read the stream last
    /// after the pass (the stream dropped no delete since), goes on: it
    /// cannot hold such a row.
    pub fn accept_compaction<T>(&self, input: &Input<T>) {
        self.mark_input(input, "compaction", |spec| spec.accepts_compaction = true);
    }

    /// Sets an option of `input`, or records the mistake when the handle
    /// is another declaration's.
    fn mark_input<T>(&self, input: &Input<T>, what: &str, set: impl FnOnce(&mut InputSpec)) {
        let mut inputs = self.inputs.borrow_mut();
        match inputs.get_mut(input.place.index) {
            Some(spec) if input.place.declaration == self.number => set(spec),
            _ => self.mistakes.borrow_mut().push(format!(
                "input #{} of another declaration cannot accept {what} here",
                input.place.index
            )),
        }
    }

    fn add_output(&self, name: &str, route: Route, kind: OutputKind, foreign: bool) -> Place {
        let mut outputs = self.outputs.borrow_mut();
        outputs.push(OutputSpec {
            name: name.to_owned(),
            route,
            kind,
            foreign,
        });
        self.place(outputs.len() - 1)
    }

    /// Adds a JSON output on this projection's owner (the producer creates
    /// it when it is absent): handlers write `T` items to it.
    pub fn output<T>(&self, name: &str, stream: &JsonStream<T>) -> Output<T>
    where
        T: Serialize + DeserializeOwned,
    {
        Output::new(self.add_output(name, stream.route().clone(), OutputKind::Json, false))
    }

    /// Adds a JSON output on another owner: it must exist before the first
    /// append, or the unit fails with `pin/invalid-output`.
    pub fn foreign_output<T>(&self, name: &str, stream: &JsonStream<T>) -> Output<T>
    where
        T: Serialize + DeserializeOwned,
    {
        Output::new(self.add_output(name, stream.route().clone(), OutputKind::Json, true))
    }

    fn state_kind(stream: &StateStream) -> OutputKind {
        OutputKind::State {
            stream: stream.clone(),
            collections: stream.collections().map(str::to_owned).collect(),
        }
    }

    /// Adds a state output on this projection's owner; take handles to its
    /// collections with [`collection`](Declare::collection).
    pub fn state_output(&self, name: &str, stream: &StateStream) -> StateOutput {
        let kind = Self::state_kind(stream);
        StateOutput {
            place: self.add_output(name, stream.route().clone(), kind, false),
        }
    }

    /// Adds a state output on another owner (see
    /// [`foreign_output`](Declare::foreign_output)).
    pub fn foreign_state_output(&self, name: &str, stream: &StateStream) -> StateOutput {
        let kind = Self::state_kind(stream);
        StateOutput {
            place: self.add_output(name, stream.route().clone(), kind, true),
        }
    }

    /// A handle to the collection `name` of the state output `output`,
    /// whose rows are `R`. A collection the stream does not declare (or an
    /// output of another declaration) fails the constructor with
    /// `load/invalid-options`; that `R` is the row type the stream declared
    /// is checked when a row is written, before anything of its unit is.
    pub fn collection<R: Serialize>(&self, output: StateOutput, name: &str) -> Collection<R> {
        let index = match self.outputs.borrow().get(output.place.index) {
            Some(OutputSpec {
                kind: OutputKind::State { collections, .. },
                ..
            }) if output.place.declaration == self.number => {
                collections.iter().position(|c| c == name)
            }
            _ => None,
        };
        index.map_or_else(
            || {
                self.mistakes.borrow_mut().push(format!(
                    "state output #{} has no collection `{name}`",
                    output.place.index
                ));
                Collection::new(output, usize::MAX)
            },
            |index| Collection::new(output, index),
        )
    }

    /// Checks the declaration for the constructor `kind` committed with
    /// `commit`: a `process` in a SQL transaction may declare outputs,
    /// which it writes in that transaction.
    pub(crate) fn check(
        &self,
        kind: Kind,
        commit: CommitKind,
        names: Option<&[String]>,
    ) -> Result<()> {
        let invalid = |reason: String| {
            Err(ProjectionError::invalid(format!(
                "projection `{}`: {reason}",
                self.id
            )))
        };
        let (inputs, outputs) = (self.inputs.borrow(), self.outputs.borrow());
        if let Some(mistake) = self.mistakes.borrow().first() {
            return invalid(mistake.clone());
        }
        if self.id.is_empty() {
            return invalid("the id is empty".into());
        }
        if inputs.is_empty() {
            return invalid("declare at least one input".into());
        }
        if kind.has_outputs() && outputs.is_empty() {
            return invalid(format!("{} needs at least one output", kind.name()));
        }
        let optional = kind == Kind::Process && commit == CommitKind::Transaction;
        if !kind.has_outputs() && !optional && !outputs.is_empty() {
            return invalid(format!("{} declares no outputs", kind.name()));
        }
        let mut names_seen = BTreeSet::new();
        for name in inputs
            .iter()
            .map(|i| &i.name)
            .chain(outputs.iter().map(|o| &o.name))
        {
            if name.is_empty() || !names_seen.insert(name.as_str()) {
                return invalid(format!(
                    "input and output names must be unique and non-empty (`{name}`)"
                ));
            }
        }
        let mut templates = BTreeSet::new();
        for input in inputs.iter() {
            templates.insert(input.route.template());
        }
        for output in outputs.iter() {
            if !templates.insert(output.route.template()) {
                return invalid(format!(
                    "output `{}` names stream `{}`, which another output or an input already names",
                    output.name,
                    output.route.template()
                ));
            }
        }
        if let Some(names) = names {
            let routes = inputs
                .iter()
                .map(|i| ("input", &i.name, &i.route))
                .chain(outputs.iter().map(|o| ("output", &o.name, &o.route)));
            for (what, name, route) in routes {
                if let Some(extra) = route.params().find(|p| !names.iter().any(|n| n == p)) {
                    return invalid(format!(
                        "{what} `{name}` route `{}` uses parameter `{extra}`, which the projection's parameters do not declare",
                        route.template()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks and finishes the declaration.
    pub(crate) fn finish<S: State>(
        self,
        kind: Kind,
        commit: CommitKind,
        compensation: Option<Compensate<P, S>>,
        initial: S,
        kernel: Kernel<P, S>,
    ) -> Result<Projection<P, S>> {
        let param_names = param_names::<P>();
        self.check(kind, commit, param_names.as_deref())?;
        Ok(Projection {
            inner: Arc::new(Declared {
                id: self.id,
                number: self.number,
                version: self.version,
                kind,
                inputs: self.inputs.into_inner(),
                outputs: self.outputs.into_inner(),
                initial,
                kernel,
                commit,
                compensation,
                forget_gone: self.forget_gone,
                param_names,
            }),
        })
    }
}

pub(crate) struct Declared<P, S> {
    pub(crate) id: String,
    pub(crate) number: u64,
    pub(crate) version: u32,
    pub(crate) kind: Kind,
    pub(crate) inputs: Vec<InputSpec>,
    pub(crate) outputs: Vec<OutputSpec>,
    pub(crate) initial: S,
    pub(crate) kernel: Kernel<P, S>,
    pub(crate) commit: CommitKind,
    pub(crate) compensation: Option<Compensate<P, S>>,
    pub(crate) forget_gone: bool,
    pub(crate) param_names: Option<Vec<String>>,
}

/// A declared projection: inert until bound with [`at`](Projection::at)
/// and run by a [`Host`](crate::Host). Cheap to clone.
pub struct Projection<P, S> {
    pub(crate) inner: Arc<Declared<P, S>>,
}

impl<P, S> Clone for Projection<P, S> {
    fn clone(&self) -> Self {
        Projection {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<P, S> fmt::Debug for Projection<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Projection")
            .field("id", &self.inner.id)
            .field("version", &self.inner.version)
            .field("kind", &self.inner.kind)
            .field("commit", &self.inner.commit)
            .finish()
    }
}

impl<P: Params, S: State> Projection<P, S> {
    /// The id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The version.
    pub fn version(&self) -> u32 {
        self.inner.version
    }

    /// The constructor that built it.
    pub fn kind(&self) -> Kind {
        self.inner.kind
    }

    /// The commit strategy.
    pub fn commit_kind(&self) -> CommitKind {
        self.inner.commit
    }

    /// Whether it keeps state (`fold`, `mapAccum`, `mapAccumBatch`).
    pub fn has_state(&self) -> bool {
        self.inner.kind.has_state()
    }

    /// The initial state.
    pub fn initial(&self) -> &S {
        &self.inner.initial
    }

    /// The input names, in declaration order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inner.inputs.iter().map(|i| i.name.as_str())
    }

    /// The output names, in declaration order.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.inner.outputs.iter().map(|o| o.name.as_str())
    }

    /// The parameter names, when the parameter type is a struct.
    pub fn param_names(&self) -> Option<&[String]> {
        self.inner.param_names.as_deref()
    }

    pub(crate) fn inputs(&self) -> &[InputSpec] {
        &self.inner.inputs
    }

    pub(crate) fn outputs(&self) -> &[OutputSpec] {
        &self.inner.outputs
    }
}
