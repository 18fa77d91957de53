//! What applying events to rows reports.

use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::Item;
use crate::table_error::error_chain;

/// What happened to one row.
#[derive(Debug)]
pub struct RowOutcome<M> {
    /// The projection.
    pub projection: String,
    /// The row's table key.
    pub key: Item,
    /// The stream instance whose events were applied.
    pub instance: StreamId,
    /// Versions folded into the row, in order.
    pub applied: Vec<u64>,
    /// Versions delivered again, at or below the row's checkpoint.
    pub already_applied: Vec<u64>,
    /// Versions whose failure `terminal` accepted.
    pub rejected: Vec<u64>,
    /// The row's checkpoint afterwards.
    pub checkpoint: u64,
    /// The row's revision afterwards, when the projection declares one.
    pub revision: Option<u64>,
    /// Whether the row was written.
    pub written: bool,
    /// The row's state afterwards (absent when there is no row).
    pub state: Option<M>,
    /// Why the row stopped short, if it did: events above `checkpoint` were
    /// not applied and must be delivered again.
    pub failure: Option<Error>,
}

/// A row outcome with the state as JSON, as batch processing reports it.
pub type RowReport = RowOutcome<serde_json::Value>;

impl<M> RowOutcome<M> {
    /// Whether every event of the row was applied, rejected or already applied.
    pub fn is_applied(&self) -> bool {
        self.failure.is_none()
    }

    /// Whether the event `version` of this row's instance is done.
    pub(crate) fn covers(&self, version: u64) -> bool {
        version <= self.checkpoint
            || self.rejected.contains(&version)
            || self.already_applied.contains(&version)
    }
}

/// One input that was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFailure {
    /// Its position in the input.
    pub index: usize,
    /// The stable error code.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl RecordFailure {
    /// The failure of input `index` with this error (its message with its
    /// causes).
    pub(crate) fn new(index: usize, error: &Error) -> Self {
        Self {
            index,
            code: error.code().into(),
            message: error_chain(error),
        }
    }
}
