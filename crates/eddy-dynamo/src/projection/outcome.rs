//! What applying events to rows reports: one outcome per row, listing the
//! stream instances that contributed to it.

use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::Item;
use crate::outbox::DrainReport;
use crate::table_error::error_chain;

/// What happened to one stream instance's events in one row.
#[derive(Debug)]
pub struct InstanceOutcome {
    /// The source it belongs to (a single-source projection's only source
    /// is named after its stream).
    pub source: String,
    /// The stream instance.
    pub instance: StreamId,
    /// Versions folded into the row, in order.
    pub applied: Vec<u64>,
    /// Versions delivered again, at or below the instance's checkpoint.
    pub already_applied: Vec<u64>,
    /// Versions whose failure `terminal` accepted.
    pub rejected: Vec<u64>,
    /// Versions `evolve` skipped (not applied, decided again later).
    pub skipped: Vec<u64>,
    /// Versions passed over in `latest` mode: older than the one applied.
    pub superseded: Vec<u64>,
    /// Versions that arrived while the row was removed, from a source that
    /// may not start it again (see
    /// [`SourceBuilder::restarts_removed_rows`](crate::SourceBuilder::restarts_removed_rows)):
    /// recorded in the checkpoint, not applied.
    pub after_removal: Vec<u64>,
    /// The instance's checkpoint in the row afterwards (the spec's
    /// `version`): every version up to it has been considered for the row.
    pub checkpoint: u64,
    /// Why the instance stopped short, if it did: its events above
    /// `checkpoint` were not applied and must be delivered again.
    pub failure: Option<Error>,
}

impl InstanceOutcome {
    pub(crate) fn new(source: &str, instance: StreamId, checkpoint: u64) -> Self {
        Self {
            source: source.to_owned(),
            instance,
            applied: Vec::new(),
            already_applied: Vec::new(),
            rejected: Vec::new(),
            skipped: Vec::new(),
            superseded: Vec::new(),
            after_removal: Vec::new(),
            checkpoint,
            failure: None,
        }
    }

    /// Whether the event `version` of this instance is done: at or below
    /// the checkpoint, rejected, skipped, or delivered again.
    pub(crate) fn covers(&self, version: u64) -> bool {
        version <= self.checkpoint
            || self.rejected.contains(&version)
            || self.skipped.contains(&version)
            || self.superseded.contains(&version)
            || self.after_removal.contains(&version)
            || self.already_applied.contains(&version)
    }
}

/// What happened to one row.
#[derive(Debug)]
pub struct RowOutcome<M> {
    /// The projection.
    pub projection: String,
    /// The row's table key.
    pub key: Item,
    /// Every instance that contributed, in fold order (source declaration
    /// order, then stream id).
    pub instances: Vec<InstanceOutcome>,
    /// The row's revision afterwards, when the projection declares one.
    pub revision: Option<u64>,
    /// Whether the row was written (once, for all its instances).
    pub written: bool,
    /// Whether the write removed the row (left its tombstone).
    pub removed: bool,
    /// How many outbox effects the write committed.
    pub enqueued: usize,
    /// The row's state afterwards (absent when there is no row).
    pub state: Option<M>,
    /// Why the whole row failed, if it did: its read or its write, or
    /// every instance failed ([`Error::InstancesFailed`]). No instance's
    /// events were applied.
    pub failure: Option<Error>,
    /// What delivering the row's effects right after its write did, when
    /// a `deliver` was given and the write enqueued effects: how many were
    /// delivered (older pending ones first, all in order), and the one left
    /// undelivered at the head if a delivery failed. An error here (the
    /// outbox table failed) leaves the effects pending too. Neither ever
    /// fails the row: its effects are committed, and a later drain
    /// delivers them.
    pub delivery: Option<Result<DrainReport, Error>>,
}

impl<M> RowOutcome<M> {
    /// Whether every event of the row was applied, rejected, skipped or
    /// already applied (whatever its effects' delivery did).
    pub fn is_applied(&self) -> bool {
        self.failure.is_none() && self.instances.iter().all(|i| i.failure.is_none())
    }

    /// The first failure, of the row or of one of its instances. When
    /// every instance failed, the row's failure only sums them up: the
    /// first instance's own is returned.
    pub fn first_failure(&self) -> Option<&Error> {
        let instances = || self.instances.iter().find_map(|i| i.failure.as_ref());
        match &self.failure {
            Some(Error::InstancesFailed { .. }) => instances().or(self.failure.as_ref()),
            Some(row) => Some(row),
            None => instances(),
        }
    }

    /// The effect left at the head of the row's outbox by a failed
    /// delivery, if one failed.
    pub fn undelivered(&self) -> Option<&crate::outbox::Undelivered> {
        match &self.delivery {
            Some(Ok(report)) => report.undelivered.as_ref(),
            _ => None,
        }
    }

    /// This outcome followed by a later write of the same row (a row
    /// written in parts): what both applied, and where the later one left
    /// the row and each instance. Instances are in the same order in both
    /// (one row's work); versions the earlier write applied are not
    /// reported as delivered again.
    pub(crate) fn then(self, later: RowOutcome<M>) -> RowOutcome<M> {
        let mut instances = self.instances;
        for (earlier, later) in instances.iter_mut().zip(later.instances) {
            earlier.applied.extend(later.applied);
            earlier.rejected.extend(later.rejected);
            earlier.superseded.extend(later.superseded);
            earlier.after_removal.extend(later.after_removal);
            for version in later.skipped {
                if !earlier.skipped.contains(&version) {
                    earlier.skipped.push(version);
                }
            }
            earlier.checkpoint = later.checkpoint;
            earlier.failure = later.failure;
        }
        let (revision, removed, state) = if later.written {
            (later.revision, later.removed, later.state)
        } else {
            (self.revision, self.removed, self.state)
        };
        RowOutcome {
            projection: self.projection,
            key: self.key,
            instances,
            revision,
            written: self.written || later.written,
            removed,
            enqueued: self.enqueued + later.enqueued,
            state,
            failure: later.failure,
            delivery: None,
        }
    }

    /// The same outcome with the state mapped.
    pub(crate) fn map_state<N>(self, map: impl FnOnce(M) -> Option<N>) -> RowOutcome<N> {
        RowOutcome {
            state: self.state.and_then(map),
            projection: self.projection,
            key: self.key,
            instances: self.instances,
            revision: self.revision,
            written: self.written,
            removed: self.removed,
            enqueued: self.enqueued,
            failure: self.failure,
            delivery: self.delivery,
        }
    }
}

/// A row outcome with the state as JSON, as batch processing reports it.
pub type RowReport = RowOutcome<serde_json::Value>;

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
