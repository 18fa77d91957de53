//! Declarations: inert values that say what a projection reads, keeps,
//! writes and how it commits.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use eddy_streams::{JsonStream, Route};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::handler::{
    emit_kernel, fold_kernel, map_accum_batch_kernel, map_accum_kernel, Kernel, ProcessHandler,
};
use crate::params::param_names;
use crate::streams::{Input, IntoOutput, Output};
use crate::{Batch, Commit, CommitKind, Emits, Entry, ProjectionError, Result, Step, Unit};

/// The bounds every parameter type meets: serde both ways, cloneable,
/// shareable across tasks.
pub trait Params: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Params for T {}

/// The bounds every state type meets: serde both ways (it is
/// checkpointed), cloneable, sendable.
pub trait State: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> State for T {}

/// The bounds every item type meets.
pub trait Item: Send + Sync + 'static {}
impl<T: Send + Sync + 'static> Item for T {}

/// Which constructor built a declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// One entry updates the state.
    Fold,
    /// One batch runs effects.
    Process,
    /// One entry returns output items.
    Emit,
    /// One entry updates the state and returns output items.
    MapAccum,
    /// One batch updates the state and returns output items.
    MapAccumBatch,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Fold => "fold",
            Kind::Process => "process",
            Kind::Emit => "emit",
            Kind::MapAccum => "mapAccum",
            Kind::MapAccumBatch => "mapAccumBatch",
        }
    }

    fn has_state(self) -> bool {
        matches!(self, Kind::Fold | Kind::MapAccum | Kind::MapAccumBatch)
    }

    fn has_outputs(self) -> bool {
        matches!(self, Kind::Emit | Kind::MapAccum | Kind::MapAccumBatch)
    }

    fn fits(self, commit: CommitKind) -> bool {
        match self {
            Kind::Fold => matches!(commit, CommitKind::Checkpoint | CommitKind::AtLeastOnce),
            Kind::Process => commit == CommitKind::AtLeastOnce,
            Kind::Emit | Kind::MapAccum | Kind::MapAccumBatch => commit == CommitKind::Producer,
        }
    }
}

/// The start of every declaration: its id, parameters `P`, item type `I`,
/// inputs and outputs. Finish it with a constructor ([`fold`](Declare::fold),
/// [`process`](Declare::process), [`emit`](Declare::emit),
/// [`map_accum`](Declare::map_accum),
/// [`map_accum_batch`](Declare::map_accum_batch)), which checks the whole
/// declaration and fails with `load/invalid-options` when a rule is broken.
pub struct Declare<P, I> {
    id: String,
    version: u32,
    inputs: Vec<Input<I>>,
    outputs: Vec<Output>,
    forget_gone: bool,
    params: std::marker::PhantomData<fn() -> P>,
}

impl<P, I> fmt::Debug for Declare<P, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Declare")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl<P: Params, I: Item> Declare<P, I> {
    /// A declaration named `id` (the checkpoint key's first part).
    pub fn new(id: impl Into<String>) -> Self {
        Declare {
            id: id.into(),
            version: 1,
            inputs: Vec::new(),
            outputs: Vec::new(),
            forget_gone: true,
            params: std::marker::PhantomData,
        }
    }

    /// The version (generation) of the declaration, part of the checkpoint
    /// key: bump it to rebuild from the start. Defaults to 1.
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Adds an input from a typed JSON stream whose items convert into `I`.
    pub fn input<T>(self, name: &str, stream: &JsonStream<T>) -> Self
    where
        T: Serialize + DeserializeOwned + Into<I> + 'static,
    {
        self.with_input(Input::json(name, stream))
    }

    /// Adds an input at a bare route whose messages decode into `I`.
    pub fn input_route(self, name: &str, route: Route) -> Self
    where
        I: DeserializeOwned,
    {
        self.with_input(Input::route(name, route))
    }

    /// Adds a prepared input.
    pub fn with_input(mut self, input: Input<I>) -> Self {
        self.inputs.push(input);
        self
    }

    /// Adds an output on this projection's owner: the producer creates it
    /// when it is absent.
    pub fn output(mut self, name: &str, stream: impl IntoOutput) -> Self {
        self.outputs.push(stream.into_output(name));
        self
    }

    /// Adds an output on another owner: it must exist before the first
    /// append, or the unit fails with `pin/invalid-output`.
    pub fn foreign_output(mut self, name: &str, stream: impl IntoOutput) -> Self {
        let mut output = stream.into_output(name);
        output.foreign = true;
        self.outputs.push(output);
        self
    }

    /// Keeps the binding's checkpoint after the final unit of a gone input
    /// (by default it is forgotten).
    pub fn keep_gone(mut self) -> Self {
        self.forget_gone = false;
        self
    }

    /// `fold`: each entry updates the state; committed with
    /// [`Commit::checkpoint`].
    pub fn fold<S, F, R>(self, initial: S, fold: F) -> Result<Projection<P, I, S>>
    where
        S: State,
        F: Fn(S, Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<S>>,
    {
        self.fold_with(Commit::checkpoint(), initial, fold)
    }

    /// `fold` with another commit ([`Commit::at_least_once`]).
    pub fn fold_with<S, F, R>(
        self,
        commit: Commit<P, S>,
        initial: S,
        fold: F,
    ) -> Result<Projection<P, I, S>>
    where
        S: State,
        F: Fn(S, Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<S>>,
    {
        self.finish(Kind::Fold, commit, initial, fold_kernel(fold))
    }

    /// `process`: each batch runs effects; no state, no outputs. Takes a
    /// batch closure `f(batch, unit)` or [`each`](crate::each)`(f)`.
    pub fn process<H, M>(self, commit: Commit<P, ()>, handler: H) -> Result<Projection<P, I, ()>>
    where
        H: ProcessHandler<P, I, M>,
    {
        self.finish(Kind::Process, commit, (), handler.into_kernel())
    }

    /// `process` with the [`each`](crate::each) adapter: `f(entry, unit)`
    /// runs for each entry, one at a time, in input declaration order.
    /// (The same as `process(commit, each(f))`, with the closure's
    /// argument types inferred.)
    pub fn process_each<F, R>(self, commit: Commit<P, ()>, f: F) -> Result<Projection<P, I, ()>>
    where
        F: Fn(Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<()>> + 'static,
    {
        self.process(commit, crate::each(f))
    }

    /// `emit`: each entry returns output items; no state.
    pub fn emit<F, R>(self, commit: Commit<P, ()>, emit: F) -> Result<Projection<P, I, ()>>
    where
        F: Fn(Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<Emits>>,
    {
        self.finish(Kind::Emit, commit, (), emit_kernel(emit))
    }

    /// `mapAccum`: each entry updates the state and returns output items,
    /// as `(state, emits)`.
    pub fn map_accum<S, F, R>(
        self,
        commit: Commit<P, S>,
        initial: S,
        map_accum: F,
    ) -> Result<Projection<P, I, S>>
    where
        S: State,
        F: Fn(S, Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<(S, Emits)>>,
    {
        self.finish(Kind::MapAccum, commit, initial, map_accum_kernel(map_accum))
    }

    /// `mapAccumBatch`: each batch updates the state and returns output
    /// items. It must give the same final rows for any unit size.
    pub fn map_accum_batch<S, F, R>(
        self,
        commit: Commit<P, S>,
        initial: S,
        map_accum_batch: F,
    ) -> Result<Projection<P, I, S>>
    where
        S: State,
        F: Fn(S, &Batch<I>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<(S, Emits)>>,
    {
        self.finish(
            Kind::MapAccumBatch,
            commit,
            initial,
            map_accum_batch_kernel(map_accum_batch),
        )
    }

    fn finish<S: State>(
        self,
        kind: Kind,
        commit: Commit<P, S>,
        initial: S,
        kernel: Kernel<P, I, S>,
    ) -> Result<Projection<P, I, S>> {
        let param_names = param_names::<P>();
        self.check(kind, commit.kind, param_names.as_deref())?;
        Ok(Projection {
            inner: Arc::new(Declared {
                id: self.id,
                version: self.version,
                kind,
                inputs: self.inputs,
                outputs: self.outputs,
                initial,
                kernel,
                commit,
                forget_gone: self.forget_gone,
                param_names,
            }),
        })
    }

    fn check(&self, kind: Kind, commit: CommitKind, names: Option<&[String]>) -> Result<()> {
        let invalid = |reason: String| {
            Err(ProjectionError::invalid(format!(
                "projection `{}`: {reason}",
                self.id
            )))
        };
        if self.id.is_empty() {
            return invalid("the id is empty".into());
        }
        if self.inputs.is_empty() {
            return invalid("declare at least one input".into());
        }
        if !kind.fits(commit) {
            return invalid(format!(
                "{} cannot commit with {commit:?}; see the commit fit table in the crate docs",
                kind.name()
            ));
        }
        if kind.has_outputs() && self.outputs.is_empty() {
            return invalid(format!("{} needs at least one output", kind.name()));
        }
        if !kind.has_outputs() && !self.outputs.is_empty() {
            return invalid(format!("{} declares no outputs", kind.name()));
        }
        let mut names_seen = BTreeSet::new();
        for name in self
            .inputs
            .iter()
            .map(|i| &i.name)
            .chain(self.outputs.iter().map(|o| &o.name))
        {
            if name.is_empty() || !names_seen.insert(name.as_str()) {
                return invalid(format!(
                    "input and output names must be unique and non-empty (`{name}`)"
                ));
            }
        }
        let mut templates = BTreeSet::new();
        for input in &self.inputs {
            templates.insert(input.route.template());
        }
        for output in &self.outputs {
            if !templates.insert(output.route.template()) {
                return invalid(format!(
                    "output `{}` names stream `{}`, which another output or an input already names",
                    output.name,
                    output.route.template()
                ));
            }
        }
        if let Some(names) = names {
            let routes = self
                .inputs
                .iter()
                .map(|i| ("input", &i.name, &i.route))
                .chain(self.outputs.iter().map(|o| ("output", &o.name, &o.route)));
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
}

pub(crate) struct Declared<P, I, S> {
    pub(crate) id: String,
    pub(crate) version: u32,
    pub(crate) kind: Kind,
    pub(crate) inputs: Vec<Input<I>>,
    pub(crate) outputs: Vec<Output>,
    pub(crate) initial: S,
    pub(crate) kernel: Kernel<P, I, S>,
    pub(crate) commit: Commit<P, S>,
    pub(crate) forget_gone: bool,
    pub(crate) param_names: Option<Vec<String>>,
}

/// A declared projection: inert until bound with [`at`](Projection::at)
/// and run by a [`Host`](crate::Host). Cheap to clone.
pub struct Projection<P, I, S> {
    pub(crate) inner: Arc<Declared<P, I, S>>,
}

impl<P, I, S> Clone for Projection<P, I, S> {
    fn clone(&self) -> Self {
        Projection {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<P, I, S> fmt::Debug for Projection<P, I, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Projection")
            .field("id", &self.inner.id)
            .field("version", &self.inner.version)
            .field("kind", &self.inner.kind)
            .field("commit", &self.inner.commit.kind)
            .finish()
    }
}

impl<P: Params, I: Item, S: State> Projection<P, I, S> {
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
        self.inner.commit.kind
    }

    /// Whether it keeps state (`fold`, `mapAccum`, `mapAccumBatch`).
    pub fn has_state(&self) -> bool {
        self.inner.kind.has_state()
    }

    /// The initial state.
    pub fn initial(&self) -> &S {
        &self.inner.initial
    }

    /// The inputs, in declaration order.
    pub fn inputs(&self) -> &[Input<I>] {
        &self.inner.inputs
    }

    /// The outputs, in declaration order.
    pub fn outputs(&self) -> &[Output] {
        &self.inner.outputs
    }

    /// The parameter names, when the parameter type is a struct.
    pub fn param_names(&self) -> Option<&[String]> {
        self.inner.param_names.as_deref()
    }
}
