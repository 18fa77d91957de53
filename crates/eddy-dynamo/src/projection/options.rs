//! The declarations a projection's rows follow: how events of a source are
//! folded (`mode`), the revision guard and row removal.

use std::time::Duration;

/// How a source's events fold into a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every event, in version order, gaps filled from the event store: for
    /// events that change a few fields, where skipping one loses data.
    #[default]
    Fold,
    /// Only the newest event of each instance in a batch, nothing read: for
    /// events that carry the source's whole part. Tried newest first; one
    /// that is rejected or skipped falls back to the next older one; the
    /// events older than the one applied are reported as superseded.
    Latest,
}

/// A row attribute that every write sets one higher, conditioned on the
/// value read: one guard that serialises every writer of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    pub(crate) field: String,
    pub(crate) initial: u64,
}

impl Revision {
    /// The revision kept in `field`; a row's first write sets 1.
    pub fn new(field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            initial: 1,
        }
    }

    /// The value of a row's first write (also of the first write to a row
    /// written before the projection, which has no revision yet): an
    /// existing counter that readers see from 0 keeps its numbering with
    /// `initial(0)`.
    pub fn initial(mut self, initial: u64) -> Self {
        self.initial = initial;
        self
    }

    /// The field.
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl From<&str> for Revision {
    fn from(field: &str) -> Self {
        Revision::new(field)
    }
}

impl From<String> for Revision {
    fn from(field: String) -> Self {
        Revision::new(field)
    }
}

/// Lets `evolve` remove rows ([`Step::Remove`](super::Step::Remove)): the
/// row's key keeps a tombstone with its checkpoints and revision only, so a
/// redelivery cannot bring the row back. A later event of any source starts
/// it again (the spec's rule), unless some sources are declared the only
/// ones that may
/// ([`SourceBuilder::restarts_removed_rows`](super::SourceBuilder::restarts_removed_rows)):
/// see the crate docs on another shard's old news after a tombstone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removal {
    pub(crate) ttl: Option<Duration>,
}

impl Removal {
    /// Tombstones that stay until the row is created again.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tombstones that the table's TTL expires after `ttl` (the table
    /// schema must name a TTL attribute). Choose more than the change
    /// feed's retention plus any replay window: once a tombstone is gone, a
    /// very late event recreates the row.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}
