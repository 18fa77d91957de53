//! `attach`: run bindings when their inputs commit, in this process, and
//! report what each binding is doing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::declare::{Params, State};
use crate::dispatch::{Dispatcher, Settings};
use crate::durable::Durable;
use crate::runner::Opener;
use crate::{
    Host, Progress, Projection, ProjectionError, Result, Retry, RunOptions, WakeMarkReport,
};

/// How many errors a slow [`Attached::errors`] subscriber may fall behind
/// before it gets [`AttachError::Missed`].
const ERROR_CAPACITY: usize = 256;

/// The default number of bindings an attachment runs at once.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// The default number of bindings an attachment's status keeps.
pub const DEFAULT_STATUS_CAPACITY: usize = 1024;

/// Options of [`Host::attach`].
#[derive(Clone, Debug)]
pub struct AttachOptions {
    /// The options of each run. A run cut by `limit` is followed by another
    /// at once, so `limit` bounds the work between status updates, not the
    /// work done.
    pub run: RunOptions,
    /// The retry schedule for `storage-failure`; `None` uses the host's.
    pub retry: Option<Retry>,
    /// Keep the pending set in the store: each commit writes a mark for
    /// the binding it touches in its own transaction, and the attachment
    /// runs every marked binding when it starts, so a crash between a
    /// commit and its run loses nothing. A failed binding defers only its
    /// own mark (1 s, doubling, at most 1 h) and runs again when it is
    /// due. Needs a store that writes marks (SQLite, PostgreSQL).
    pub durable: bool,
    /// The most bindings that run at once; the others wait for a free
    /// run, in the order their commits arrived. At least 1; defaults to
    /// [`DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// The most bindings [`Attached::status`] keeps: beyond it, the
    /// bindings that finished longest ago leave it (idle ones before
    /// failed ones; running ones stay). Every binding is still in the
    /// store: [`inspect`](crate::inspect()) and `eddy status` show them
    /// all. At least 1; defaults to [`DEFAULT_STATUS_CAPACITY`].
    pub status_capacity: usize,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            run: RunOptions::default(),
            retry: None,
            durable: false,
            concurrency: DEFAULT_CONCURRENCY,
            status_capacity: DEFAULT_STATUS_CAPACITY,
        }
    }
}

impl AttachOptions {
    /// These options with the pending set kept in the store (see
    /// [`durable`](AttachOptions::durable)).
    pub fn with_durable(mut self) -> Self {
        self.durable = true;
        self
    }

    /// These options with another bound on the runs at once.
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// These options with another status capacity.
    pub fn with_status_capacity(mut self, capacity: usize) -> Self {
        self.status_capacity = capacity;
        self
    }

    /// These options with other run options.
    pub fn with_run(mut self, run: RunOptions) -> Self {
        self.run = run;
        self
    }

    /// These options with a retry schedule.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    fn validate(&self) -> Result<()> {
        self.run.validate()?;
        if self.concurrency == 0 || self.status_capacity == 0 {
            return Err(ProjectionError::invalid(format!(
                "attach: concurrency and status_capacity must be at least 1 (got {} and {})",
                self.concurrency, self.status_capacity
            )));
        }
        Ok(())
    }
}

/// What an attached binding is doing.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BindingState {
    /// A run is in progress (or waiting to retry a storage failure).
    Running,
    /// The last run caught up; no task is kept for the binding until its
    /// next commit.
    Idle,
    /// The last run failed. It waits (1 s after its first failure in a
    /// row, doubling to 1 h): a commit on one of its inputs meanwhile runs
    /// it again when the wait is over, a commit after that at once; when
    /// durable, its deferred mark runs it when it is due.
    Failed(Arc<ProjectionError>),
}

/// One binding of an attachment: its parameters, what it is doing, and
/// the progress of its last successful run.
#[derive(Clone, Debug)]
pub struct BindingStatus<P, S> {
    /// The binding's parameters.
    pub params: P,
    /// What it is doing.
    pub state: BindingState,
    /// The progress of its last successful run, if any.
    pub last: Option<Progress<S>>,
}

/// The bindings an attachment has seen (at most its
/// [`status_capacity`](AttachOptions::status_capacity)), by parameter key
/// (`workspaceId=ws-42`, the last segment of its checkpoint path).
pub type AttachStatus<P, S> = BTreeMap<String, BindingStatus<P, S>>;

/// An error an attachment reports on [`Attached::errors`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AttachError {
    /// A committed path matches an input route, but its parameters do not
    /// decode or do not bind. No binding ran for it.
    Unroutable {
        /// The committed path.
        path: String,
        /// Why it cannot be bound.
        error: Arc<ProjectionError>,
    },
    /// A binding's run failed (for `storage-failure`, after the retry
    /// schedule gave up). Its status is [`BindingState::Failed`].
    Run {
        /// The binding's parameter key.
        binding: String,
        /// The run's error.
        error: Arc<ProjectionError>,
    },
    /// The commit feed lagged and the scan of the inputs that replaces the
    /// missed commits failed; bindings may wait for their next commit.
    Scan {
        /// The scan's error.
        error: Arc<ProjectionError>,
    },
    /// This subscriber read too slowly and missed this many errors.
    Missed(u64),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::Unroutable { path, error } => write!(f, "cannot bind `{path}`: {error}"),
            AttachError::Run { binding, error } => write!(f, "binding `{binding}` failed: {error}"),
            AttachError::Scan { error } => write!(f, "the scan after a lag failed: {error}"),
            AttachError::Missed(count) => write!(f, "missed {count} errors"),
        }
    }
}

/// A running attachment: its status and its errors. Dropping it (or
/// calling [`detach`](Attached::detach)) stops it and every run in
/// progress.
pub struct Attached<P, S> {
    task: JoinHandle<()>,
    status: watch::Receiver<AttachStatus<P, S>>,
    errors: broadcast::Sender<AttachError>,
    host: Host,
    projection: Projection<P, S>,
}

impl<P, S> fmt::Debug for Attached<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attached").finish_non_exhaustive()
    }
}

impl<P: Params, S: State> Attached<P, S> {
    /// The status of the bindings seen so far: every running one, and the
    /// most recently finished others up to the status capacity.
    pub fn status(&self) -> AttachStatus<P, S> {
        self.status.borrow().clone()
    }

    /// Waits until `ready` holds for the status, and returns that status;
    /// `None` when the attachment stopped first (its store went away).
    pub async fn wait_for(
        &self,
        mut ready: impl FnMut(&AttachStatus<P, S>) -> bool,
    ) -> Option<AttachStatus<P, S>> {
        let mut status = self.status.clone();
        let seen = status.wait_for(|s| ready(s)).await.ok()?;
        Some(seen.clone())
    }

    /// The errors reported from now on. A subscriber that falls behind
    /// gets [`AttachError::Missed`]; each binding's last error also stays
    /// in its [status](Attached::status).
    pub fn errors(&self) -> impl Stream<Item = AttachError> + Send + 'static {
        futures::stream::unfold(self.errors.subscribe(), |mut errors| async move {
            let error = match errors.recv().await {
                Ok(error) => error,
                Err(broadcast::error::RecvError::Lagged(missed)) => AttachError::Missed(missed),
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((error, errors))
        })
    }

    /// The durable wake-up marks of this attachment's projection: each
    /// binding with commits it has not caught up with (pending) or a
    /// failed run it waits to repeat (deferred). Empty when the store
    /// keeps no marks.
    pub async fn wake_marks(&self) -> Result<Vec<WakeMarkReport>> {
        let mut marks = crate::wake_marks(self.host.storage.as_ref()).await?;
        let (id, version) = (self.projection.id(), self.projection.version());
        marks.retain(|m| m.projection == id && m.version == version);
        Ok(marks)
    }

    /// Stops the attachment and every run in progress.
    pub fn detach(self) {}
}

impl<P, S> Drop for Attached<P, S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Host {
    /// Attaches `projection` to this host's storage: every commit that
    /// [`Storage::committed`](eddy_streams::Storage::committed) reports on a
    /// path matching one of its input routes binds the parameters parsed
    /// from that path and runs the binding. Each binding has one writer;
    /// commits that arrive during a run join into one more run, and a run
    /// cut by the limit is followed by another.
    ///
    /// Nothing is dropped silently: a path that matches a route but does
    /// not bind, and every failed run, is reported on
    /// [`Attached::errors`] and in [`Attached::status`]. When the commit
    /// feed lags, every stream matching an input route is listed and its
    /// binding run. A binding that caught up keeps no task.
    ///
    /// Attach before writes begin. Only local commits wake it: writes made
    /// by other processes do not. By default the pending set lives in
    /// memory, so a crash before a run waits for the next commit on that
    /// input; with [`AttachOptions::durable`] it lives in the store (see
    /// there), and attaching fails with `load/invalid-options` on a store
    /// that cannot keep it (memory, remote). Every input route must
    /// supply every projection parameter, and the options must be valid,
    /// else `load/invalid-options`; it also fails outside a tokio runtime.
    pub fn attach<P: Params, S: State>(
        &self,
        projection: &Projection<P, S>,
        options: AttachOptions,
    ) -> Result<Attached<P, S>> {
        attach_on(Arc::new(self.clone()), projection, options)
    }
}

/// [`Host::attach`] with the sessions `opener` opens.
pub(crate) fn attach_on<P: Params, S: State>(
    opener: Arc<dyn Opener<P, S>>,
    projection: &Projection<P, S>,
    options: AttachOptions,
) -> Result<Attached<P, S>> {
    let host = opener.host().clone();
    options.validate()?;
    let retry = options.retry.unwrap_or(host.retry);
    retry.validate()?;
    if let Some(names) = projection.param_names() {
        for input in projection.inputs() {
            let supplied: Vec<&str> = input.route.params().collect();
            if let Some(missing) = names.iter().find(|n| !supplied.contains(&n.as_str())) {
                return Err(ProjectionError::invalid(format!(
                        "projection `{}`: input `{}` does not supply parameter `{missing}`, so its commits cannot select a binding",
                        projection.id(),
                        input.name
                    )));
            }
        }
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| ProjectionError::invalid("attach needs a running tokio runtime".to_owned()))?;
    // Registered before the commits are subscribed and the marks are
    // read: a commit from now on is marked, heard, or both.
    let durable = options
        .durable
        .then(|| Durable::acquire(host.storage.as_ref(), projection))
        .transpose()?;
    let commits = host.storage.committed();
    let (status_tx, status) = watch::channel(AttachStatus::new());
    let (errors, _) = broadcast::channel(ERROR_CAPACITY);
    let dispatcher = Dispatcher::new(
        opener,
        projection.clone(),
        Settings {
            run: options.run,
            retry,
            concurrency: options.concurrency,
            status_capacity: options.status_capacity,
        },
        status_tx,
        errors.clone(),
        durable,
    );
    let task = runtime.spawn(dispatcher.run(commits));
    Ok(Attached {
        task,
        status,
        errors,
        host,
        projection: projection.clone(),
    })
}
