//! Handlers: the per-entry and per-batch closures each constructor takes,
//! turned into one kernel the runner calls once per unit.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::{Batch, Emits, Entry, HandlerError, Step, Unit};

/// What the runner calls for each unit: the state before, the batch, the
/// unit; it answers with the state after and the outputs' items.
pub(crate) type Kernel<P, I, S> = Arc<
    dyn for<'a> Fn(S, &'a Batch<I>, &'a Unit<P>) -> BoxFuture<'a, Result<(S, Emits), HandlerError>>
        + Send
        + Sync,
>;

async fn step<T>(step: Step<T>) -> Result<T, HandlerError> {
    match step {
        Step::Ready(result) => result,
        Step::Later(future) => future.await,
    }
}

pub(crate) fn fold_kernel<P, I, S, F, R>(f: F) -> Kernel<P, I, S>
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    S: Send + 'static,
    F: Fn(S, Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<S>>,
{
    let f = Arc::new(f);
    Arc::new(move |state, batch, unit| {
        let f = Arc::clone(&f);
        async move {
            let mut state = state;
            for entry in batch.entries() {
                state = step(f(state, entry, unit).into()).await?;
            }
            Ok((state, Emits::new()))
        }
        .boxed()
    })
}

pub(crate) fn emit_kernel<P, I, F, R>(f: F) -> Kernel<P, I, ()>
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    F: Fn(Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<Emits>>,
{
    let f = Arc::new(f);
    Arc::new(move |(), batch, unit| {
        let f = Arc::clone(&f);
        async move {
            let mut emits = Emits::new();
            for entry in batch.entries() {
                emits.merge(step(f(entry, unit).into()).await?);
            }
            Ok(((), emits))
        }
        .boxed()
    })
}

pub(crate) fn map_accum_kernel<P, I, S, F, R>(f: F) -> Kernel<P, I, S>
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    S: Send + 'static,
    F: Fn(S, Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<(S, Emits)>>,
{
    let f = Arc::new(f);
    Arc::new(move |state, batch, unit| {
        let f = Arc::clone(&f);
        async move {
            let mut state = state;
            let mut emits = Emits::new();
            for entry in batch.entries() {
                let (next, more) = step(f(state, entry, unit).into()).await?;
                state = next;
                emits.merge(more);
            }
            Ok((state, emits))
        }
        .boxed()
    })
}

pub(crate) fn map_accum_batch_kernel<P, I, S, F, R>(f: F) -> Kernel<P, I, S>
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    S: Send + 'static,
    F: Fn(S, &Batch<I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<(S, Emits)>>,
{
    let f = Arc::new(f);
    Arc::new(move |state, batch, unit| {
        let f = Arc::clone(&f);
        async move { step(f(state, batch, unit).into()).await }.boxed()
    })
}

/// A `process` handler: a batch closure, or an [`Each`] adapter.
///
/// `M` only tells the two kinds apart; callers never name it.
pub trait ProcessHandler<P, I, M>: Send + Sync + 'static {
    #[doc(hidden)]
    fn into_kernel(self) -> Kernel<P, I, ()>;
}

#[doc(hidden)]
#[derive(Debug)]
pub struct BatchMarker<R>(PhantomData<fn() -> R>);

#[doc(hidden)]
#[derive(Debug)]
pub struct EachMarker<R>(PhantomData<fn() -> R>);

impl<P, I, F, R> ProcessHandler<P, I, BatchMarker<R>> for F
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    F: Fn(&Batch<I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<()>> + 'static,
{
    fn into_kernel(self) -> Kernel<P, I, ()> {
        let f = Arc::new(self);
        Arc::new(move |(), batch, unit| {
            let f = Arc::clone(&f);
            async move {
                step(f(batch, unit).into()).await?;
                Ok(((), Emits::new()))
            }
            .boxed()
        })
    }
}

/// Adapts a per-entry handler into a `process` handler that visits the
/// entries one by one, in input declaration order (see [`each`]).
#[derive(Debug, Clone)]
pub struct Each<F>(F);

/// Adapts a per-entry handler `f(entry, unit)` for
/// [`Declare::process`](crate::Declare::process): entries run one at a
/// time, the first input's items first.
pub fn each<P, I, F, R>(f: F) -> Each<F>
where
    F: Fn(Entry<'_, I>, &Unit<P>) -> R,
    R: Into<Step<()>>,
{
    Each(f)
}

impl<P, I, F, R> ProcessHandler<P, I, EachMarker<R>> for Each<F>
where
    P: Send + Sync + 'static,
    I: Send + Sync + 'static,
    F: Fn(Entry<'_, I>, &Unit<P>) -> R + Send + Sync + 'static,
    R: Into<Step<()>> + 'static,
{
    fn into_kernel(self) -> Kernel<P, I, ()> {
        let f = Arc::new(self.0);
        Arc::new(move |(), batch, unit| {
            let f = Arc::clone(&f);
            async move {
                for entry in batch.entries() {
                    step(f(entry, unit).into()).await?;
                }
                Ok(((), Emits::new()))
            }
            .boxed()
        })
    }
}
