//! The task behind [`Host::attach`](crate::Host::attach): it turns commits
//! into runs, one writer per binding, and keeps the status.
//!
//! Only this task touches the set of bindings in flight, so a commit that
//! arrives while a binding's run ends can never be lost between them: the
//! commit marks the binding for another run, or starts one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{Committed, Route, MAX_LIST_PAGE};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;

use crate::attach::{AttachError, AttachStatus, BindingState, BindingStatus};
use crate::declare::{Params, State};
use crate::durable::{deferral, Durable};
use crate::metrics::BindingMetrics;
use crate::runner::{run_on, Opener};
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

/// A binding whose last run failed: it waits until `until` before it runs
/// again, whatever commits arrive meanwhile.
struct Backoff {
    /// Failed runs in a row.
    failures: u32,
    /// When it may run again.
    until: Instant,
    /// A commit arrived while it waited: run it at `until`.
    waiting: bool,
    /// The `until` of the timer set for it, if one is.
    timer: Option<Instant>,
}

/// How an attachment runs its bindings: each run's options, the retry
/// schedule of `storage-failure`, the runs at once, and the bindings its
/// status keeps.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub run: RunOptions,
    pub retry: Retry,
    pub concurrency: usize,
    pub status_capacity: usize,
}

pub(crate) struct Dispatcher<P, S> {
    host: Host,
    opener: Arc<dyn Opener<P, S>>,
    projection: Projection<P, S>,
    settings: Settings,
    status: watch::Sender<AttachStatus<P, S>>,
    errors: broadcast::Sender<AttachError>,
    in_flight: HashMap<String, InFlight<P, S>>,
    tasks: JoinSet<RunDone<S>>,
    task_keys: HashMap<Id, String>,
    /// Bindings waiting for a free run, in arrival order, each once.
    queue: VecDeque<String>,
    queued: HashMap<String, Bound<P, S>>,
    /// Bindings whose last run failed.
    backoff: HashMap<String, Backoff>,
    /// When each binding in the status that is not running last finished:
    /// the status sheds the oldest first when it is over its capacity.
    finished_at: HashMap<String, Instant>,
    /// The durable marks, when attached with `durable`.
    durable: Option<Arc<Durable>>,
    /// Backoff timers: each returns its binding and the `until` it was
    /// set for.
    timers: JoinSet<(Bound<P, S>, Instant)>,
}

impl<P: Params, S: State> Dispatcher<P, S> {
    pub(crate) fn new(
        opener: Arc<dyn Opener<P, S>>,
        projection: Projection<P, S>,
        settings: Settings,
        status: watch::Sender<AttachStatus<P, S>>,
        errors: broadcast::Sender<AttachError>,
        durable: Option<Durable>,
    ) -> Self {
        Dispatcher {
            host: opener.host().clone(),
            opener,
            projection,
            settings,
            status,
            errors,
            in_flight: HashMap::new(),
            tasks: JoinSet::new(),
            task_keys: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashMap::new(),
            backoff: HashMap::new(),
            finished_at: HashMap::new(),
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
                    if let Ok((bound, until)) = due {
                        self.due(bound, until);
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
                Ok(bound) => {
                    let until = Instant::now() + due;
                    let key = bound.key.params.clone();
                    self.backoff.insert(
                        key,
                        Backoff {
                            failures: 0,
                            until,
                            waiting: true,
                            timer: Some(until),
                        },
                    );
                    self.set_timer(bound, until);
                }
                Err(error) => self.report(AttachError::Unroutable {
                    path,
                    error: Arc::new(error),
                }),
            }
        }
    }

    fn set_timer(&mut self, bound: Bound<P, S>, until: Instant) {
        self.timers.spawn(async move {
            tokio::time::sleep_until(until).await;
            (bound, until)
        });
    }

    /// A backoff timer set for `until` rang: the binding runs if a commit
    /// (or its durable mark) waits for it, unless a later failure moved
    /// its backoff on (that one set its own timer).
    fn due(&mut self, bound: Bound<P, S>, until: Instant) {
        let key = bound.key.params.clone();
        let durable = self.durable.is_some();
        let Some(backoff) = self.backoff.get_mut(&key) else {
            return;
        };
        if backoff.timer != Some(until) {
            return;
        }
        backoff.timer = None;
        if backoff.waiting || durable {
            backoff.waiting = false;
            self.enqueue(key, bound);
        }
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
    /// changed, so each one's binding runs. The routes' streams are
    /// listed by path alone, page by page (on DynamoDB no record is
    /// read); a path whose stream is gone runs its binding as a commit
    /// would.
    async fn scan(&mut self) {
        let routes: Vec<Route> = self
            .projection
            .inputs()
            .iter()
            .map(|input| input.route.clone())
            .collect();
        for route in routes {
            let prefix = literal_prefix(&route);
            let mut after: Option<String> = None;
            loop {
                let page = self
                    .host
                    .storage
                    .list_paths_page(&prefix, after.as_deref(), MAX_LIST_PAGE)
                    .await;
                match page {
                    Ok(page) => {
                        for path in &page.paths {
                            self.committed(path);
                        }
                        match page.next {
                            Some(next) => after = Some(next),
                            None => break,
                        }
                    }
                    Err(error) => {
                        self.report(AttachError::Scan {
                            error: Arc::new(error.into()),
                        });
                        break;
                    }
                }
            }
        }
    }

    /// Something for `bound` to do: run it once more after its run in
    /// flight, or when its backoff ends, or now (when a run is free).
    fn schedule(&mut self, bound: Bound<P, S>) {
        let key = bound.key.params.clone();
        if let Some(in_flight) = self.in_flight.get_mut(&key) {
            in_flight.again = true;
            return;
        }
        if self.queued.contains_key(&key) {
            return;
        }
        if let Some(backoff) = self.backoff.get_mut(&key) {
            if Instant::now() < backoff.until {
                backoff.waiting = true;
                if backoff.timer != Some(backoff.until) {
                    backoff.timer = Some(backoff.until);
                    let until = backoff.until;
                    self.set_timer(bound, until);
                }
                return;
            }
        }
        self.enqueue(key, bound);
    }

    /// Starts `bound` when a run is free, else queues it.
    fn enqueue(&mut self, key: String, bound: Bound<P, S>) {
        if self.in_flight.len() < self.settings.concurrency {
            self.start(key, bound);
        } else if !self.queued.contains_key(&key) {
            self.queue.push_back(key.clone());
            self.queued.insert(key, bound);
        }
    }

    /// Starts queued bindings while runs are free.
    fn start_queued(&mut self) {
        while self.in_flight.len() < self.settings.concurrency {
            let Some(key) = self.queue.pop_front() else {
                return;
            };
            if let Some(bound) = self.queued.remove(&key) {
                self.start(key, bound);
            }
        }
    }

    fn start(&mut self, key: String, bound: Bound<P, S>) {
        let (host, opener) = (self.host.clone(), Arc::clone(&self.opener));
        let (options, retry) = (self.settings.run.clone(), self.settings.retry);
        let task_bound = bound.clone();
        let task_key = key.clone();
        let durable = self.durable.clone();
        let handle = self.tasks.spawn(async move {
            let run = run_with_retry(opener.as_ref(), &task_bound, options, retry);
            let (result, deferred) = match &durable {
                Some(durable) => durable.run(host.storage.as_ref(), &task_bound, run).await,
                None => (run.await, None),
            };
            (task_key, result, deferred)
        });
        self.task_keys.insert(handle.id(), key.clone());
        self.finished_at.remove(&key);
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
        let failed = result.is_err();
        let (state, last, error) = match result {
            Ok(progress) => (BindingState::Idle, Some(progress), None),
            Err(error) => {
                let error = Arc::new(error);
                (BindingState::Failed(error.clone()), None, Some(error))
            }
        };
        self.finished_at.insert(key.clone(), Instant::now());
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
        if let Some(in_flight) = self.in_flight.remove(&key) {
            if failed {
                self.back_off(key, in_flight, deferred);
            } else {
                self.backoff.remove(&key);
                if in_flight.again || more {
                    self.enqueue(key, in_flight.bound);
                }
            }
        }
        self.start_queued();
        self.trim_status();
    }

    /// After a failed run: the binding waits, longer after each failure in
    /// a row (its durable deferral, else 1 s doubling to 1 h), and runs
    /// again then if a commit arrived (or its durable mark waits).
    fn back_off(&mut self, key: String, in_flight: InFlight<P, S>, deferred: Option<Duration>) {
        let backoff = self.backoff.entry(key).or_insert(Backoff {
            failures: 0,
            until: Instant::now(),
            waiting: false,
            timer: None,
        });
        backoff.failures = backoff.failures.saturating_add(1);
        let delay = deferred.unwrap_or_else(|| deferral(backoff.failures));
        backoff.until = Instant::now() + delay;
        backoff.waiting = in_flight.again;
        if backoff.waiting || self.durable.is_some() {
            backoff.timer = Some(backoff.until);
            let until = backoff.until;
            self.set_timer(in_flight.bound, until);
        } else {
            backoff.timer = None;
        }
    }

    /// Keeps the status within its capacity: the bindings that finished
    /// longest ago leave first, idle ones before failed ones; running
    /// ones stay. The store still has every binding (`inspect`).
    fn trim_status(&mut self) {
        let over = self
            .status
            .borrow()
            .len()
            .saturating_sub(self.settings.status_capacity);
        if over == 0 {
            return;
        }
        let status = self.status.borrow();
        let mut leaving: Vec<(bool, Instant, String)> = self
            .finished_at
            .iter()
            .filter_map(|(key, at)| {
                let failed = matches!(status.get(key)?.state, BindingState::Failed(_));
                Some((failed, *at, key.clone()))
            })
            .collect();
        drop(status);
        leaving.sort();
        leaving.truncate(over);
        self.status.send_modify(|status| {
            for (_, _, key) in &leaving {
                status.remove(key);
            }
        });
        for (_, _, key) in leaving {
            self.finished_at.remove(&key);
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
    opener: &dyn Opener<P, S>,
    bound: &Bound<P, S>,
    options: RunOptions,
    retry: Retry,
) -> Result<Progress<S>> {
    let mut attempt = 0;
    loop {
        match run_on(opener, bound, options.clone()).await {
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
