//! What a handler returns: a value now, or a future.

use std::future::Future;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::HandlerError;

/// The result of one handler call: ready now, or later.
///
/// Handlers return anything that converts into a `Step`: a plain value
/// (`sum + amount`), a [`Step::result`] for fallible synchronous work, or a
/// [`Step::future`] for asynchronous work. A future must own what it uses
/// (clone the item or the parameters into it): it outlives the borrow of
/// the unit. This is the Rust shape of "a handler returns a value or an
/// effect".
pub enum Step<T> {
    /// The handler finished.
    Ready(Result<T, HandlerError>),
    /// The handler continues asynchronously.
    Later(BoxFuture<'static, Result<T, HandlerError>>),
}

impl<T> Step<T> {
    /// A finished step from a `Result`.
    pub fn result<E: Into<HandlerError>>(result: Result<T, E>) -> Self {
        Step::Ready(result.map_err(Into::into))
    }

    /// A failed step.
    pub fn fail(error: impl Into<HandlerError>) -> Self {
        Step::Ready(Err(error.into()))
    }

    /// An asynchronous step.
    pub fn future<E, F>(future: F) -> Self
    where
        E: Into<HandlerError>,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        Step::Later(future.map(|r| r.map_err(Into::into)).boxed())
    }

    /// Waits for the step's result.
    pub async fn resolve(self) -> Result<T, HandlerError> {
        match self {
            Step::Ready(result) => result,
            Step::Later(future) => future.await,
        }
    }
}

impl<T> From<T> for Step<T> {
    fn from(value: T) -> Self {
        Step::Ready(Ok(value))
    }
}

impl<T> std::fmt::Debug for Step<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Ready(Ok(_)) => f.write_str("Step::Ready(Ok(..))"),
            Step::Ready(Err(e)) => write!(f, "Step::Ready(Err({e}))"),
            Step::Later(_) => f.write_str("Step::Later(..)"),
        }
    }
}
