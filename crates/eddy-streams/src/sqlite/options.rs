//! How a SQLite store is opened.

use std::sync::Arc;
use std::time::Duration;

use crate::payload::DEFAULT_MAX_APPEND_BYTES;
use crate::{Clock, Limits, SystemClock};
use crate::{DEFAULT_MAX_PRODUCERS_PER_STREAM, DEFAULT_PRODUCER_EXPIRY};

/// When a commit counts as done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Each group commit is fsynced before any caller is answered: an
    /// acknowledged append survives a power loss.
    #[default]
    Sync,
    /// Commits reach the operating system but are fsynced only at WAL
    /// checkpoints: an acknowledged append survives a crash of the process,
    /// not of the machine.
    Process,
}

/// The default [`SqliteOptions::cache_bytes`]: 64 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Options for [`SqliteStorage::open_with`](super::SqliteStorage::open_with).
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// When a commit counts as done.
    pub durability: Durability,
    /// The largest append accepted, in bytes.
    pub max_append_bytes: usize,
    /// The most idempotent producers whose state one stream keeps; a new
    /// producer beyond it is refused
    /// ([`StreamError::TooManyProducers`](crate::StreamError::TooManyProducers)).
    pub max_producers_per_stream: usize,
    /// How long an idle producer's state is kept after its last accepted
    /// write: retries within it are deduplicated, and after it the
    /// producer's next append starts it afresh.
    pub producer_expiry: Duration,
    /// What one write may do: messages per append, bytes a fork copies.
    pub limits: Limits,
    /// Where the store reads the time (for expiry).
    pub clock: Arc<dyn Clock>,
    /// How many bytes of recently written messages the store keeps in
    /// memory, so that a read of them costs one query for the stream's
    /// head instead of a row per message (see `DESIGN-sqlite.md`).
    pub cache_bytes: usize,
    /// While set, every `COMMIT` fails (through SQLite's commit hook).
    #[cfg(test)]
    pub(crate) fail_commits: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Sync,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            max_producers_per_stream: DEFAULT_MAX_PRODUCERS_PER_STREAM,
            producer_expiry: DEFAULT_PRODUCER_EXPIRY,
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            cache_bytes: DEFAULT_CACHE_BYTES,
            #[cfg(test)]
            fail_commits: Arc::default(),
        }
    }
}
