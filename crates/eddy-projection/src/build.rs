//! The constructors: per-entry ones take a handler for each input through
//! [`Entries::on`]; batch ones take one handler for the whole batch.

use std::marker::PhantomData;

use crate::commit::{CommitStrategy, FoldCommit, ProcessCommit};
use crate::declare::{Kind, Params, State};
use crate::handler::{
    async_entries, entries_kernel, sync_batch, sync_entries, AsyncHandler, EntryStep,
};
use crate::{
    Batch, Bound, CheckpointCommit, Commit, Declare, Emits, Entry, HandlerError, Input,
    ProducerCommit, Projection, ProjectionError, Result, Step, Unit,
};

/// The handlers of a `fold`: `f(state, entry, unit) -> state`.
#[derive(Debug)]
pub struct FoldEntries;
/// The handlers of an `emit`: `f(entry, unit, emits)`.
#[derive(Debug)]
pub struct EmitEntries;
/// The handlers of a `mapAccum`: `f(state, entry, unit, emits) -> state`.
#[derive(Debug)]
pub struct MapAccumEntries;
/// The handlers of a per-entry `process`: `f(entry, unit)`.
#[derive(Debug)]
pub struct EachEntries;

/// A per-entry constructor being given its handlers: one per input, each
/// typed by its input's handle, called entry by entry in input declaration
/// order (the first input's entries of a unit, then the second's, …).
/// [`build`](Entries::build) finishes it; every input needs a handler.
///
/// `H` says which handler shape [`on`](Entries::on) takes: [`FoldEntries`],
/// [`EmitEntries`], [`MapAccumEntries`] or [`EachEntries`].
pub struct Entries<P, S, K, H> {
    declare: Declare<P>,
    kind: Kind,
    commit: Commit<K, P, S>,
    initial: S,
    steps: Vec<Option<EntryStep<P, S>>>,
    shape: PhantomData<fn() -> H>,
}

impl<P, S, K: CommitStrategy, H> std::fmt::Debug for Entries<P, S, K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entries")
            .field("id", &self.declare.id)
            .field("kind", &self.kind)
            .field("commit", &K::KIND)
            .finish()
    }
}

impl<P: Params, S: State, K: CommitStrategy, H> Entries<P, S, K, H> {
    fn new(declare: Declare<P>, kind: Kind, commit: Commit<K, P, S>, initial: S) -> Self {
        let steps = (0..declare.inputs.borrow().len()).map(|_| None).collect();
        Entries {
            declare,
            kind,
            commit,
            initial,
            steps,
            shape: PhantomData,
        }
    }

    fn step<T>(mut self, input: Input<T>, step: EntryStep<P, S>) -> Self {
        let index = input.place.index;
        match self.steps.get_mut(index) {
            Some(slot) if input.place.declaration == self.declare.number => {
                if slot.replace(step).is_some() {
                    let name = self.declare.inputs.get_mut()[index].name.clone();
                    self.declare
                        .mistakes
                        .get_mut()
                        .push(format!("input `{name}` has two handlers"));
                }
            }
            _ => self.declare.mistakes.get_mut().push(format!(
                "a handler is given for input #{index} of another declaration"
            )),
        }
        self
    }

    /// Checks the declaration and finishes it into a projection
    /// (`load/invalid-options` when a rule is broken or an input has no
    /// handler).
    pub fn build(self) -> Result<Projection<P, S>> {
        let mut steps = Vec::with_capacity(self.steps.len());
        for (step, input) in self
            .steps
            .into_iter()
            .zip(self.declare.inputs.borrow().iter())
        {
            match step {
                Some(step) => steps.push(step),
                None => {
                    return Err(ProjectionError::invalid(format!(
                        "projection `{}`: input `{}` has no handler",
                        self.declare.id, input.name
                    )))
                }
            }
        }
        let compensation = self.commit.compensation;
        self.declare.finish(
            self.kind,
            K::KIND,
            compensation,
            self.initial,
            entries_kernel(steps),
        )
    }

    /// [`build`](Entries::build), then [`Projection::at`]`(params)`: the
    /// binding, for when only it is needed (`.at(())?` for a projection
    /// without parameters).
    pub fn at(self, params: P) -> Result<Bound<P, S>> {
        self.build()?.at(params)
    }
}

impl<P: Params, S: State, K: FoldCommit> Entries<P, S, K, FoldEntries> {
    /// Commits with `commit` instead ([`Commit::at_least_once`], or a
    /// commit with a compensation).
    pub fn with_commit<K2: FoldCommit>(
        self,
        commit: Commit<K2, P, S>,
    ) -> Entries<P, S, K2, FoldEntries> {
        Entries {
            declare: self.declare,
            kind: self.kind,
            commit,
            initial: self.initial,
            steps: self.steps,
            shape: PhantomData,
        }
    }

    /// Handles `input`'s entries with `f(state, entry, unit) -> state`.
    pub fn on<T, F, R>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(S, Entry<'_, T>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<S>>,
    {
        self.step(
            input,
            sync_entries(move |state, entry, unit, _: &mut Emits| f(state, entry, unit)),
        )
    }

    /// Handles `input`'s entries with an asynchronous `f` (see
    /// [`AsyncHandler`]), whose future may borrow the entry and the unit:
    /// `async move |state, entry, unit| { … Ok(state) }`.
    pub fn on_async<T, F>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: for<'a> AsyncHandler<'a, (S, Entry<'a, T>, &'a Unit<P>), Result<S, HandlerError>>
            + for<'a> AsyncFnOnce(S, Entry<'a, T>, &'a Unit<P>) -> Result<S, HandlerError>,
    {
        self.step(
            input,
            async_entries(move |state, entry, unit, _: &mut Emits| {
                Box::pin(f.clone().call((state, entry, unit)))
            }),
        )
    }
}

impl<P: Params> Entries<P, (), ProducerCommit, EmitEntries> {
    /// Handles `input`'s entries with `f(entry, unit, emits)`, which writes
    /// output items through their handles.
    pub fn on<T, F, R>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(Entry<'_, T>, &Unit<P>, &mut Emits) -> R + Send + Sync + 'static,
        R: Into<Step<()>>,
    {
        self.step(
            input,
            sync_entries(move |(), entry, unit, emits| f(entry, unit, emits)),
        )
    }

    /// Handles `input`'s entries with an asynchronous `f` (see
    /// [`AsyncHandler`]), whose future may borrow the entry, the unit and
    /// the outputs: `async move |entry, unit, emits| { … Ok(()) }`.
    pub fn on_async<T, F>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: for<'a> AsyncHandler<
                'a,
                (Entry<'a, T>, &'a Unit<P>, &'a mut Emits),
                Result<(), HandlerError>,
            > + for<'a> AsyncFnOnce(
                Entry<'a, T>,
                &'a Unit<P>,
                &'a mut Emits,
            ) -> Result<(), HandlerError>,
    {
        self.step(
            input,
            async_entries(move |(), entry, unit, emits| {
                Box::pin(f.clone().call((entry, unit, emits)))
            }),
        )
    }
}

impl<P: Params, S: State> Entries<P, S, ProducerCommit, MapAccumEntries> {
    /// Handles `input`'s entries with `f(state, entry, unit, emits) ->
    /// state`.
    pub fn on<T, F, R>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(S, Entry<'_, T>, &Unit<P>, &mut Emits) -> R + Send + Sync + 'static,
        R: Into<Step<S>>,
    {
        self.step(input, sync_entries(f))
    }

    /// Handles `input`'s entries with an asynchronous `f` (see
    /// [`AsyncHandler`]), whose future may borrow the entry, the unit and
    /// the outputs: `async move |state, entry, unit, emits| { … Ok(state) }`.
    pub fn on_async<T, F>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: for<'a> AsyncHandler<
                'a,
                (S, Entry<'a, T>, &'a Unit<P>, &'a mut Emits),
                Result<S, HandlerError>,
            > + for<'a> AsyncFnOnce(
                S,
                Entry<'a, T>,
                &'a Unit<P>,
                &'a mut Emits,
            ) -> Result<S, HandlerError>,
    {
        self.step(
            input,
            async_entries(move |state, entry, unit, emits| {
                Box::pin(f.clone().call((state, entry, unit, emits)))
            }),
        )
    }
}

impl<P: Params, K: ProcessCommit> Entries<P, (), K, EachEntries> {
    /// Handles `input`'s entries with `f(entry, unit)`, one at a time.
    pub fn on<T, F, R>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(Entry<'_, T>, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<()>>,
    {
        self.step(
            input,
            sync_entries(move |(), entry, unit, _: &mut Emits| f(entry, unit)),
        )
    }

    /// Handles `input`'s entries with an asynchronous `f` (see
    /// [`AsyncHandler`]), one at a time; its future may borrow the entry
    /// and the unit: `async move |entry, unit| { … Ok(()) }`.
    pub fn on_async<T, F>(self, input: Input<T>, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: for<'a> AsyncHandler<'a, (Entry<'a, T>, &'a Unit<P>), Result<(), HandlerError>>
            + for<'a> AsyncFnOnce(Entry<'a, T>, &'a Unit<P>) -> Result<(), HandlerError>,
    {
        self.step(
            input,
            async_entries(move |(), entry, unit, _: &mut Emits| {
                Box::pin(f.clone().call((entry, unit)))
            }),
        )
    }
}

impl<P: Params> Declare<P> {
    /// `fold`: each entry updates the state, committed with
    /// [`Commit::checkpoint`] unless [`with_commit`](Entries::with_commit) says
    /// otherwise. Give each input its handler with [`on`](Entries::on).
    pub fn fold<S: State>(self, initial: S) -> Entries<P, S, CheckpointCommit, FoldEntries> {
        Entries::new(self, Kind::Fold, Commit::checkpoint(), initial)
    }

    /// `emit`: each entry writes output items; no state.
    pub fn emit(
        self,
        commit: Commit<ProducerCommit, P, ()>,
    ) -> Entries<P, (), ProducerCommit, EmitEntries> {
        Entries::new(self, Kind::Emit, commit, ())
    }

    /// `mapAccum`: each entry updates the state and writes output items.
    pub fn map_accum<S: State>(
        self,
        commit: Commit<ProducerCommit, P, S>,
        initial: S,
    ) -> Entries<P, S, ProducerCommit, MapAccumEntries> {
        Entries::new(self, Kind::MapAccum, commit, initial)
    }

    /// `process` with the spec's `each` adapter: each entry runs effects,
    /// one at a time, in input declaration order; no state, no outputs.
    pub fn process_each<K: ProcessCommit>(
        self,
        commit: Commit<K, P, ()>,
    ) -> Entries<P, (), K, EachEntries> {
        Entries::new(self, Kind::Process, commit, ())
    }

    /// `process`: each batch runs effects, `f(batch, unit)`; no state, no
    /// outputs.
    pub fn process<K, F, R>(self, commit: Commit<K, P, ()>, f: F) -> Result<Projection<P, ()>>
    where
        K: ProcessCommit,
        F: Fn(&Batch, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<()>>,
    {
        let kernel = sync_batch(move |(), batch, unit, _: &mut Emits| f(batch, unit));
        let compensation = commit.compensation;
        self.finish(Kind::Process, K::KIND, compensation, (), kernel)
    }

    /// [`process`](Declare::process) with an asynchronous `f` (see
    /// [`AsyncHandler`]), whose future may borrow the batch and the unit:
    /// `async move |batch, unit| { … Ok(()) }`.
    pub fn process_async<K, F>(self, commit: Commit<K, P, ()>, f: F) -> Result<Projection<P, ()>>
    where
        K: ProcessCommit,
        F: for<'a> AsyncHandler<'a, (&'a Batch, &'a Unit<P>), Result<(), HandlerError>>
            + for<'a> AsyncFnOnce(&'a Batch, &'a Unit<P>) -> Result<(), HandlerError>,
    {
        let kernel: crate::handler::Kernel<P, ()> =
            std::sync::Arc::new(move |(), batch, unit, _| Box::pin(f.clone().call((batch, unit))));
        let compensation = commit.compensation;
        self.finish(Kind::Process, K::KIND, compensation, (), kernel)
    }

    /// `mapAccumBatch`: each batch updates the state and writes output
    /// items, `f(state, batch, unit, emits) -> state`. It must give the
    /// same final rows for any unit size.
    pub fn map_accum_batch<S, F, R>(
        self,
        commit: Commit<ProducerCommit, P, S>,
        initial: S,
        f: F,
    ) -> Result<Projection<P, S>>
    where
        S: State,
        F: Fn(S, &Batch, &Unit<P>, &mut Emits) -> R + Send + Sync + 'static,
        R: Into<Step<S>>,
    {
        let compensation = commit.compensation;
        self.finish(
            Kind::MapAccumBatch,
            ProducerCommit::KIND,
            compensation,
            initial,
            sync_batch(f),
        )
    }

    /// [`map_accum_batch`](Declare::map_accum_batch) with an asynchronous
    /// `f` (see [`AsyncHandler`]), whose future may borrow the batch, the
    /// unit and the outputs: `async move |state, batch, unit, emits| { … }`.
    pub fn map_accum_batch_async<S, F>(
        self,
        commit: Commit<ProducerCommit, P, S>,
        initial: S,
        f: F,
    ) -> Result<Projection<P, S>>
    where
        S: State,
        F: for<'a> AsyncHandler<
                'a,
                (S, &'a Batch, &'a Unit<P>, &'a mut Emits),
                Result<S, HandlerError>,
            > + for<'a> AsyncFnOnce(S, &'a Batch, &'a Unit<P>, &'a mut Emits) -> Result<S, HandlerError>,
    {
        let compensation = commit.compensation;
        let kernel: crate::handler::Kernel<P, S> =
            std::sync::Arc::new(move |state, batch, unit, emits| {
                Box::pin(f.clone().call((state, batch, unit, emits)))
            });
        self.finish(
            Kind::MapAccumBatch,
            ProducerCommit::KIND,
            compensation,
            initial,
            kernel,
        )
    }
}
