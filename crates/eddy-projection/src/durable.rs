//! Durable attached wake-ups: with
//! [`AttachOptions::durable`](crate::AttachOptions::durable), every commit
//! on the store writes a pending mark for the binding it touches in its
//! own transaction ([`eddy_streams::WakeMarks`]), so a crash between a
//! commit and the run it wakes loses nothing: the attachment runs every
//! marked binding when it starts. A binding that caught up deletes its
//! mark, unless a commit marked it during the run; a binding that failed
//! defers its own mark (1 s, doubling, at most 1 h) and runs again then.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use eddy_streams::{MarkOwner, MarkerGuard, Storage, WakeMark};
use serde::{Deserialize, Serialize};

use crate::declare::{Params, State};
use crate::{Bound, Progress, Projection, ProjectionError, Result, Retry, Status};

/// The first deferral of a failed binding.
pub const FIRST_DEFERRAL: Duration = Duration::from_secs(1);

/// The longest deferral of a failed binding.
pub const MAX_DEFERRAL: Duration = Duration::from_secs(60 * 60);

/// An attachment's durable marks: whose they are, and its marker
/// registered with the store for as long as the attachment runs.
pub(crate) struct Durable {
    owner: MarkOwner,
    _marker: MarkerGuard,
}

impl Durable {
    /// Registers `projection`'s marker with the store of `storage`; fails
    /// when the store cannot write marks in its commits (memory, remote).
    pub(crate) fn acquire<P: Params, S: State>(
        storage: &dyn Storage,
        projection: &Projection<P, S>,
    ) -> Result<Self> {
        let marks = storage.wake_marks().ok_or_else(|| {
            ProjectionError::invalid(format!(
                "projection `{}`: durable wake-ups write a mark in the transaction of each \
                 commit, so they need the store's own database (SQLite or PostgreSQL); this \
                 storage cannot (a memory or remote store): attach without `durable`",
                projection.id()
            ))
        })?;
        let owner = owner(projection);
        let marked = projection.clone();
        let marker = std::sync::Arc::new(move |path: &str| {
            marked.parse_subset(path)?;
            let bound = marked.parse(path).and_then(|params| marked.at(params));
            bound.ok().map(|bound| bound.key.params)
        });
        let guard = marks.register(owner.clone(), marker);
        Ok(Durable {
            owner,
            _marker: guard,
        })
    }

    /// The marks of this attachment: `(path, due in)` each.
    pub(crate) async fn pending(&self, storage: &dyn Storage) -> Result<Vec<(String, Duration)>> {
        let now = now_ms();
        let mut marks = wake_marks(storage).await?;
        marks.retain(|m| m.projection == self.owner.projection && m.version == self.owner.version);
        Ok(marks
            .into_iter()
            .map(|m| {
                let due = m.deferred_until_ms.map_or(0, |due| due.saturating_sub(now));
                (m.path, Duration::from_millis(due))
            })
            .collect())
    }

    /// Runs `bound` (see `run`), around it: reads its mark first; once
    /// it caught up, deletes the mark unless a commit marked it since; when
    /// it failed, defers the mark and says how long.
    pub(crate) async fn run<P: Params, S: State>(
        &self,
        storage: &dyn Storage,
        bound: &Bound<P, S>,
        run: impl std::future::Future<Output = Result<Progress<S>>>,
    ) -> (Result<Progress<S>>, Option<Duration>) {
        let Some(marks) = storage.wake_marks() else {
            return (run.await, None);
        };
        let key = &bound.key.params;
        let seen = match marks.get(&self.owner, key).await {
            Ok(seen) => seen,
            Err(error) => {
                tracing::warn!(binding = key, "cannot read the wake-up mark: {error}");
                None
            }
        };
        let result = run.await;
        match &result {
            Ok(progress) if progress.status != Status::Limited => {
                if let Some(seen) = &seen {
                    if let Err(error) = marks.clear(&self.owner, key, seen.commits).await {
                        tracing::warn!(binding = key, "cannot clear the wake-up mark: {error}");
                    }
                }
                (result, None)
            }
            Ok(_) => (result, None),
            Err(_) => {
                let attempts = seen.map_or(0, |m| m.attempts).saturating_add(1);
                let delay = deferral(attempts);
                let due = now_ms().saturating_add(u64::try_from(delay.as_millis()).unwrap_or(0));
                let path = bound.inputs.first().map_or("", |p| p.as_str());
                let deferred = marks.defer(&self.owner, key, path, attempts, due);
                if let Err(error) = deferred.await {
                    tracing::warn!(binding = key, "cannot defer the wake-up mark: {error}");
                }
                (result, Some(delay))
            }
        }
    }
}

/// The owner of a projection's marks.
fn owner<P: Params, S: State>(projection: &Projection<P, S>) -> MarkOwner {
    MarkOwner {
        projection: projection.id().to_owned(),
        version: projection.version(),
    }
}

/// How long a binding waits after its `attempts`-th failed run in a row:
/// 1 s, doubling, at most 1 h.
pub(crate) fn deferral(attempts: u32) -> Duration {
    Retry::exponential(FIRST_DEFERRAL, MAX_DEFERRAL)
        .delay(attempts.saturating_sub(1))
        .unwrap_or(MAX_DEFERRAL)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

/// One binding's durable wake-up mark, for operators' tools (`eddy
/// status`): a binding with a mark has commits it has not caught up with,
/// or failed and waits to run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeMarkReport {
    /// The projection id.
    pub projection: String,
    /// The declaration version.
    pub version: u32,
    /// The binding's parameter key (as in
    /// [`BindingReport::params`](crate::BindingReport::params)).
    pub params: String,
    /// The input stream of the last commit that marked it.
    pub path: String,
    /// Commits marked since it last caught up (pending).
    pub pending_commits: u64,
    /// Failed runs in a row since it last caught up.
    pub failed_runs: u32,
    /// When a failed binding runs again, in unix milliseconds; `None`
    /// when it is not deferred (it runs as soon as its attachment can).
    pub deferred_until_ms: Option<u64>,
}

impl WakeMarkReport {
    fn new(mark: WakeMark, now: u64) -> Self {
        WakeMarkReport {
            deferred_until_ms: (mark.attempts > 0 && mark.due_ms > now).then_some(mark.due_ms),
            projection: mark.projection,
            version: mark.version,
            params: mark.params,
            path: mark.path,
            pending_commits: mark.commits,
            failed_runs: mark.attempts,
        }
    }
}

/// Every durable wake-up mark of `storage`, by projection, version and
/// binding; empty when the store keeps none (memory, remote).
pub async fn wake_marks(storage: &dyn Storage) -> Result<Vec<WakeMarkReport>> {
    let Some(marks) = storage.wake_marks() else {
        return Ok(Vec::new());
    };
    let now = now_ms();
    Ok(marks
        .list()
        .await?
        .into_iter()
        .map(|mark| WakeMarkReport::new(mark, now))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_binding_waits_one_second_doubling_to_at_most_an_hour() {
        let waits: Vec<u64> = (1..=4).map(|n| deferral(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8]);
        assert_eq!(deferral(12), Duration::from_secs(2048));
        assert_eq!(deferral(13), MAX_DEFERRAL, "4096 s is over the hour");
        assert_eq!(deferral(u32::MAX), MAX_DEFERRAL);
        assert_eq!(
            deferral(0),
            FIRST_DEFERRAL,
            "a first failure, however counted"
        );
    }
}
