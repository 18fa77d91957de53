//! What a synchronous handler returns: a value, or a failure.

use crate::HandlerError;

/// The result of one synchronous handler call.
///
/// Handlers return anything that converts into a `Step`: a plain value
/// (`sum + amount`), [`Step::result`] for fallible work, or [`Step::fail`].
/// Asynchronous handlers are declared with the `_async` methods
/// ([`Entries::on_async`](crate::Entries::on_async),
/// [`Declare::process_async`](crate::Declare::process_async), …) and
/// return a boxed future that may borrow the entry and the unit. This is
/// the Rust shape of "a handler returns a value or an effect".
pub struct Step<T>(pub(crate) Result<T, HandlerError>);

impl<T> Step<T> {
    /// A finished step from a `Result`.
    pub fn result<E: Into<HandlerError>>(result: Result<T, E>) -> Self {
        Step(result.map_err(Into::into))
    }

    /// A failed step.
    pub fn fail(error: impl Into<HandlerError>) -> Self {
        Step(Err(error.into()))
    }
}

impl<T> From<T> for Step<T> {
    fn from(value: T) -> Self {
        Step(Ok(value))
    }
}

impl<T> std::fmt::Debug for Step<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Ok(_) => f.write_str("Step(Ok(..))"),
            Err(e) => write!(f, "Step(Err({e}))"),
        }
    }
}
