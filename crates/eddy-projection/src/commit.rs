//! Commits: how a unit's state, offsets and outputs become durable.

use std::fmt;
use std::sync::Arc;

use crate::{Emits, ProjectionError, Step, Unit};

/// How a unit is committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitKind {
    /// State and offsets move together in one compare-and-set of the
    /// checkpoint. Only for handlers without external effects or outputs.
    Checkpoint,
    /// Pin the unit's input ranges in the checkpoint, append each output
    /// with its own idempotent producer position, then settle. A retry
    /// replays the pinned ranges and sends the same positions, so the store
    /// drops what it already has: outputs are written exactly once.
    Producer,
    /// Pin the unit's input ranges before running the handler, settle
    /// after. A retry replays the same ranges with the same unit key; the
    /// handler's effects may happen more than once.
    AtLeastOnce,
}

/// What the handler produced for a unit, handed to a compensation.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitResult<S> {
    /// The new state (`None` for projections without state).
    pub state: Option<S>,
    /// The outputs' items.
    pub emits: Emits,
}

type Compensate<P, S> =
    Arc<dyn Fn(&UnitResult<S>, &ProjectionError, &Unit<P>) -> Step<()> + Send + Sync>;

/// A commit strategy, optionally with a compensation.
///
/// Which constructor takes which commit is checked when the declaration is
/// built; a pair that cannot work fails with `load/invalid-options`.
pub struct Commit<P, S> {
    pub(crate) kind: CommitKind,
    pub(crate) compensation: Option<Compensate<P, S>>,
}

impl<P, S> Clone for Commit<P, S> {
    fn clone(&self) -> Self {
        Commit {
            kind: self.kind,
            compensation: self.compensation.clone(),
        }
    }
}

impl<P, S> fmt::Debug for Commit<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit")
            .field("kind", &self.kind)
            .field("compensation", &self.compensation.is_some())
            .finish()
    }
}

impl<P, S> Commit<P, S> {
    /// [`CommitKind::Checkpoint`]: the default for `fold`.
    pub fn checkpoint() -> Self {
        Commit::of(CommitKind::Checkpoint)
    }

    /// [`CommitKind::Producer`]: exactly-once outputs.
    pub fn producer() -> Self {
        Commit::of(CommitKind::Producer)
    }

    /// [`CommitKind::AtLeastOnce`]: save the range, then run effects.
    pub fn at_least_once() -> Self {
        Commit::of(CommitKind::AtLeastOnce)
    }

    fn of(kind: CommitKind) -> Self {
        Commit {
            kind,
            compensation: None,
        }
    }

    /// Calls `f(result, cause, unit)` when the handler succeeded but the
    /// commit failed. The commit error is still returned; compensation does
    /// not make external effects atomic.
    pub fn with_compensation<F, R>(mut self, f: F) -> Self
    where
        F: Fn(&UnitResult<S>, &ProjectionError, &Unit<P>) -> R + Send + Sync + 'static,
        R: Into<Step<()>>,
    {
        self.compensation = Some(Arc::new(move |result, cause, unit| {
            f(result, cause, unit).into()
        }));
        self
    }

    /// The strategy.
    pub fn kind(&self) -> CommitKind {
        self.kind
    }
}
