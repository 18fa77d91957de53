//! Commits: how a unit's state, offsets and outputs become durable, and
//! which constructor takes which commit (checked by the compiler).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::handler::AsyncHandler;
use crate::{Emits, HandlerError, ProjectionError, Step, Unit};

/// How a unit is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitKind {
    /// State and offsets move together in one compare-and-set of the
    /// checkpoint. Only for handlers without external effects or outputs.
    Checkpoint,
    /// Run the (deterministic) handler, pin the unit's input ranges in the
    /// checkpoint, append each output with its own idempotent producer
    /// position, then settle. A retry replays the pinned ranges and sends
    /// the same positions, so the store drops what it already has: outputs
    /// are written exactly once.
    Producer,
    /// Pin the unit's input ranges before running the handler, settle
    /// after. A retry replays the same ranges with the same unit key; the
    /// handler's effects may happen more than once.
    AtLeastOnce,
    /// The handler's SQL and the checkpoint commit or roll back together
    /// in one transaction of a SQL host (see [`TransactionCommit`]).
    Transaction,
}

mod sealed {
    pub trait Sealed {}
}

/// A commit strategy type: [`CheckpointCommit`], [`ProducerCommit`],
/// [`AtLeastOnceCommit`] or [`TransactionCommit`]. Sealed.
pub trait CommitStrategy: sealed::Sealed + Send + Sync + 'static {
    /// The strategy as a value.
    const KIND: CommitKind;
}

/// The commit strategies `fold` accepts: [`CheckpointCommit`] (its default)
/// and [`AtLeastOnceCommit`].
pub trait FoldCommit: CommitStrategy {}

/// The commit strategies `process` accepts: [`AtLeastOnceCommit`].
pub trait ProcessCommit: CommitStrategy {}

/// [`CommitKind::Checkpoint`] as a type.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointCommit;
/// [`CommitKind::Producer`] as a type: the only commit of `emit`,
/// `mapAccum` and `mapAccumBatch`.
#[derive(Clone, Copy, Debug)]
pub struct ProducerCommit;
/// [`CommitKind::AtLeastOnce`] as a type.
#[derive(Clone, Copy, Debug)]
pub struct AtLeastOnceCommit;

/// [`CommitKind::Transaction`] as a type, over the SQL host's own
/// transaction type `X` (such as `sqlx::Transaction<'static, Postgres>`):
/// the only commit of [`Declare::process_transaction`](crate::Declare::process_transaction).
/// A transaction projection is a
/// [`TransactionProjection`](crate::TransactionProjection), which only a SQL
/// host runs; a memory [`Host`](crate::Host) does not take it:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare, Host, RunOptions};
/// # use eddy_streams::{JsonStream, MemoryStorage};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # let stream = JsonStream::<u32>::new("Test/N", "n")?;
/// let declare = Declare::<()>::new("rows");
/// declare.input("n", &stream);
/// let rows = declare.process_transaction(Commit::transaction(), async |_tx: &mut (), _work| Ok(()))?;
/// let host = Host::new(std::sync::Arc::new(MemoryStorage::new()));
/// host.run(&rows.at(())?, RunOptions::default()).await?;
/// # Ok(()) }
/// ```
pub struct TransactionCommit<X>(PhantomData<fn() -> X>);

impl<X> fmt::Debug for TransactionCommit<X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TransactionCommit")
    }
}

impl<X: 'static> sealed::Sealed for TransactionCommit<X> {}
impl<X: 'static> CommitStrategy for TransactionCommit<X> {
    const KIND: CommitKind = CommitKind::Transaction;
}

impl sealed::Sealed for CheckpointCommit {}
impl sealed::Sealed for ProducerCommit {}
impl sealed::Sealed for AtLeastOnceCommit {}

impl CommitStrategy for CheckpointCommit {
    const KIND: CommitKind = CommitKind::Checkpoint;
}
impl CommitStrategy for ProducerCommit {
    const KIND: CommitKind = CommitKind::Producer;
}
impl CommitStrategy for AtLeastOnceCommit {
    const KIND: CommitKind = CommitKind::AtLeastOnce;
}

impl FoldCommit for CheckpointCommit {}
impl FoldCommit for AtLeastOnceCommit {}
impl ProcessCommit for AtLeastOnceCommit {}

/// What the handler produced for a unit, handed to a compensation.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitResult<S> {
    /// The new state (`None` for projections without state).
    pub state: Option<S>,
    /// The outputs' items.
    pub emits: Emits,
}

pub(crate) type Compensate<P, S> = Arc<
    dyn for<'a> Fn(
            &'a UnitResult<S>,
            &'a ProjectionError,
            &'a Unit<P>,
        ) -> BoxFuture<'a, Result<(), HandlerError>>
        + Send
        + Sync,
>;

/// A commit strategy `K`, optionally with a compensation.
///
/// Which constructor takes which strategy is checked by the compiler:
/// `fold` takes [`Commit::checkpoint`] (its default) or
/// [`Commit::at_least_once`]; `process` takes [`Commit::at_least_once`];
/// `emit`, `map_accum` and `map_accum_batch` take [`Commit::producer`].
///
/// ```
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let stream = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// let declare = Declare::<()>::new("count");
/// let input = declare.input("n", &stream);
/// let count = declare.fold(0u64).with_commit(Commit::at_least_once()).on(input, |n, _, _| n + 1);
/// ```
///
/// An `emit` cannot commit by checkpoint alone:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let stream = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// let declare = Declare::<()>::new("copy");
/// declare.input("n", &stream);
/// let copy = declare.emit(Commit::checkpoint());
/// ```
///
/// nor a `fold` by producer, nor a `process` by checkpoint:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let stream = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// let declare = Declare::<()>::new("count");
/// declare.input("n", &stream);
/// let count = declare.fold(0u64).with_commit(Commit::producer());
/// ```
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let stream = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// let declare = Declare::<()>::new("effects");
/// declare.input("n", &stream);
/// let effects = declare.process(Commit::checkpoint(), |_, _| ());
/// ```
pub struct Commit<K, P, S> {
    pub(crate) compensation: Option<Compensate<P, S>>,
    kind: PhantomData<fn() -> K>,
}

impl<K, P, S> Clone for Commit<K, P, S> {
    fn clone(&self) -> Self {
        Commit {
            compensation: self.compensation.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: CommitStrategy, P, S> fmt::Debug for Commit<K, P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit")
            .field("kind", &K::KIND)
            .field("compensation", &self.compensation.is_some())
            .finish()
    }
}

impl<P: 'static, S: 'static> Commit<CheckpointCommit, P, S> {
    /// [`CommitKind::Checkpoint`]: the default for `fold`.
    pub fn checkpoint() -> Self {
        Commit::of()
    }
}

impl<P: 'static, S: 'static> Commit<ProducerCommit, P, S> {
    /// [`CommitKind::Producer`]: exactly-once outputs.
    pub fn producer() -> Self {
        Commit::of()
    }
}

impl<P: 'static, S: 'static> Commit<AtLeastOnceCommit, P, S> {
    /// [`CommitKind::AtLeastOnce`]: save the range, then run effects.
    pub fn at_least_once() -> Self {
        Commit::of()
    }
}

impl<X: 'static, P: 'static, S: 'static> Commit<TransactionCommit<X>, P, S> {
    /// [`CommitKind::Transaction`]: the handler's SQL on the host's
    /// transaction `X` and the checkpoint commit together.
    pub fn transaction() -> Self {
        Commit::of()
    }
}

impl<K: CommitStrategy, P: 'static, S: 'static> Commit<K, P, S> {
    fn of() -> Self {
        Commit {
            compensation: None,
            kind: PhantomData,
        }
    }

    /// Calls `f(result, cause, unit)` when the handler succeeded but the
    /// commit failed (its pin, its outputs or its checkpoint). The commit's
    /// error is still returned, together with the compensation's when that
    /// fails too (`compensation/failed`); compensation does not make
    /// external effects atomic.
    pub fn with_compensation<F, R>(mut self, f: F) -> Self
    where
        F: Fn(&UnitResult<S>, &ProjectionError, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<()>>,
    {
        self.compensation = Some(Arc::new(move |result, cause, unit| {
            let outcome = f(result, cause, unit).into().0;
            Box::pin(std::future::ready(outcome))
        }));
        self
    }

    /// [`with_compensation`](Commit::with_compensation) with an
    /// asynchronous `f` (see [`AsyncHandler`](crate::AsyncHandler)), whose
    /// future may borrow its arguments:
    /// `async move |result, cause, unit| { … Ok(()) }`.
    pub fn with_compensation_async<F>(mut self, f: F) -> Self
    where
        F: for<'a> AsyncHandler<
                'a,
                (&'a UnitResult<S>, &'a ProjectionError, &'a Unit<P>),
                Result<(), HandlerError>,
            > + for<'a> AsyncFnOnce(
                &'a UnitResult<S>,
                &'a ProjectionError,
                &'a Unit<P>,
            ) -> Result<(), HandlerError>,
    {
        self.compensation = Some(Arc::new(move |result, cause, unit| {
            Box::pin(f.clone().call((result, cause, unit)))
        }));
        self
    }

    /// The strategy.
    pub fn kind(&self) -> CommitKind {
        K::KIND
    }
}
