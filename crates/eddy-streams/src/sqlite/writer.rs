//! The single writer thread and its group commit.
//!
//! Every change goes through one thread that owns the write connection.
//! It takes every job waiting in its queue, runs them one by one in a
//! single transaction (each under a savepoint, so a failing job leaves the
//! others intact), adds the debounced TTL touches, commits once, and only
//! then raises the change signals and answers the callers. Concurrent
//! appenders therefore share one fsync, and no caller hears "written"
//! before its data is on disk. What a job does is the engine's business.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::records::{self, SqliteRecords};
use super::touches::{Touches, FLUSH_INTERVAL};
use crate::engine::Engine;
use crate::{Committed, Notifier, StreamError};

/// The most jobs one transaction takes.
const MAX_GROUP: usize = 256;

/// What a committed job signals.
pub(super) enum Event {
    /// New data or a new stream: waiters and the `committed` feed hear it.
    Committed(Committed),
    /// A deleted stream: its waiters wake up.
    Deleted(String),
}

type Work = Box<dyn FnOnce(&Engine, &mut SqliteRecords<'_>) -> Applied + Send>;

/// Sends a job's answer given the commit's failure, if any.
type Answer = Box<dyn FnOnce(Option<&StreamError>) + Send>;

/// One change for the writer thread.
pub(super) struct Job(Work);

/// A job after it ran, before the commit.
struct Applied {
    /// Whether its writes stay (otherwise its savepoint rolls back).
    keep: bool,
    event: Option<Event>,
    /// Sends the answer: the job's own outcome, or the commit's failure.
    answer: Answer,
}

impl Job {
    /// A job that runs `op` and answers on `reply` once the transaction
    /// has committed (or failed); a success signals its event after the
    /// commit.
    pub fn new<T: Send + 'static>(
        op: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<(T, Option<Event>), StreamError>
            + Send
            + 'static,
        reply: oneshot::Sender<Result<T, StreamError>>,
    ) -> Job {
        Job(Box::new(move |engine, records| {
            let (result, event) = match op(engine, records) {
                Ok((value, event)) => (Ok(value), event),
                Err(err) => (Err(err), None),
            };
            Applied {
                keep: result.is_ok(),
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
        }))
    }
}

/// Runs the writer until every sender is dropped, then stores the pending
/// touches.
pub(super) fn run(
    mut conn: Connection,
    jobs: Receiver<Job>,
    notifier: Arc<Notifier>,
    engine: Engine,
    touches: Arc<Touches>,
) {
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
        let due = touches.due(!group.is_empty(), !open);
        if group.is_empty() && due.is_empty() {
            continue;
        }
        let committed = commit_group(&mut conn, group, &due, &notifier, &engine, &touches);
        if committed {
            touches.stored(&due);
        }
    }
}

/// Runs `group` and stores `due` touches in one transaction; returns
/// whether it committed.
fn commit_group(
    conn: &mut Connection,
    group: Vec<Job>,
    due: &[(i64, i64)],
    notifier: &Notifier,
    engine: &Engine,
    touches: &Touches,
) -> bool {
    let mut applied = Vec::with_capacity(group.len());
    let outcome = (|| -> Result<(), StreamError> {
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for job in group {
            let mut savepoint = tx.savepoint()?;
            let done = (job.0)(engine, &mut SqliteRecords::new(&savepoint, touches));
            if done.keep {
                savepoint.commit()?;
            } else {
                savepoint.rollback()?;
                savepoint.commit()?;
            }
            applied.push(done);
        }
        for &(key, at_ms) in due {
            records::slide(&tx, key, at_ms)?;
        }
        tx.commit()?;
        Ok(())
    })();
    let failure = outcome.err();
    if let Some(err) = &failure {
        tracing::error!(error = %err, "stream store commit failed");
    } else {
        // Signal first, so the `committed` feed never lags a caller that
        // has already heard its answer.
        for event in applied.iter_mut().filter_map(|a| a.event.take()) {
            match event {
                Event::Committed(committed) => notifier.commit(committed),
                Event::Deleted(path) => notifier.touch(&path),
            }
        }
    }
    for done in applied {
        (done.answer)(failure.as_ref());
    }
    failure.is_none()
}
