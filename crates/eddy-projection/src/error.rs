//! The one error type of the projection engine, with stable codes.

use eddy_streams::{Offset, StreamError};

/// A boxed error raised by a handler or a compensation.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while declaring, binding or running a
/// projection.
///
/// Each variant has a stable [`code`](ProjectionError::code); match on the
/// code or the variant, never on the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    /// A declaration, binding or runner option is invalid
    /// (`load/invalid-options`). Nothing ran.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// An output stream cannot take the unit's items: it is closed, gone,
    /// or a foreign stream that does not exist (`pin/invalid-output`).
    #[error("output `{output}` at `{path}` cannot be written: {reason}")]
    InvalidOutput {
        /// The output name.
        output: String,
        /// The output stream path.
        path: String,
        /// Why it cannot be written.
        reason: String,
    },
    /// An input's history is missing: it does not exist, or the
    /// checkpoint points past its tail (`history-unavailable`).
    #[error("history of input `{input}` at `{path}` is unavailable: {reason}")]
    HistoryUnavailable {
        /// The input name.
        input: String,
        /// The input stream path.
        path: String,
        /// What is missing.
        reason: String,
    },
    /// A pending unit cannot be replayed because an input range it pinned
    /// can no longer be read (`range-unreproducible`). The pin stays.
    #[error(
        "pinned range {from}..{to} of input `{input}` at `{path}` cannot be replayed: {reason}"
    )]
    RangeUnreproducible {
        /// The input name.
        input: String,
        /// The input stream path.
        path: String,
        /// The start of the pinned range.
        from: Offset,
        /// The end of the pinned range.
        to: Offset,
        /// Why it cannot be read again.
        reason: String,
    },
    /// The backend failed; retrying may succeed (`storage-failure`).
    #[error("storage failure: {0}")]
    Storage(String),
    /// Another writer moved the binding's checkpoint first
    /// (`checkpoint/conflict`). Run one writer per binding.
    #[error("checkpoint `{checkpoint}` was moved by another writer; run one writer per binding")]
    CheckpointConflict {
        /// The checkpoint's path.
        checkpoint: String,
    },
    /// The binding's checkpoint was deleted behind the engine's back
    /// (`checkpoint/vanished`). Starting over would write every output
    /// again under a new generation, so nothing runs: forget the binding on
    /// purpose ([`Host::forget`](crate::Host::forget)) or bump the
    /// declaration's version to rebuild it.
    #[error(
        "checkpoint `{checkpoint}` vanished: it was deleted, not forgotten; forget the binding or bump the projection's version to rebuild it"
    )]
    CheckpointVanished {
        /// The checkpoint's path.
        checkpoint: String,
    },
    /// A binding's checkpoint is larger than its checkpoint store saves
    /// in one write (`checkpoint/too-large`): for the default store, one
    /// append of its slot stream, the store's append limit. Nothing was
    /// written; keep less state (move bulky data to an output stream or a
    /// table and keep a reference), or use a SQL host's checkpoint table.
    #[error(
        "the checkpoint of projection `{projection}`, binding `{binding}` ({checkpoint}), is {size} bytes: over the checkpoint limit of {limit} bytes (one append of its slot stream); keep less state"
    )]
    CheckpointTooLarge {
        /// The checkpoint's path.
        checkpoint: String,
        /// The projection id.
        projection: String,
        /// The binding's parameter key.
        binding: String,
        /// The bytes the save would write.
        size: usize,
        /// The most bytes one save may write.
        limit: usize,
    },
    /// The binding's checkpoint lives in the other checkpoint home of the
    /// same store (`checkpoint/elsewhere`): the checkpoint streams that
    /// [`Host::new`](crate::Host::new) keeps, or a SQL host's checkpoint
    /// table. Each home would start the binding from scratch, writing
    /// everything again: run it on the host that keeps it.
    #[error(
        "the checkpoint of `{checkpoint}` lives in {elsewhere}, not in {here}: run the binding on the host that keeps it (or forget it there first)"
    )]
    CheckpointElsewhere {
        /// The checkpoint's path.
        checkpoint: String,
        /// The home that refused it.
        here: &'static str,
        /// The home that holds it.
        elsewhere: &'static str,
    },
    /// A stored checkpoint cannot be decoded (`checkpoint/invalid`).
    #[error("checkpoint `{checkpoint}` is invalid: {reason}")]
    InvalidCheckpoint {
        /// The checkpoint's stream path.
        checkpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An input message does not decode into the declared item type
    /// (`input/invalid-item`).
    #[error("input `{input}` at {offset}: {reason}")]
    InvalidItem {
        /// The input name.
        input: String,
        /// The offset of the message.
        offset: Offset,
        /// Why it does not decode.
        reason: String,
    },
    /// The handler failed (`handler/failed`). Nothing of the unit was
    /// committed except a pin.
    #[error("handler of `{projection}` failed: {source}")]
    Handler {
        /// The projection id.
        projection: String,
        /// The handler's error.
        #[source]
        source: HandlerError,
    },
    /// The unit's commit failed after its handler ran, and the
    /// compensation the commit called failed too
    /// (`compensation/failed`). The commit's error is
    /// [`cause`](ProjectionError::Compensation::cause), and decides whether
    /// the unit may be retried; the compensation's is the
    /// [`source`](std::error::Error::source).
    #[error("{cause}; its compensation failed too: {source}")]
    Compensation {
        /// Why the commit failed.
        cause: Box<ProjectionError>,
        /// Why the compensation failed.
        #[source]
        source: HandlerError,
    },
    /// Another stream store error (its own code).
    #[error(transparent)]
    Stream(StreamError),
}

impl ProjectionError {
    /// The stable, machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ProjectionError::InvalidOptions(_) => "load/invalid-options",
            ProjectionError::InvalidOutput { .. } => "pin/invalid-output",
            ProjectionError::HistoryUnavailable { .. } => "history-unavailable",
            ProjectionError::RangeUnreproducible { .. } => "range-unreproducible",
            ProjectionError::Storage(_) => "storage-failure",
            ProjectionError::CheckpointConflict { .. } => "checkpoint/conflict",
            ProjectionError::CheckpointVanished { .. } => "checkpoint/vanished",
            ProjectionError::CheckpointTooLarge { .. } => "checkpoint/too-large",
            ProjectionError::CheckpointElsewhere { .. } => "checkpoint/elsewhere",
            ProjectionError::InvalidCheckpoint { .. } => "checkpoint/invalid",
            ProjectionError::InvalidItem { .. } => "input/invalid-item",
            ProjectionError::Handler { .. } => "handler/failed",
            ProjectionError::Compensation { .. } => "compensation/failed",
            ProjectionError::Stream(err) => err.code(),
        }
    }

    /// Whether retrying may succeed: only `storage-failure` (also as the
    /// cause of a failed compensation).
    pub fn is_retryable(&self) -> bool {
        match self {
            ProjectionError::Storage(_) => true,
            ProjectionError::Compensation { cause, .. } => cause.is_retryable(),
            _ => false,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ProjectionError::InvalidOptions(message.into())
    }
}

impl From<StreamError> for ProjectionError {
    fn from(err: StreamError) -> Self {
        match err {
            StreamError::Unavailable { message, .. } => ProjectionError::Storage(message),
            other => ProjectionError::Stream(other),
        }
    }
}

/// Shorthand for results of projection calls.
pub type Result<T, E = ProjectionError> = std::result::Result<T, E>;
