//! Handlers: the per-entry and per-batch closures each constructor takes,
//! turned into one kernel the runner calls once per unit.
//!
//! Every shape reduces to the most general one, `mapAccum`'s
//! `(state, entry, unit, emits) -> state`, so there is one adapter for
//! synchronous entry handlers and one for asynchronous ones.
//!
//! Asynchronous handlers are plain async closures (`async move |…| { … }`),
//! taken through [`AsyncHandler`] and boxed here.

use std::future::Future;
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

/// An asynchronous handler of `Args` whose future, done, gives `Out`:
/// any cloneable `FnOnce` of those arguments that returns a `Send` future
/// living as long as them, such as an async closure
/// `async move |state, entry, unit| { … }` or an `async fn`.
///
/// The future may borrow the arguments (the entry, the unit, the batch,
/// the outputs) across its awaits. Each call runs a clone of the handler,
/// so what the closure captures moves into its future: capture handles
/// (they are `Copy`) and `Arc`s of what is large or shared, not large
/// values (each call would copy them).
///
/// Every constructor that takes an asynchronous handler also names it as
/// an `AsyncFnOnce` of the same arguments, so that the compiler infers
/// the closure's argument types: none needs writing.
///
/// ```
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// # let doubled = JsonStream::<u64>::new("Test/D", "d").unwrap();
/// let factor = std::sync::Arc::new(2);
/// let declare = Declare::<()>::new("double");
/// let input = declare.input("n", &numbers);
/// let output = declare.output("d", &doubled);
/// let double = declare
///     .emit(Commit::producer())
///     .on_async(input, async move |entry, _unit, emits| {
///         tokio::task::yield_now().await;
///         emits.push(output, u64::from(*entry.item) * *factor);
///         Ok(())
///     })
///     .build();
/// ```
///
/// The output's item type is still checked by the compiler:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// # let doubled = JsonStream::<u64>::new("Test/D", "d").unwrap();
/// let declare = Declare::<()>::new("double");
/// let input = declare.input("n", &numbers);
/// let output = declare.output("d", &doubled);
/// let double = declare
///     .emit(Commit::producer())
///     .on_async(input, async move |entry, _unit, emits| {
///         emits.push(output, "two");
///         Ok(())
///     })
///     .build();
/// ```
pub trait AsyncHandler<'a, Args, Out>: Clone + Send + Sync + 'static {
    /// The future a call returns.
    type Future: Future<Output = Out> + Send + 'a;

    /// Calls the handler on `args`.
    fn call(self, args: Args) -> Self::Future;
}

/// [`AsyncHandler`] for every function of as many arguments.
macro_rules! async_handler {
    ($($arg:ident),+) => {
        impl<'a, F, Fut, Out, $($arg),+> AsyncHandler<'a, ($($arg,)+), Out> for F
        where
            F: FnOnce($($arg),+) -> Fut + Clone + Send + Sync + 'static,
            Fut: Future<Output = Out> + Send + 'a,
        {
            type Future = Fut;

            #[allow(non_snake_case)]
            fn call(self, ($($arg,)+): ($($arg,)+)) -> Fut {
                self($($arg),+)
            }
        }
    };
}

async_handler!(A, B);
async_handler!(A, B, C);
async_handler!(A, B, C, D);

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
