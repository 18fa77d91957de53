//! What `evolve` returns: a typed step for the row, or a typed error that
//! `terminal` classifies by its type.

use crate::error::BoxError;

/// What `evolve` decided for one event.
///
/// `evolve` may return the next state itself (`Ok(next)`): every `M` is a
/// `Step::Next`.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<M> {
    /// Fold the event: the row's next state. The event is applied and the
    /// row is written.
    Next(M),
    /// Leave the row alone. The event is reported as skipped, is not
    /// applied, and alone never causes a write; the instance's checkpoint
    /// does not move past it, so a later delivery or gap fill decides it
    /// again against the row as it is then (keep that decision
    /// deterministic).
    Skip,
    /// Remove the row. Only projections that declare removal accept it;
    /// elsewhere the instance fails with `InvalidArgument`.
    Remove,
}

impl<M> From<M> for Step<M> {
    fn from(next: M) -> Self {
        Step::Next(next)
    }
}

/// A failure of `evolve`: any error type, kept as it is. `terminal` decides
/// by its type (see [`EvolveError::downcast_ref`]) whether the event is
/// rejected (the checkpoint moves past it) or fails the instance.
#[derive(Debug)]
pub struct EvolveError(BoxError);

impl EvolveError {
    /// Wraps an error.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }

    /// The error as its own type, when it is one.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }

    /// Whether the error is of type `T`.
    pub fn is<T: std::error::Error + 'static>(&self) -> bool {
        self.0.is::<T>()
    }

    /// The error itself.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl std::fmt::Display for EvolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<X: std::error::Error + Send + Sync + 'static> From<X> for EvolveError {
    fn from(error: X) -> Self {
        Self(Box::new(error))
    }
}
