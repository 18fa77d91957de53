//! What runners report, and the options they take.

use std::collections::BTreeMap;
use std::time::Duration;

use eddy_streams::Offset;

use crate::retry::MAX_INTERVAL;
use crate::{ProjectionError, Result, Retry};

/// How a pass (or cycle) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// Every input was read up to its tail.
    CaughtUp,
    /// The unit limit was reached; more input may remain.
    Limited,
    /// Every input is closed (or gone and kept) and its close committed.
    Closed,
    /// An input is gone: the final unit committed and the binding was
    /// forgotten.
    Forgotten,
}

/// What one pass did: the units it committed, their items, and the
/// offsets it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    /// How the pass ended.
    pub status: Status,
    /// Units committed.
    pub units: u64,
    /// Items in those units.
    pub items: u64,
    /// The committed offset of each input, by input name.
    pub offsets: BTreeMap<String, Offset>,
}

/// What a run, or one element of a follow stream, reports: the state and
/// offsets the last pass left, and the totals of the cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress<S> {
    /// The committed state; `None` for projections without state.
    pub state: Option<S>,
    /// The committed offset of each input, by input name.
    pub offsets: BTreeMap<String, Offset>,
    /// How the cycle ended.
    pub status: Status,
    /// Units committed in the cycle.
    pub units: u64,
    /// Items in those units.
    pub items: u64,
    /// The last pass of the cycle.
    pub pass: Pass,
}

/// The default number of items one input contributes to a unit.
pub const DEFAULT_UNIT_SIZE: usize = 1000;

/// The default number of bytes one input contributes to a unit (at least
/// one item, whatever its size): 4 MiB, half the store's default append
/// limit, so that a unit's output usually fits one append.
pub const DEFAULT_UNIT_BYTES: usize = 4 << 20;

/// How much one input contributes to a unit: at most `items` items and,
/// beyond its first item, at most `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnitBounds {
    pub items: usize,
    pub bytes: usize,
}

impl UnitBounds {
    /// The defaults ([`DEFAULT_UNIT_SIZE`], [`DEFAULT_UNIT_BYTES`]).
    pub const DEFAULT: UnitBounds = UnitBounds {
        items: DEFAULT_UNIT_SIZE,
        bytes: DEFAULT_UNIT_BYTES,
    };
}

/// The default bound on one wait of a follower: 30 s.
pub const DEFAULT_REPAIR_INTERVAL: Duration = Duration::from_millis(30_000);

/// Options of [`Host::run`](crate::Host::run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// The most units one run commits; `None` runs until caught up. Must be
    /// at least 1.
    pub limit: Option<usize>,
    /// The most items one input contributes to a unit. Must be at least 1.
    pub unit_size: usize,
    /// The most bytes one input contributes to a unit beyond its first
    /// item (an item larger than this is a unit of its own). Must be at
    /// least 1. Defaults to [`DEFAULT_UNIT_BYTES`].
    pub unit_bytes: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            limit: None,
            unit_size: DEFAULT_UNIT_SIZE,
            unit_bytes: DEFAULT_UNIT_BYTES,
        }
    }
}

impl RunOptions {
    /// These options with at most `limit` units per run.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// These options with another unit size.
    pub fn with_unit_size(mut self, unit_size: usize) -> Self {
        self.unit_size = unit_size;
        self
    }

    /// These options with another bound on the bytes of a unit's input.
    pub fn with_unit_bytes(mut self, unit_bytes: usize) -> Self {
        self.unit_bytes = unit_bytes;
        self
    }

    /// The bounds of one input's share of a unit.
    pub(crate) fn bounds(&self) -> UnitBounds {
        UnitBounds {
            items: self.unit_size,
            bytes: self.unit_bytes,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.limit == Some(0) {
            return Err(ProjectionError::invalid("limit must be at least 1"));
        }
        if self.unit_size == 0 {
            return Err(ProjectionError::invalid("unit_size must be at least 1"));
        }
        if self.unit_bytes == 0 {
            return Err(ProjectionError::invalid("unit_bytes must be at least 1"));
        }
        Ok(())
    }
}

/// Options of [`Host::follow`](crate::Host::follow).
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The most units one cycle commits; `None` runs each cycle until
    /// caught up. Must be at least 1.
    pub limit: Option<usize>,
    /// The most items one input contributes to a unit. Must be at least 1.
    pub unit_size: usize,
    /// The most bytes one input contributes to a unit beyond its first
    /// item. Must be at least 1. Defaults to [`DEFAULT_UNIT_BYTES`].
    pub unit_bytes: usize,
    /// The bound on each wait for new input (the repair interval). Must be
    /// more than zero and at most [`MAX_INTERVAL`](crate::MAX_INTERVAL).
    /// Defaults to 30 s.
    pub repair_interval: Duration,
    /// The retry schedule for `storage-failure`; `None` uses the host's,
    /// which defaults to jittered exponential backoff from 200 ms capped
    /// at 30 s.
    pub retry: Option<Retry>,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            limit: None,
            unit_size: DEFAULT_UNIT_SIZE,
            unit_bytes: DEFAULT_UNIT_BYTES,
            repair_interval: DEFAULT_REPAIR_INTERVAL,
            retry: None,
        }
    }
}

impl FollowOptions {
    /// These options with another repair interval (the spec's
    /// `repairIntervalMs`).
    pub fn with_repair_interval(mut self, interval: Duration) -> Self {
        self.repair_interval = interval;
        self
    }

    /// These options with a unit limit per cycle.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// These options with another unit size.
    pub fn with_unit_size(mut self, unit_size: usize) -> Self {
        self.unit_size = unit_size;
        self
    }

    /// These options with another bound on the bytes of a unit's input.
    pub fn with_unit_bytes(mut self, unit_bytes: usize) -> Self {
        self.unit_bytes = unit_bytes;
        self
    }

    /// These options with a retry schedule.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The run options of one cycle.
    pub(crate) fn run_options(&self) -> RunOptions {
        RunOptions {
            limit: self.limit,
            unit_size: self.unit_size,
            unit_bytes: self.unit_bytes,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.run_options().validate()?;
        if self.repair_interval.is_zero() || self.repair_interval > MAX_INTERVAL {
            return Err(ProjectionError::invalid(format!(
                "repair_interval (repairIntervalMs) must be more than zero and at most {MAX_INTERVAL:?} (got {:?})",
                self.repair_interval
            )));
        }
        self.retry.as_ref().map_or(Ok(()), Retry::validate)
    }
}
