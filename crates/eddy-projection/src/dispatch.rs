//! The task behind [`Host::attach`](crate::Host::attach): it turns commits
//! into runs, one writer per binding, and keeps the status.
//!
//! Only this task touches the set of bindings in flight, so a commit that
//! arrives while a binding's run ends can never be lost between them: the
//! commit marks the binding for another run, or starts one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{Committed, Route};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::task::{Id, JoinSet};

use crate::attach::{AttachError, AttachStatus, BindingState, BindingStatus};
use crate::declare::{Params, State};
use crate::durable::Durable;
use crate::metrics::BindingMetrics;
use crate::{
    Bound, Host, Progress, Projection, ProjectionError, Result, Retry, RunOptions, Status,
};

/// What a run task returns: its binding's key, the run's outcome, and
/// how long a failed durable binding waits before it runs again.
type RunDone<S> = (String, Result<Progress<S>>, Option<Duration>);

/// A binding whose run is in flight.
struct InFlight<P, S> {
    bound: Bound<P, S>,
    /// A commit arrived during the run: run again when it ends.
    again: bool,
}

pub(crate) struct Dispatcher<P, S> {
    host: Host,
    projection: Projection<P, S>,
    run: RunOptions,
    retry: Retry,
    status: watch::Sender<AttachStatus<P, S>>,
    errors: broadcast::Sender<AttachError>,
    in_flight: HashMap<String, InFlight<P, S>>,
    tasks: JoinSet<RunDone<S>>,
    task_keys: HashMap<Id, String>,
    /// The durable marks, when attached with `durable`.
    durable: Option<Arc<Durable>>,
    /// Deferred bindings, each returned when it is due.
    timers: JoinSet<Bound<P, S>>,
}

impl<P: Params, S: State> Dispatcher<P, S> {
    pub(crate) fn new(
        host: Host,
        projection: Projection<P, S>,
        run: RunOptions,
        retry: Retry,
        status: watch::Sender<AttachStatus<P, S>>,
        errors: broadcast::Sender<AttachError>,
        durable: Option<Durable>,
    ) -> Self {
        Dispatcher {
            host,
            projection,
            run,
            retry,
            status,
            errors,
            in_flight: HashMap::new(),
            tasks: JoinSet::new(),
            task_keys: HashMap::new(),
            durable: durable.map(Arc::new),
            timers: JoinSet::new(),
        }
    }

    pub(crate) async fn run(mut self, mut commits: broadcast::Receiver<Committed>) {
        self.resume().await;
        loop {
            tokio::select! {
                commit = commits.recv() => match commit {
                    Ok(commit) => self.committed(&commit.path),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            projection = self.projection.id(),
                            "missed {missed} commits; scanning every input"
                        );
                        self.scan().await;
                    }
                    Err(RecvError::Closed) => return,
                },
                Some(done) = self.tasks.join_next_with_id() => self.finished(done),
                Some(due) = self.timers.join_next() => {
                    if let Ok(bound) = due {
                        self.schedule(bound);
                    }
                }
            }
        }
    }

    /// At start, with durable marks: runs every marked binding, a
    /// deferred one when it is due.
    async fn resume(&mut self) {
        let Some(durable) = self.durable.clone() else {
            return;
        };
        let marks = match durable.pending(self.host.storage.as_ref()).await {
            Ok(marks) => marks,
            Err(error) => {
                return self.report(AttachError::Scan {
                    error: Arc::new(error),
                })
            }
        };
        for (path, due) in marks {
            let bound = self
                .projection
                .parse(&path)
                .and_then(|params| self.projection.at(params));
            match bound {
                Ok(bound) if due.is_zero() => self.schedule(bound),
                Ok(bound) => self.defer(bound, due),
                Err(error) => self.report(AttachError::Unroutable {
                    path,
                    error: Arc::new(error),
                }),
            }
        }
    }

    /// Runs `bound` again in `delay`.
    fn defer(&mut self, bound: Bound<P, S>, delay: Duration) {
        self.timers.spawn(async move {
            tokio::time::sleep(delay).await;
            bound
        });
    }

    /// A commit on `path`: run the binding it selects, if any.
    fn committed(&mut self, path: &str) {
        if self.projection.parse_subset(path).is_none() {
            return;
        }
        let bound = self
            .projection
            .parse(path)
            .and_then(|params| self.projection.at(params));
        match bound {
            Ok(bound) => self.schedule(bound),
            Err(error) => self.report(AttachError::Unroutable {
                path: path.to_owned(),
                error: Arc::new(error),
            }),
        }
    }

    /// After a lag: every stream that matches an input route may have
    /// changed, so each one's binding runs.
    async fn scan(&mut self) {
        let routes: Vec<Route> = self
            .projection
            .inputs()
            .iter()
            .map(|input| input.route.clone())
            .collect();
        for route in routes {
            match self.host.storage.list(&literal_prefix(&route)).await {
                Ok(streams) => {
                    for stream in streams {
                        self.committed(&stream.path);
                    }
                }
                Err(error) => self.report(AttachError::Scan {
                    error: Arc::new(error.into()),
                }),
            }
        }
    }

    fn schedule(&mut self, bound: Bound<P, S>) {
        let key = bound.key.params.clone();
        if let Some(in_flight) = self.in_flight.get_mut(&key) {
            in_flight.again = true;
            return;
        }
        self.start(key, bound);
    }

    fn start(&mut self, key: String, bound: Bound<P, S>) {
        let (host, options, retry) = (self.host.clone(), self.run.clone(), self.retry);
        let task_bound = bound.clone();
        let task_key = key.clone();
        let durable = self.durable.clone();
        let handle = self.tasks.spawn(async move {
            let run = run_with_retry(&host, &task_bound, options, retry);
            let (result, deferred) = match &durable {
                Some(durable) => durable.run(host.storage.as_ref(), &task_bound, run).await,
                None => (run.await, None),
            };
            (task_key, result, deferred)
        });
        self.task_keys.insert(handle.id(), key.clone());
        self.status.send_modify(|status| {
            status
                .entry(key.clone())
                .and_modify(|binding| binding.state = BindingState::Running)
                .or_insert_with(|| BindingStatus {
                    params: bound.params.clone(),
                    state: BindingState::Running,
                    last: None,
                });
        });
        self.in_flight.insert(
            key,
            InFlight {
                bound,
                again: false,
            },
        );
    }

    fn finished(&mut self, done: std::result::Result<(Id, RunDone<S>), tokio::task::JoinError>) {
        let (key, result, deferred) = match done {
            Ok((id, outcome)) => {
                self.task_keys.remove(&id);
                outcome
            }
            Err(join) => {
                let Some(key) = self.task_keys.remove(&join.id()) else {
                    return;
                };
                let error = ProjectionError::Handler {
                    projection: self.projection.id().to_owned(),
                    source: format!("the run stopped: {join}").into(),
                };
                (key, Err(error), None)
            }
        };
        let more = matches!(&result, Ok(progress) if progress.status == Status::Limited);
        let (state, last, error) = match result {
            Ok(progress) => (BindingState::Idle, Some(progress), None),
            Err(error) => {
                let error = Arc::new(error);
                (BindingState::Failed(error.clone()), None, Some(error))
            }
        };
        self.status.send_modify(|status| {
            if let Some(binding) = status.get_mut(&key) {
                binding.state = state;
                if last.is_some() {
                    binding.last = last;
                }
            }
        });
        if let Some(error) = error {
            self.report(AttachError::Run {
                binding: key.clone(),
                error,
            });
        }
        let Some(in_flight) = self.in_flight.remove(&key) else {
            return;
        };
        if in_flight.again || more {
            self.start(key, in_flight.bound);
        } else if let Some(delay) = deferred {
            self.defer(in_flight.bound, delay);
        }
    }

    fn report(&self, error: AttachError) {
        tracing::warn!(projection = self.projection.id(), "attach: {error}");
        // No subscriber is not an error: the status keeps the last one.
        let _ = self.errors.send(error);
    }
}

/// Runs `bound` once, retrying `storage-failure` on `retry`'s schedule.
async fn run_with_retry<P: Params, S: State>(
    host: &Host,
    bound: &Bound<P, S>,
    options: RunOptions,
    retry: Retry,
) -> Result<Progress<S>> {
    let mut attempt = 0;
    loop {
        match host.run(bound, options.clone()).await {
            Err(e) if e.is_retryable() => match retry.delay(attempt) {
                Some(delay) => {
                    attempt += 1;
                    BindingMetrics::new(&bound.key).retried();
                    tokio::time::sleep(delay).await;
                }
                None => return Err(e),
            },
            outcome => return outcome,
        }
    }
}

/// The literal start of a route, up to its first parameter: every path
/// the route matches starts with it.
fn literal_prefix(route: &Route) -> String {
    let literals: Vec<&str> = route
        .template()
        .split('/')
        .take_while(|segment| !segment.starts_with(':'))
        .collect();
    if route.params().next().is_none() {
        return route.template().to_owned();
    }
    literals
        .iter()
        .map(|segment| format!("{segment}/"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_prefixes_end_before_the_first_parameter() {
        let prefix = |template: &str| literal_prefix(&Route::new(template).expect("route"));
        assert_eq!(prefix("facts/:workspaceId"), "facts/");
        assert_eq!(prefix("a/b/:x/c/:y"), "a/b/");
        assert_eq!(prefix(":tenant/facts"), "");
        assert_eq!(prefix("orders"), "orders");
    }
}
