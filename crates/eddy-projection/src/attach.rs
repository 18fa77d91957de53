//! `attach`: run bindings when their inputs commit, in this process.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use crate::declare::{Item, Params, State};
use crate::params::params_key;
use crate::{Host, Projection, ProjectionError, Result, Retry, RunOptions};

/// Options of [`Host::attach`].
#[derive(Clone, Debug, Default)]
pub struct AttachOptions {
    /// The options of each run.
    pub run: RunOptions,
    /// The retry schedule for `storage-failure`; `None` uses the host's.
    pub retry: Option<Retry>,
}

/// A running attachment. Dropping it (or calling
/// [`detach`](Attached::detach)) stops it.
#[derive(Debug)]
pub struct Attached {
    task: JoinHandle<()>,
}

impl Attached {
    /// Stops the attachment and every binding it runs.
    pub fn detach(self) {}
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Host {
    /// Attaches `projection` to this host's storage: every commit that
    /// [`Storage::committed`](eddy_streams::Storage::committed) reports on a
    /// path matching one of its input routes binds the parameters parsed
    /// from that path and runs the binding. Each binding has one writer;
    /// commits that arrive during a run join into one more run.
    ///
    /// Attach before writes begin. Only local commits wake it: writes made
    /// by other processes do not. The pending set lives in memory, so a
    /// crash before a run waits for the next commit on that input. Every
    /// input route must supply every projection parameter, else
    /// `load/invalid-options`; it also fails outside a tokio runtime.
    pub fn attach<P: Params, I: Item, S: State>(
        &self,
        projection: &Projection<P, I, S>,
        options: AttachOptions,
    ) -> Result<Attached> {
        options.run.validate()?;
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
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ProjectionError::invalid("attach needs a running tokio runtime".to_owned())
        })?;
        let commits = self.storage.committed();
        let host = self.clone();
        let projection = projection.clone();
        let task = runtime.spawn(dispatch(host, projection, options, commits));
        Ok(Attached { task })
    }
}

async fn dispatch<P: Params, I: Item, S: State>(
    host: Host,
    projection: Projection<P, I, S>,
    options: AttachOptions,
    mut commits: tokio::sync::broadcast::Receiver<eddy_streams::Committed>,
) {
    let mut workers: HashMap<String, Arc<Notify>> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        let path = match commits.recv().await {
            Ok(commit) => commit.path,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    projection = projection.id(),
                    "missed {missed} commits; running every known binding"
                );
                workers.values().for_each(|n| n.notify_one());
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let Ok(params) = projection.parse(&path) else {
            continue;
        };
        let Ok(value) = serde_json::to_value(&params) else {
            continue;
        };
        let key = params_key(&value);
        if let Some(notify) = workers.get(&key) {
            notify.notify_one();
            continue;
        }
        let bound = match projection.at(params) {
            Ok(bound) => bound,
            Err(e) => {
                tracing::warn!(projection = projection.id(), "cannot bind `{path}`: {e}");
                continue;
            }
        };
        let notify = Arc::new(Notify::new());
        notify.notify_one();
        workers.insert(key, Arc::clone(&notify));
        let host = host.clone();
        let options = options.clone();
        tasks.spawn(async move {
            let retry = options.retry.unwrap_or(host.retry);
            loop {
                notify.notified().await;
                let mut attempt = 0;
                loop {
                    match host.run(&bound, options.run.clone()).await {
                        Ok(_) => break,
                        Err(e) if e.is_retryable() => match retry.delay(attempt) {
                            Some(delay) => {
                                attempt += 1;
                                tokio::time::sleep(delay).await;
                            }
                            None => {
                                tracing::error!("attached run gave up after retries: {e}");
                                break;
                            }
                        },
                        Err(e) => {
                            tracing::error!("attached run failed: {e}");
                            break;
                        }
                    }
                }
            }
        });
    }
}
