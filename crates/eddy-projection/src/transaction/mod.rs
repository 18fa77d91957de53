//! `Commit::transaction`: a `process` whose handler runs inside one SQL
//! transaction of its host, together with the binding's checkpoint.
//!
//! The declaration is a [`TransactionProjection`], a type of its own, so
//! that only a SQL host runs it (a memory [`Host`](crate::Host) does not
//! compile with it). Its `prepare` step runs outside the transaction; the
//! host begins the transaction, runs the handler on it, moves the
//! checkpoint by compare-and-set in the same transaction and commits. A
//! transaction that lost a race (serialization failure, deadlock) runs
//! again with jittered backoff, after reading the inputs again.

/// The runners of a SQL host whose transaction type is `$tx`: `run`,
/// `follow` and `attach`, each on the sessions of the host's `opener`.
macro_rules! transaction_runners {
    ($tx:ty) => {
        /// Runs `bound` until its inputs are caught up, closed, gone, or
        /// `options.limit` units are committed (see [`Host::run`]).
        pub async fn run<P, T>(
            &self,
            bound: &TransactionBound<P, $tx, T>,
            options: RunOptions,
        ) -> Result<Progress<()>>
        where
            P: Params,
            T: Send + Sync + 'static,
        {
            run_on(&self.opener(&bound.handlers), &bound.bound, options).await
        }

        /// Follows `bound`, each unit in a transaction of its own: a
        /// pull-based stream of progress with the emission, wait and retry
        /// rules of [`Host::follow`].
        pub fn follow<P, T>(
            &self,
            bound: &TransactionBound<P, $tx, T>,
            options: FollowOptions,
        ) -> crate::Follow<()>
        where
            P: Params,
            T: Send + Sync + 'static,
        {
            let opener = Arc::new(self.opener(&bound.handlers));
            follow_on(opener, &bound.bound, options)
        }

        /// Attaches `projection` to the store: every commit on one of its
        /// inputs runs the binding it selects, each unit in a transaction
        /// of its own, with the rules and options of [`Host::attach`]
        /// (durable wake-up marks included).
        pub fn attach<P, T>(
            &self,
            projection: &TransactionProjection<P, $tx, T>,
            options: AttachOptions,
        ) -> Result<Attached<P, ()>>
        where
            P: Params,
            T: Send + Sync + 'static,
        {
            let opener = Arc::new(self.opener(&projection.handlers));
            attach_on(opener, &projection.projection, options)
        }
    };
}

#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod sqlite;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub use sqlite::{SqliteCheckpoints, SqliteHost, SqliteTx};

use crate::checkpoint::{Checkpoint, CheckpointKey, Token};
use crate::commit::TransactionCommit;
use crate::declare::Params;
use crate::handler::AsyncHandler;
use crate::{
    Batch, Bound, Commit, Declare, Emits, HandlerError, Kind, Projection, ProjectionError, Result,
    Retry, Unit,
};

/// A `prepare(batch, unit)` step: runs outside the transaction, at least
/// once per unit; its result is the handler's last argument.
pub(crate) type Prepare<P, T> = Arc<
    dyn for<'a> Fn(&'a Batch, &'a Unit<P>) -> BoxFuture<'a, Result<T, HandlerError>> + Send + Sync,
>;

/// `prepare` as its host calls it.
fn boxed_prepare<P, T, G>(prepare: G) -> Prepare<P, T>
where
    P: 'static,
    G: for<'a> AsyncHandler<'a, (&'a Batch, &'a Unit<P>), Result<T, HandlerError>>,
{
    Arc::new(move |batch, unit| Box::pin(prepare.clone().call((batch, unit))))
}

/// What a transaction handler works on besides its transaction: the
/// unit's batch, the unit, what `prepare` gave (`()` without one), and
/// the declared outputs.
#[derive(Debug)]
pub struct Work<'a, P, T = ()> {
    /// The unit's input slices.
    pub batch: &'a Batch,
    /// The unit: its parameters, key and ranges.
    pub unit: &'a Unit<P>,
    /// What `prepare` gave for this unit.
    pub prepared: &'a T,
    /// The declared outputs, written in the unit's transaction.
    pub emits: &'a mut Emits,
}

/// A transaction handler: `process(tx, work)`.
pub(crate) type Process<P, X, T> = Arc<
    dyn for<'a> Fn(&'a mut X, Work<'a, P, T>) -> BoxFuture<'a, Result<(), HandlerError>>
        + Send
        + Sync,
>;

/// A synchronous transaction handler, run on SQLite's writer thread:
/// `process(tx, work)` with rusqlite's own transaction.
pub(crate) type SyncProcess<P, T> = Arc<
    dyn for<'a, 'c> Fn(
            &'a eddy_streams::rusqlite::Transaction<'c>,
            Work<'a, P, T>,
        ) -> Result<(), HandlerError>
        + Send
        + Sync,
>;

/// A `process` projection committed with [`Commit::transaction`]: its
/// handler gets the SQL host's own transaction type `X` (for PostgreSQL,
/// `sqlx::Transaction<'static, Postgres>`; for SQLite, [`SqliteTx`] names
/// `rusqlite::Transaction`). Bind it with
/// [`at`](TransactionProjection::at) and run it on a SQL host.
pub struct TransactionProjection<P, X, T = ()> {
    pub(crate) projection: Projection<P, ()>,
    pub(crate) handlers: Handlers<P, X, T>,
}

/// The `prepare` step and the `process` handler of a transaction
/// projection, shared by its declaration, its bindings and the host's unit.
pub(crate) struct Handlers<P, X, T> {
    pub(crate) prepare: Prepare<P, T>,
    pub(crate) process: Handler<P, X, T>,
}

/// A handler as its host runs it: a future on an asynchronous driver's
/// transaction, or a call on SQLite's writer thread.
pub(crate) enum Handler<P, X, T> {
    Async(Process<P, X, T>),
    Sync(SyncProcess<P, T>),
}

// Not derived: the handlers are shared `Arc`s, clonable whatever P, X and T are.
impl<P, X, T> Clone for Handlers<P, X, T> {
    fn clone(&self) -> Self {
        Handlers {
            prepare: Arc::clone(&self.prepare),
            process: match &self.process {
                Handler::Async(f) => Handler::Async(Arc::clone(f)),
                Handler::Sync(f) => Handler::Sync(Arc::clone(f)),
            },
        }
    }
}

impl<P, X, T> Clone for TransactionProjection<P, X, T> {
    fn clone(&self) -> Self {
        TransactionProjection {
            projection: self.projection.clone(),
            handlers: self.handlers.clone(),
        }
    }
}

impl<P, X, T> fmt::Debug for TransactionProjection<P, X, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TransactionProjection")
            .field(&self.projection)
            .finish()
    }
}

/// A [`TransactionProjection`] bound to its parameters.
pub struct TransactionBound<P, X, T = ()> {
    pub(crate) bound: Bound<P, ()>,
    pub(crate) handlers: Handlers<P, X, T>,
}

impl<P: Clone, X, T> Clone for TransactionBound<P, X, T> {
    fn clone(&self) -> Self {
        TransactionBound {
            bound: self.bound.clone(),
            handlers: self.handlers.clone(),
        }
    }
}

impl<P, X, T> fmt::Debug for TransactionBound<P, X, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TransactionBound")
            .field(&self.bound)
            .finish()
    }
}

impl<P: Params, X, T> TransactionProjection<P, X, T> {
    /// The declaration (id, inputs, checkpoint key).
    pub fn projection(&self) -> &Projection<P, ()> {
        &self.projection
    }

    /// Binds the declaration to `params` (see [`Projection::at`]). Its
    /// outputs are written in the host's transaction, so each must live
    /// on the host's own store: an output declared on another owner
    /// ([`Declare::foreign_output`]) fails with `pin/invalid-output`.
    pub fn at(&self, params: P) -> Result<TransactionBound<P, X, T>> {
        let bound = self.projection.at(params)?;
        let declared = self.projection.outputs().iter().zip(&bound.outputs);
        if let Some((output, path)) = declared.into_iter().find(|(o, _)| o.foreign) {
            return Err(ProjectionError::InvalidOutput {
                output: output.name.clone(),
                path: path.to_string(),
                reason: format!(
                    "projection `{}` commits in its host's SQL transaction, so its outputs must \
                     live on the host's store; this one is declared on another owner",
                    self.projection.id()
                ),
            });
        }
        Ok(TransactionBound {
            bound,
            handlers: self.handlers.clone(),
        })
    }
}

impl<P, X, T> TransactionBound<P, X, T> {
    /// The binding as a plain [`Bound`], for what does not run the
    /// handler: [`Host::read`](crate::Host::read),
    /// [`Host::forget`](crate::Host::forget), its checkpoint key.
    pub fn bound(&self) -> &Bound<P, ()> {
        &self.bound
    }
}

impl<P: Params> Declare<P> {
    /// `process` with [`Commit::transaction`]: each batch runs `f(tx, work)`
    /// on the SQL host's transaction `X` (see [`Work`]);
    /// the SQL it runs there, the items it writes to the declared outputs
    /// through `emits`, and the checkpoint commit or roll back together.
    /// Outputs are optional here; they must live on the host's store (see
    /// [`TransactionProjection::at`]). External calls in `f` happen at
    /// least once.
    pub fn process_transaction<X, F>(
        self,
        commit: Commit<TransactionCommit<X>, P, ()>,
        f: F,
    ) -> Result<TransactionProjection<P, X, ()>>
    where
        X: Send + 'static,
        F: for<'a> AsyncHandler<'a, (&'a mut X, Work<'a, P>), Result<(), HandlerError>>
            + for<'a> AsyncFnOnce(&'a mut X, Work<'a, P>) -> Result<(), HandlerError>,
    {
        self.process_prepared(commit, async |_, _| Ok(()), f)
    }

    /// [`process_transaction`](Declare::process_transaction) with a
    /// `prepare(batch, unit)` step that runs outside the transaction (at
    /// least once per unit, again when a retry reads the inputs again);
    /// its result is the handler's last argument. Both are asynchronous
    /// handlers (see [`AsyncHandler`]).
    pub fn process_prepared<X, T, G, F>(
        self,
        commit: Commit<TransactionCommit<X>, P, ()>,
        prepare: G,
        f: F,
    ) -> Result<TransactionProjection<P, X, T>>
    where
        X: Send + 'static,
        T: Send + Sync + 'static,
        G: for<'a> AsyncHandler<'a, (&'a Batch, &'a Unit<P>), Result<T, HandlerError>>
            + for<'a> AsyncFnOnce(&'a Batch, &'a Unit<P>) -> Result<T, HandlerError>,
        F: for<'a> AsyncHandler<'a, (&'a mut X, Work<'a, P, T>), Result<(), HandlerError>>
            + for<'a> AsyncFnOnce(&'a mut X, Work<'a, P, T>) -> Result<(), HandlerError>,
    {
        let process: Process<P, X, T> =
            Arc::new(move |tx, work| Box::pin(f.clone().call((tx, work))));
        self.transaction_projection(commit, boxed_prepare(prepare), Handler::Async(process))
    }

    /// `process` with [`Commit::transaction`] on SQLite ([`SqliteHost`]):
    /// each batch runs `f(tx, work)` with rusqlite's own transaction (see
    /// [`Work`]), on the store's writer thread; the SQL it runs there,
    /// the items it writes to the declared outputs through `emits`, and
    /// the checkpoint commit or roll back together. `f` holds the store's
    /// writer while it runs: keep it to SQL. A panic in `f` fails the unit
    /// with `handler/failed` and rolls it back; the writer goes on.
    pub fn process_sqlite<F>(
        self,
        commit: Commit<TransactionCommit<SqliteTx>, P, ()>,
        f: F,
    ) -> Result<TransactionProjection<P, SqliteTx, ()>>
    where
        F: for<'a, 'c> Fn(
                &'a eddy_streams::rusqlite::Transaction<'c>,
                Work<'a, P>,
            ) -> Result<(), HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.process_sqlite_prepared(commit, async |_, _| Ok(()), f)
    }

    /// [`process_sqlite`](Declare::process_sqlite) with a `prepare(batch,
    /// unit)` step that runs outside the transaction (at least once per
    /// unit, again when a retry reads the inputs again), on the async
    /// runtime (an asynchronous handler, see [`AsyncHandler`]); its result
    /// is the handler's last argument.
    pub fn process_sqlite_prepared<T, G, F>(
        self,
        commit: Commit<TransactionCommit<SqliteTx>, P, ()>,
        prepare: G,
        f: F,
    ) -> Result<TransactionProjection<P, SqliteTx, T>>
    where
        T: Send + Sync + 'static,
        G: for<'a> AsyncHandler<'a, (&'a Batch, &'a Unit<P>), Result<T, HandlerError>>
            + for<'a> AsyncFnOnce(&'a Batch, &'a Unit<P>) -> Result<T, HandlerError>,
        F: for<'a, 'c> Fn(
                &'a eddy_streams::rusqlite::Transaction<'c>,
                Work<'a, P, T>,
            ) -> Result<(), HandlerError>
            + Send
            + Sync
            + 'static,
    {
        self.transaction_projection(commit, boxed_prepare(prepare), Handler::Sync(Arc::new(f)))
    }

    fn transaction_projection<X, T>(
        self,
        commit: Commit<TransactionCommit<X>, P, ()>,
        prepare: Prepare<P, T>,
        process: Handler<P, X, T>,
    ) -> Result<TransactionProjection<P, X, T>>
    where
        X: 'static,
    {
        if commit.compensation.is_some() {
            return Err(ProjectionError::invalid(format!(
                "projection `{}`: a transaction commit rolls back on failure and takes no compensation",
                self.id
            )));
        }
        let never: crate::handler::Kernel<P, ()> = Arc::new(|(), _, _, _| {
            Box::pin(async { Err("a transaction projection runs only on a SQL host".into()) })
        });
        let projection = self.finish(
            Kind::Process,
            crate::CommitKind::Transaction,
            None,
            (),
            never,
        )?;
        Ok(TransactionProjection {
            projection,
            handlers: Handlers { prepare, process },
        })
    }
}

/// Why a unit's transaction did not commit.
pub(crate) enum Failed {
    /// It lost a race with a concurrent transaction: read the inputs again
    /// and run the unit again.
    Race(ProjectionError),
    /// Anything else: the unit fails with this error.
    Fault(ProjectionError),
}

/// One output's messages for a unit, to append in its transaction.
pub(crate) struct OutputWrite {
    /// The output's name.
    pub name: String,
    /// Its stream for this binding.
    pub path: eddy_streams::StreamPath,
    /// The encoded items, in appends within the host's append limit.
    pub appends: Vec<Vec<bytes::Bytes>>,
}

impl OutputWrite {
    /// The appends of these messages. No producer position: they commit
    /// with the checkpoint or not at all, so a retry never repeats them.
    pub fn appends(&self) -> impl Iterator<Item = eddy_streams::Append> + '_ {
        self.appends
            .iter()
            .map(|messages| eddy_streams::Append::messages(messages.clone()))
    }

    /// The unit's error when the append fails.
    pub fn failed(&self, err: eddy_streams::StreamError) -> ProjectionError {
        crate::session::append_error(&self.name, &self.path, err)
    }
}

/// What a unit's handler wrote to `bound`'s outputs, encoded and split
/// into appends of at most `limit` bytes; a mistake (or an item over the
/// limit) fails with `pin/invalid-output` before anything is written.
pub(crate) fn output_writes<P: Params>(
    bound: &Bound<P, ()>,
    emits: &Emits,
    limit: usize,
) -> Result<Vec<OutputWrite>> {
    let declared = bound.projection.outputs();
    let encoded = crate::session::encode_outputs(declared, &bound.outputs, emits)?;
    encoded
        .into_iter()
        .map(|(index, messages)| {
            let (name, path) = (declared[index].name.clone(), bound.outputs[index].clone());
            let appends = crate::session::split_appends(messages, limit).map_err(|size| {
                ProjectionError::InvalidOutput {
                    output: name.clone(),
                    path: path.to_string(),
                    reason: format!(
                        "an item of {size} bytes is over the append limit of {limit} bytes"
                    ),
                }
            })?;
            Ok(OutputWrite {
                name,
                path,
                appends,
            })
        })
        .collect()
}

/// How a SQL host commits one unit: prepare, begin, run the handler,
/// append what it wrote to the outputs, save `next` over `expected` in
/// the same transaction, commit; the new token.
pub(crate) trait UnitTransaction<P>: Send + Sync {
    fn commit<'a>(
        &'a self,
        batch: Batch,
        unit: &'a Unit<P>,
        key: &'a CheckpointKey,
        expected: Token,
        next: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<Token, Failed>>;
}

/// How long a unit waits before it runs again after losing a race: short
/// and jittered (the winner usually committed already), capped at a
/// second; after this many tries the unit fails with the last error.
pub(crate) fn race_retry() -> Retry {
    Retry::exponential(Duration::from_millis(5), Duration::from_secs(1))
        .with_jitter()
        .with_max_attempts(50)
}
