//! Handlers: the per-entry and per-batch closures each constructor takes,
//! turned into one kernel the runner calls once per unit.
//!
//! Every shape reduces to the most general one, `mapAccum`'s
//! `(state, entry, unit, emits) -> state`, so there is one adapter for
//! synchronous entry handlers and one for asynchronous ones.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::batch::AnySlice;
use crate::{Batch, Emits, Entry, HandlerError, Step, Unit};

/// What the runner calls for each unit: the state before, the batch, the
/// unit and the unit's outputs; it answers with the state after.
pub(crate) type Kernel<P, S> = Arc<
    dyn for<'a> Fn(
            S,
            &'a Batch,
            &'a Unit<P>,
            &'a mut Emits,
        ) -> BoxFuture<'a, Result<S, HandlerError>>
        + Send
        + Sync,
>;

/// One input's entry handler, applied to each item of that input's slice.
pub(crate) type EntryStep<P, S> = Arc<
    dyn for<'a> Fn(
            S,
            &'a AnySlice,
            &'a Unit<P>,
            &'a mut Emits,
        ) -> BoxFuture<'a, Result<S, HandlerError>>
        + Send
        + Sync,
>;

fn wrong_items(slice: &AnySlice) -> HandlerError {
    format!("input `{}` holds items of another type", slice.input).into()
}

/// A synchronous entry handler as a step.
pub(crate) fn sync_entries<P, S, T, F, R>(f: F) -> EntryStep<P, S>
where
    P: Sync + 'static,
    S: Send + 'static,
    T: Send + Sync + 'static,
    F: Fn(S, Entry<'_, T>, &Unit<P>, &mut Emits) -> R + Send + Sync + 'static,
    R: Into<Step<S>>,
{
    let f = Arc::new(f);
    Arc::new(move |state, slice, unit, emits| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let typed = slice.typed::<T>().ok_or_else(|| wrong_items(slice))?;
            let mut state = state;
            for entry in typed.entries() {
                state = f(state, entry, unit, emits).into().0?;
            }
            Ok(state)
        })
    })
}

/// An asynchronous entry handler as a step: its futures may borrow the
/// entry, the unit and the outputs, and run one at a time.
pub(crate) fn async_entries<P, S, T, F>(f: F) -> EntryStep<P, S>
where
    P: Sync + 'static,
    S: Send + 'static,
    T: Send + Sync + 'static,
    F: for<'a> Fn(
            S,
            Entry<'a, T>,
            &'a Unit<P>,
            &'a mut Emits,
        ) -> BoxFuture<'a, Result<S, HandlerError>>
        + Send
        + Sync
        + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |state, slice, unit, emits| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let typed = slice.typed::<T>().ok_or_else(|| wrong_items(slice))?;
            let mut state = state;
            for entry in typed.entries() {
                state = f(state, entry, unit, &mut *emits).await?;
            }
            Ok(state)
        })
    })
}

/// The kernel of a per-entry constructor: each input's step over its
/// slice, in input declaration order.
pub(crate) fn entries_kernel<P, S>(steps: Vec<EntryStep<P, S>>) -> Kernel<P, S>
where
    P: Sync + 'static,
    S: Send + 'static,
{
    let steps: Arc<[EntryStep<P, S>]> = steps.into();
    Arc::new(move |state, batch, unit, emits| {
        let steps = Arc::clone(&steps);
        Box::pin(async move {
            let mut state = state;
            for (step, slice) in steps.iter().zip(batch.slices()) {
                state = step(state, slice, unit, &mut *emits).await?;
            }
            Ok(state)
        })
    })
}

/// The kernel of a synchronous batch handler.
pub(crate) fn sync_batch<P, S, F, R>(f: F) -> Kernel<P, S>
where
    P: Sync + 'static,
    S: Send + 'static,
    F: Fn(S, &Batch, &Unit<P>, &mut Emits) -> R + Send + Sync + 'static,
    R: Into<Step<S>>,
{
    Arc::new(move |state, batch, unit, emits| {
        Box::pin(std::future::ready(f(state, batch, unit, emits).into().0))
    })
}
