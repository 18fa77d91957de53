//! `follow`: a pull-based stream of progress that keeps a binding up to
//! date.

use std::sync::Arc;

use futures::future::{select_all, FutureExt};
use futures::stream::{BoxStream, StreamExt};

use crate::declare::{Params, State};
use crate::metrics::BindingMetrics;
use crate::runner::Opener;
use crate::session::{Session, Tally};
use crate::{Bound, FollowOptions, Host, Progress, Result, Retry, Status};

impl Host {
    /// Follows `bound`: a stream whose elements report each cycle. The
    /// stream holds its own copy of the binding, so it can outlive the
    /// borrow (and be spawned).
    ///
    /// The stream is pull based: a cycle runs only when the consumer asks
    /// for the next element, so a slow consumer gets one element for all
    /// the input that arrived while it worked. It emits after the first
    /// cycle (even when nothing was committed), then after each cycle that
    /// commits a unit or reaches the limit, and after the cycle in which
    /// every input is closed (or the binding is forgotten); then it ends.
    /// A wake-up that finds no input emits nothing.
    ///
    /// Between cycles it waits for new input with the store's live wait,
    /// at most `repair_interval` at a time. `storage-failure` is retried
    /// with the options' schedule, else the host's; any other error is the
    /// stream's last element. Bad options fail at the first pull with
    /// `load/invalid-options`. Drop the stream to stop following.
    pub fn follow<P: Params, S: State>(
        &self,
        bound: &Bound<P, S>,
        options: FollowOptions,
    ) -> Follow<S> {
        follow_on(Arc::new(self.clone()), bound, options)
    }
}

/// What `follow` returns: a stream of progress, one element per cycle
/// that reports, ready to poll (`StreamExt::next`) without pinning.
pub type Follow<S> = BoxStream<'static, Result<Progress<S>>>;

/// [`Host::follow`] on the sessions `opener` opens.
pub(crate) fn follow_on<P: Params, S: State>(
    opener: Arc<dyn Opener<P, S>>,
    bound: &Bound<P, S>,
    options: FollowOptions,
) -> Follow<S> {
    let follower = Follower {
        metrics: BindingMetrics::new(&bound.key),
        retry: options.retry.unwrap_or(opener.host().retry),
        opener,
        bound: bound.clone(),
        options,
        session: None,
        last: None,
        done: false,
    };
    futures::stream::unfold(follower, |mut follower| async move {
        let item = follower.next().await?;
        Some((item, follower))
    })
    .boxed()
}

struct Follower<P, S> {
    opener: Arc<dyn Opener<P, S>>,
    bound: Bound<P, S>,
    options: FollowOptions,
    retry: Retry,
    metrics: BindingMetrics,
    session: Option<Session<P, S>>,
    /// The status of the last cycle; `None` before the first.
    last: Option<Status>,
    done: bool,
}

impl<P: Params, S: State> Follower<P, S> {
    async fn next(&mut self) -> Option<Result<Progress<S>>> {
        if self.done {
            return None;
        }
        if self.last.is_none() {
            if let Err(e) = self.options.validate().and(self.retry.validate()) {
                self.done = true;
                return Some(Err(e));
            }
        }
        loop {
            match self.last {
                None | Some(Status::Limited) => {}
                Some(Status::Closed | Status::Forgotten) => {
                    self.done = true;
                    return None;
                }
                Some(Status::CaughtUp) => self.wait().await,
            }
            let first = self.last.is_none();
            match self.cycle().await {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(progress) => {
                    self.last = Some(progress.status);
                    let emit = first
                        || progress.units > 0
                        || matches!(
                            progress.status,
                            Status::Limited | Status::Closed | Status::Forgotten
                        );
                    if emit {
                        return Some(Ok(progress));
                    }
                }
            }
        }
    }

    /// One cycle: passes until one ends without a storage failure. Units
    /// committed by a pass that then failed count in the cycle's report.
    async fn cycle(&mut self) -> Result<Progress<S>> {
        let mut attempt = 0;
        let mut tally = Tally::default();
        loop {
            let outcome = match self.session.as_mut() {
                Some(session) => session
                    .pass(
                        self.options.limit,
                        self.options.run_options().bounds(),
                        &mut tally,
                    )
                    .await
                    .map(Some),
                None => self.opener.open(self.bound.clone()).await.map(|session| {
                    self.session = Some(session);
                    None
                }),
            };
            match outcome {
                Ok(None) => continue,
                Ok(Some(pass)) => {
                    if let Some(session) = self.session.as_ref() {
                        return Ok(session.progress(tally, pass));
                    }
                }
                Err(e) if e.is_retryable() => {
                    // The outcome of the failed call is unknown: reload.
                    self.session = None;
                    let Some(delay) = self.retry.delay(attempt) else {
                        return Err(e);
                    };
                    tracing::warn!(
                        projection = self.bound.projection().id(),
                        "storage failure, retrying in {delay:?}: {e}"
                    );
                    attempt += 1;
                    self.metrics.retried();
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until an open input changes, at most the repair interval.
    async fn wait(&mut self) {
        let Some(session) = self.session.as_ref() else {
            return;
        };
        let storage = self.opener.host().storage.clone();
        let timeout = self.options.repair_interval;
        let waits: Vec<_> = session
            .open_inputs()
            .into_iter()
            .map(|(path, offset)| {
                let storage = storage.clone();
                async move {
                    // Any answer is a reason to look; a failing store is
                    // looked at again after a pause, not in a hot loop.
                    if let Err(e) = storage.wait(&path, offset, timeout).await {
                        if e.is_retryable() {
                            tokio::time::sleep(Retry::default().delay(0).unwrap_or(timeout)).await;
                        }
                    }
                }
                .boxed()
            })
            .collect();
        if waits.is_empty() {
            tokio::time::sleep(timeout).await;
        } else {
            select_all(waits).await;
        }
    }
}
