//! Bounded runners: `run`, `read`, `current` and `decide`.

use crate::declare::{Params, State};
use crate::runner::run_on;
use crate::session::{release_producers, Session};
use crate::{
    Bound, CommitKind, Host, Kind, Loaded, Progress, ProjectionError, Result, RunOptions, Token,
};

impl Host {
    /// Runs `bound` until its inputs are caught up, closed, gone, or
    /// `options.limit` units are committed, and reports the progress.
    ///
    /// Run one writer per binding: a second writer that moves the same
    /// checkpoint fails with `checkpoint/conflict`.
    pub async fn run<P: Params, S: State>(
        &self,
        bound: &Bound<P, S>,
        options: RunOptions,
    ) -> Result<Progress<S>> {
        run_on(self, bound, options).await
    }

    /// The committed state of `bound` (the initial state when it has no
    /// checkpoint, or once its final gone unit committed and it is
    /// forgotten).
    pub async fn read<P: Params, S: State>(&self, bound: &Bound<P, S>) -> Result<S> {
        let session = Session::load(self.clone(), bound.clone()).await?;
        if session.forget_due() {
            return Ok(bound.projection().initial().clone());
        }
        Ok(session.state().clone())
    }

    /// Forgets `bound` on purpose: its checkpoint is dropped, so
    /// [`read`](Host::read) gives the initial state and the next run starts
    /// from the beginning with new producer ids (a new generation), and its
    /// outputs release the old producers' state (on a store that can, see
    /// [`Storage::release_producer`](eddy_streams::Storage::release_producer)).
    /// Clean up its outputs first, and stop its writer: a writer that still
    /// holds the old token fails with `checkpoint/conflict`, and one that
    /// replays a pinned unit after the release writes its outputs again.
    ///
    /// This is also how to accept a checkpoint that vanished
    /// (`checkpoint/vanished`): the binding then starts over.
    pub async fn forget<P: Params, S: State>(&self, bound: &Bound<P, S>) -> Result<()> {
        let token = match self.checkpoints.load(&bound.key).await {
            Ok(Loaded {
                checkpoint: Some(checkpoint),
                token,
            }) => {
                let storage = self.storage.as_ref();
                release_producers(storage, bound, &checkpoint.generation).await?;
                token
            }
            Ok(_) => return Ok(()),
            Err(ProjectionError::CheckpointVanished { .. }) => Token::NONE,
            Err(e) => return Err(e),
        };
        self.checkpoints.forget(&bound.key, token).await?;
        Ok(())
    }

    /// Folds `bound` in memory from its committed state up to the inputs'
    /// tails and returns the state. Writes nothing: no checkpoint, no
    /// output. Only for `fold`, `mapAccum` and `mapAccumBatch` with a
    /// commit that runs no effects of its own.
    pub async fn current<P: Params, S: State>(&self, bound: &Bound<P, S>) -> Result<S> {
        let projection = bound.projection();
        if !projection.has_state() || projection.kind() == Kind::Process {
            return Err(ProjectionError::invalid(format!(
                "projection `{}`: current and decide need a projection with state",
                projection.id()
            )));
        }
        if projection.kind() == Kind::Fold && projection.commit_kind() == CommitKind::AtLeastOnce {
            tracing::debug!("current on an at-least-once fold runs the fold step in memory");
        }
        let mut session = Session::load(self.clone(), bound.clone()).await?;
        session.fold_in_memory().await
    }

    /// Folds `bound` in memory like [`current`](Host::current), then
    /// answers with `decide(&state)`. Writes nothing.
    pub async fn decide<P, S, T, F>(&self, bound: &Bound<P, S>, decide: F) -> Result<T>
    where
        P: Params,
        S: State,
        F: FnOnce(&S) -> T,
    {
        let state = self.current(bound).await?;
        Ok(decide(&state))
    }
}
