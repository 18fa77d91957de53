//! The single writer thread and its group commit.
//!
//! Every change goes through one thread that owns the write connection.
//! It takes every job waiting in its queue, runs them one by one in a
//! single transaction (so that a failing job leaves the others intact,
//! each under a savepoint, or for an append, which checks everything before
//! it writes, none: see [`Containment`]), adds the debounced TTL touches,
//! commits once, and only
//! then raises the change signals and answers the callers. Concurrent
//! appenders therefore share one fsync, and no caller hears "written"
//! before its data is on disk. What a job does is the engine's business.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::heads::Heads;
use super::records::{self, SqliteRecords};
use super::savepoint;
use crate::cache::{Cache, Change};
use crate::engine::Engine;
use crate::marks::Markers;
use crate::touches::{Touches, FLUSH_INTERVAL};
use crate::{Notifier, StreamError, StreamInfo};

/// The most jobs one transaction takes.
const MAX_GROUP: usize = 256;

/// What a committed job signals.
// Nearly every one is `Committed` (one per write), so boxing it would
// only add an allocation per write.
#[allow(clippy::large_enum_variant)]
pub(super) enum Event {
    /// New data or a new stream: waiters and the `committed` feed hear it.
    Committed(StreamInfo),
    /// A deleted stream: its waiters wake up.
    Deleted(String),
}

impl Event {
    /// The path of a commit that durable wake-ups mark.
    pub(super) fn path(&self) -> Option<&str> {
        match self {
            Event::Committed(info) => Some(&info.path),
            Event::Deleted(_) => None,
        }
    }

    /// Signals the committed change.
    pub(super) fn raise(self, notifier: &Notifier) {
        match self {
            Event::Committed(info) => notifier.publish(&info),
            Event::Deleted(path) => notifier.touch(&path),
        }
    }
}

/// How a job's failure is kept from its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Containment {
    /// Under a savepoint of its own: a failure takes back its writes and
    /// the rest of the group commits.
    Savepoint,
    /// Without a savepoint (which costs a durable append some 7 % of its
    /// instructions), for jobs that check everything before they write:
    /// a failure before the job's first write leaves nothing to take back,
    /// and one after it (a statement that failed) fails the whole group.
    WritesLast,
}

/// One change for the writer thread: an engine call run with others in
/// a group commit, or a caller's transaction run in one of its own.
pub(super) enum Job {
    Grouped(Box<dyn Task>),
    Alone(Box<dyn AloneTask>),
}

/// A job that needs a transaction of its own (see
/// [`SqliteTransaction`](super::SqliteTransaction)).
pub(super) trait AloneTask: Send {
    /// Runs in its own transaction: commits it, or rolls it back; after a
    /// commit, updates the cache, signals and answers.
    fn run(self: Box<Self>, conn: &mut Connection, shared: Shared<'_>) -> Result<(), Failure>;
    /// Answers without running.
    fn refuse(self: Box<Self>, err: &StreamError);
}

pub(super) trait Task: Send {
    /// Runs the change inside the group's transaction.
    fn run(self: Box<Self>, engine: &Engine, records: &mut SqliteRecords<'_>) -> Applied;
    /// How its failure is kept from its group.
    fn containment(&self) -> Containment;
    /// Answers without running.
    fn refuse(self: Box<Self>, err: &StreamError);
}

/// Sends a job's answer given the commit's failure, if any.
type Answer = Box<dyn FnOnce(Option<&StreamError>) + Send>;

/// A job after it ran, before the commit.
pub(super) struct Applied {
    /// Why it failed, when it did; its writes stay only when it did not.
    error: Option<StreamError>,
    event: Option<Event>,
    answer: Answer,
}

/// An engine call and where its answer goes.
struct Call<T, F> {
    op: F,
    containment: Containment,
    reply: oneshot::Sender<Result<T, StreamError>>,
    /// Its room in the queue, given back once it ran.
    _room: OwnedSemaphorePermit,
}

impl<T, F> Task for Call<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<(T, Option<Event>), StreamError> + Send,
{
    fn run(self: Box<Self>, engine: &Engine, records: &mut SqliteRecords<'_>) -> Applied {
        let (result, event) = match (self.op)(engine, records) {
            Ok((value, event)) => (Ok(value), event),
            Err(err) => (Err(err), None),
        };
        let reply = self.reply;
        Applied {
            error: result.as_ref().err().cloned(),
            event,
            answer: Box::new(move |failed| {
                let answer = match failed {
                    Some(err) => Err(err.clone()),
                    None => result,
                };
                // A caller that stopped waiting is not an error.
                let _ = reply.send(answer);
            }),
        }
    }

    fn containment(&self) -> Containment {
        self.containment
    }

    fn refuse(self: Box<Self>, err: &StreamError) {
        let _ = self.reply.send(Err(err.clone()));
    }
}

impl Job {
    /// A job that runs `op` and answers on `reply` once the transaction
    /// has committed (or failed); a success signals its event after the
    /// commit.
    pub fn new<T: Send + 'static>(
        op: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<(T, Option<Event>), StreamError>
            + Send
            + 'static,
        containment: Containment,
        reply: oneshot::Sender<Result<T, StreamError>>,
        room: OwnedSemaphorePermit,
    ) -> Job {
        Job::Grouped(Box::new(Call {
            op,
            containment,
            reply,
            _room: room,
        }))
    }

    /// Answers without running.
    fn refuse(self, err: &StreamError) {
        match self {
            Job::Grouped(task) => task.refuse(err),
            Job::Alone(task) => task.refuse(err),
        }
    }
}

/// How a group failed.
pub(super) enum Failure {
    /// Before anything was written (the database is busy): the next group
    /// may succeed.
    Transient(StreamError),
    /// `COMMIT` failed: what is on disk is unknown (a failed fsync may have
    /// lost pages the OS still shows), so the store takes no more writes.
    Commit(StreamError),
}

/// What the writer thread owns of the store.
pub(super) struct Owned {
    pub notifier: Arc<Notifier>,
    pub engine: Engine,
    pub touches: Arc<Touches>,
    pub cache: Arc<Cache>,
    pub markers: Arc<Markers>,
}

/// Runs the writer until every sender is dropped, then stores the pending
/// touches. After a failed `COMMIT` it refuses every job with the same
/// internal error until the store is reopened.
pub(super) fn run(mut conn: Connection, jobs: Receiver<Job>, owned: Owned) {
    let Owned {
        notifier,
        engine,
        touches,
        cache,
        markers,
    } = owned;
    let mut poisoned: Option<StreamError> = None;
    let mut heads = Heads::default();
    let mut open = true;
    while open {
        let mut group = Vec::new();
        match jobs.recv_timeout(FLUSH_INTERVAL) {
            Ok(job) => group.push(job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        while !group.is_empty() && group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        crate::metrics::dequeued(group.len());
        let answered = !group.is_empty();
        if let Some(err) = &poisoned {
            for job in group {
                job.refuse(err);
            }
            continue;
        }
        let due = touches.due(!group.is_empty(), !open, Instant::now());
        // Jobs of one group were sent concurrently: their order is free.
        let mut grouped = Vec::with_capacity(group.len());
        let mut alone = Vec::new();
        for job in group {
            match job {
                Job::Grouped(task) => grouped.push(task),
                Job::Alone(task) => alone.push(task),
            }
        }
        let shared = Shared {
            notifier: &notifier,
            engine: &engine,
            touches: &touches,
            cache: &cache,
            markers: &markers,
        };
        if !grouped.is_empty() || !due.is_empty() {
            match commit_group(&mut conn, grouped, &due, shared, &mut heads) {
                Ok(()) => touches.stored(&due),
                Err(Failure::Transient(_)) => {}
                Err(Failure::Commit(err)) => poisoned = Some(err),
            }
        }
        for task in alone {
            match &poisoned {
                Some(err) => task.refuse(err),
                None => {
                    // The caller's own SQL may change any row.
                    heads.clear();
                    if let Err(Failure::Commit(err)) = task.run(&mut conn, shared) {
                        poisoned = Some(err);
                    }
                }
            }
        }
        if answered {
            // The callers just answered come back with their next writes
            // once the runtime's threads have run: give them the CPU
            // before taking the queue. On a core shared with the runtime
            // the queue otherwise holds only the few calls that arrived
            // during the fsync, and they paid a whole fsync of their own
            // (a group of 1 to 4 in every other commit, at 32 concurrent
            // appenders; the full group of 32 with the yield).
            std::thread::yield_now();
        }
    }
}

/// What the writer shares with the rest of the store.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    pub notifier: &'a Notifier,
    pub engine: &'a Engine,
    pub touches: &'a Touches,
    pub cache: &'a Cache,
    pub markers: &'a Markers,
}

/// Runs `group` and stores `due` touches in one transaction; after the
/// commit, updates the cache, signals and answers.
fn commit_group(
    conn: &mut Connection,
    group: Vec<Box<dyn Task>>,
    due: &[(i64, i64)],
    shared: Shared<'_>,
    heads: &mut Heads,
) -> Result<(), Failure> {
    let Shared {
        notifier,
        engine,
        touches,
        cache,
        markers,
    } = shared;
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(err) => {
            let err = StreamError::from(err);
            group.into_iter().for_each(|job| job.refuse(&err));
            return Err(Failure::Transient(err));
        }
    };
    if heads.check(&tx).is_err() {
        heads.clear();
    }
    let calls = group.len();
    let mut applied = Vec::with_capacity(calls);
    let mut changes = Vec::new();
    let mut written = Ok(());
    for job in group {
        if let Err(err) = &written {
            job.refuse(err);
            continue;
        }
        let containment = job.containment();
        if containment == Containment::Savepoint {
            if let Err(err) = savepoint::JOB.begin(&tx) {
                let err = StreamError::from(err);
                job.refuse(&err);
                written = Err(err);
                continue;
            }
        }
        heads.begin_job();
        let mut records = SqliteRecords::logging(&tx, touches).with_heads(heads);
        let done = job.run(engine, &mut records);
        let keep = done.error.is_none();
        if keep {
            changes.extend(records.take_log());
        }
        let wrote = records.wrote();
        drop(records);
        // What the job wrote before it failed is undone, in the rows and
        // in the copy.
        heads.end_job(keep);
        written = match (containment, &done.error) {
            (Containment::Savepoint, None) => {
                savepoint::JOB.release(&tx).map_err(StreamError::from)
            }
            (Containment::Savepoint, Some(_)) => {
                savepoint::JOB.roll_back(&tx).map_err(StreamError::from)
            }
            (Containment::WritesLast, Some(cause)) if wrote => Err(partway(cause.clone())),
            (Containment::WritesLast, _) => Ok(()),
        };
        applied.push(done);
    }
    let written = written
        .and_then(|()| heads.flush(&tx))
        .and_then(|()| {
            let paths = applied
                .iter()
                .filter_map(|done| done.event.as_ref()?.path());
            super::marks::write(&tx, &markers.marks(paths))
        })
        .and_then(|()| {
            due.iter().try_for_each(|&(key, at_ms)| {
                heads.slide(key, at_ms);
                records::slide(&tx, key, at_ms)
            })
        });
    let failure = match written {
        Err(err) => Some(Failure::Transient(err)),
        Ok(()) => {
            let started = Instant::now();
            let committed = tx.commit();
            if committed.is_ok() {
                crate::metrics::committed(calls, started.elapsed());
            }
            committed.err().map(|err| {
                Failure::Commit(StreamError::internal_from(
                    "a commit failed, so the stream store refuses writes until it is reopened",
                    err,
                ))
            })
        }
    };
    if failure.is_some() {
        // The group rolled back, or its outcome is unknown.
        heads.clear();
    }
    let refusal = match &failure {
        None => None,
        Some(Failure::Transient(err) | Failure::Commit(err)) => {
            // As a `dyn Error`, so that the log shows the chain of causes.
            let error: &(dyn std::error::Error + 'static) = err;
            tracing::error!(error, "stream store commit failed");
            Some(err)
        }
    };
    if refusal.is_none() {
        changes.extend(due.iter().map(|&(key, at_ms)| Change::Slide { key, at_ms }));
        cache.apply(changes);
        // Signal first, so the `committed` feed never lags a caller that
        // has already heard its answer.
        for event in applied.iter_mut().filter_map(|a| a.event.take()) {
            event.raise(notifier);
        }
    }
    for done in applied {
        (done.answer)(refusal);
    }
    failure.map_or(Ok(()), Err)
}

/// The refusal of a group whose job without a savepoint failed, for
/// `cause`, after it had begun to write: nothing of the group is kept, and
/// a retry may succeed.
fn partway(cause: StreamError) -> StreamError {
    StreamError::unavailable_from(
        "a write of the group commit failed partway, so the whole group was rolled back",
        cause,
    )
}
