//! Group commit: concurrent appends to one stream share one unit.
//!
//! An append joins its stream's queue; the first one finds no queue and
//! spawns the stream's runner, which takes every queued append (up to
//! `max_group`), runs them one after another on one unit, each after the
//! one before as if committed, commits the unit once, and answers them
//! all; then takes the next batch, until the queue is empty. The runner
//! is a task of its own, so a caller that stops waiting does not stop the
//! others' commit. Appends to different streams never wait for each
//! other.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::retry::Retry;
use super::storage::Inner;
use super::{Backend, Commit, Unit};
use crate::{Append, Appended, StreamError, StreamPath};

/// One queued append and where its answer goes.
struct Job {
    append: Append,
    answer: oneshot::Sender<Result<Appended, StreamError>>,
}

/// The queued appends of each stream that has a runner.
#[derive(Default)]
pub(super) struct Queues(Mutex<HashMap<String, VecDeque<Job>>>);

impl Queues {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, VecDeque<Job>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Appends through the stream's group commit.
pub(super) async fn append<B: Backend>(
    inner: &Arc<Inner<B>>,
    path: &StreamPath,
    append: Append,
) -> Result<Appended, StreamError> {
    let (answer, answered) = oneshot::channel();
    let job = Job { append, answer };
    let start = {
        let mut queues = inner.queues.lock();
        match queues.get_mut(path.as_str()) {
            Some(queue) => {
                queue.push_back(job);
                false
            }
            None => {
                queues.insert(path.to_string(), VecDeque::from([job]));
                true
            }
        }
    };
    if start {
        tokio::spawn(run(Arc::clone(inner), path.clone()));
    }
    answered.await.unwrap_or_else(|_| {
        Err(StreamError::internal(
            "the append's group commit ended without answering it",
        ))
    })
}

/// Removes a stream's queue when its runner ends without doing so (a
/// panic), so that the next append starts a new runner; the appends still
/// queued are answered with an error as their answers drop.
struct Running<'a> {
    queues: &'a Queues,
    path: &'a str,
    finished: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.queues.lock().remove(self.path);
        }
    }
}

/// A stream's runner: commits its queue batch by batch until it is empty.
async fn run<B: Backend>(inner: Arc<Inner<B>>, path: StreamPath) {
    let mut running = Running {
        queues: &inner.queues,
        path: path.as_str(),
        finished: false,
    };
    loop {
        let jobs: Vec<Job> = {
            let mut queues = inner.queues.lock();
            let Some(queue) = queues.get_mut(path.as_str()) else {
                running.finished = true;
                return;
            };
            if queue.is_empty() {
                queues.remove(path.as_str());
                running.finished = true;
                return;
            }
            let take = queue.len().min(inner.options.max_group.max(1));
            queue.drain(..take).collect()
        };
        let (deferred, retry) = commit(&inner, &path, jobs).await;
        if !deferred.is_empty() {
            let mut queues = inner.queues.lock();
            let queue = queues.entry(path.to_string()).or_default();
            for job in deferred.into_iter().rev() {
                queue.push_front(job);
            }
        }
        // Writers in other processes waited while this one won: their turn.
        retry.yield_turn().await;
    }
}

/// Runs `jobs` on one unit and commits it, running them all again when the
/// unit lost a race. Answers the jobs it committed (or failed) and returns
/// those that did not fit in the unit, for the next one, with the
/// attempts it took.
async fn commit<B: Backend>(
    inner: &Inner<B>,
    path: &StreamPath,
    mut jobs: Vec<Job>,
) -> (Vec<Job>, Retry) {
    let mut retry = Retry::start(inner.options.contention_timeout);
    loop {
        let mut unit = inner.backend.open();
        let mut outcomes = Vec::with_capacity(jobs.len());
        let mut head = None;
        let mut cut = jobs.len();
        for (i, job) in jobs.iter().enumerate() {
            let mark = unit.mark();
            match inner
                .engine
                .append(&mut unit, path, job.append.clone(), None)
                .await
            {
                Ok((appended, written)) => match unit.overflow() {
                    None => {
                        head = written.or(head);
                        outcomes.push(Ok(appended));
                    }
                    Some(overflow) => {
                        unit.rollback(mark);
                        if outcomes.iter().any(Result::is_ok) {
                            // It fits in a unit of its own: the next one.
                            cut = i;
                            break;
                        }
                        outcomes.push(Err(overflow));
                    }
                },
                Err(error) => {
                    unit.rollback(mark);
                    outcomes.push(Err(error));
                }
            }
        }
        let failed = match inner.backend.commit(unit).await {
            Ok(Commit::Done) => {
                if let Some(head) = head {
                    inner.notifier.publish_head(path.as_str(), &head);
                }
                None
            }
            Ok(Commit::Conflict) => match retry.lost().await {
                Ok(()) => continue,
                Err(contended) => Some(contended),
            },
            Err(error) => Some(error),
        };
        let deferred = jobs.split_off(cut);
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            let outcome = match &failed {
                Some(error) => Err(error.clone()),
                None => outcome,
            };
            // A caller that stopped waiting is no reason to stop.
            let _ = job.answer.send(outcome);
        }
        return (deferred, retry);
    }
}
