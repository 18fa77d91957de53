//! The record-level seam, for stream store backends outside this crate.
//!
//! Every rule of the store (create and its idempotency check, append and
//! its conditions, forks, delete and soft delete, expiry) lives in one
//! engine inside this crate. A backend only stores and loads records:
//!
//! - per stream path, one [`StreamRecord`] (store its serde form; never
//!   look inside beyond its accessors), or a tombstone of a deleted
//!   stream;
//! - per stream, its messages by position and its idempotent producers'
//!   [`ProducerState`]s.
//!
//! It implements [`RecordReader`] and [`Records`] on a handle to one
//! atomic unit of its own (a transaction, a lock): the engine loads what
//! it needs, checks everything, and only then writes, so a unit whose
//! call failed has written nothing. What a backend must keep:
//!
//! 1. **Atomicity.** The writes of one unit become visible together or not
//!    at all, and the records the unit loaded are still as loaded when it
//!    commits (a lock held, or a condition on each record's version).
//! 2. **Keys are never reused.** [`RecordReader::Key`] names one stream's
//!    rows; a stream created again at the same path gets another key.
//! 3. **Message positions.** Messages are stored at the positions the
//!    engine gives and read back in position order, byte for byte.
//! 4. **Forks.** [`RecordReader::forks_of`] finds every stream whose
//!    record names the path as its fork source, including those written
//!    in the same unit.
//! 5. **Tombstones keep incarnations.** [`Records::tombstone`] is given the
//!    deleted stream's incarnation and [`RecordReader::tombstoned`] answers
//!    it, so a stream created again at the path, by any process, gets a
//!    later one and never hands out the deleted stream's offsets.
//!
//! A backend whose units are opened and committed by the store (an
//! optimistic one: DynamoDB's `TransactWriteItems` conditioned on the
//! versions it read) implements [`Backend`] and [`Unit`] too, and
//! [`RecordStorage`] is its whole [`Storage`](crate::Storage): every call
//! is one unit, committed once and run again when it lost a race;
//! concurrent appends to one stream share a unit (group commit); readers
//! wake on this process's commits at once and on other processes' within
//! [`RecordOptions::poll`].

pub use crate::record::{Op, RecordReader, Records, Stored, StreamRecord, Sweepable};
pub use crate::rules::ProducerState;

mod group;
mod poll;
mod retry;
mod storage;
mod sweep;

use std::sync::Arc;
use std::time::Duration;

use crate::payload::DEFAULT_MAX_APPEND_BYTES;
use crate::{
    Clock, Limits, StreamError, SystemClock, DEFAULT_MAX_PRODUCERS_PER_STREAM,
    DEFAULT_PRODUCER_EXPIRY,
};

pub use storage::RecordStorage;

/// A record backend whose atomic units [`RecordStorage`] opens, runs the
/// engine in, and commits: all a backend needs to be a whole
/// [`Storage`](crate::Storage).
pub trait Backend: Send + Sync + 'static {
    /// One atomic unit of record reads and writes.
    type Unit: Unit;

    /// Opens a unit. Its loads see committed records; its writes stay in
    /// it until [`commit`](Backend::commit).
    fn open(&self) -> Self::Unit;

    /// Makes every write of `unit` durable at once, provided that every
    /// record it loaded is still as it was loaded; otherwise writes
    /// nothing and answers [`Commit::Conflict`], and the store runs the
    /// call again on a new unit. A unit that wrote nothing commits without
    /// a request. An error means nothing was written, or (a lost answer)
    /// that the outcome is unknown: the store reports it and never runs
    /// the call again by itself.
    fn commit(&self, unit: Self::Unit) -> impl Op<Commit>;

    /// Moves the last access of the stream `key` forward to `at_ms`,
    /// never back, outside any unit: a read's TTL touch.
    fn slide(&self, key: &UnitKey<Self>, at_ms: i64) -> impl Op<()>;

    /// The committed records at `paths`, in order (`None` for a path with
    /// no stream): how the store sees other processes' commits to the
    /// streams its readers wait on.
    fn records(&self, paths: &[String]) -> impl Op<Vec<Option<StreamRecord>>>;

    /// Whether every record `unit` loaded is still as it was loaded, writing
    /// nothing: several reads of one unit (a stream's record and its
    /// producers: a snapshot) are as of one commit when they are. The
    /// default says yes, for backends whose units read one consistent
    /// view.
    fn unchanged(&self, unit: Self::Unit) -> impl Op<bool> {
        drop(unit);
        async { Ok(true) }
    }

    /// Checks that the backend's store answers now, writing nothing: the
    /// readiness probe's question ([`Storage::writable`](crate::Storage::writable)).
    /// The default says yes.
    fn writable(&self) -> impl Op<()> {
        async { Ok(()) }
    }

    /// The backend's shared [documents](crate::Documents), which
    /// [`RecordStorage`] answers for
    /// [`Storage::documents`](crate::Storage::documents). A backend that
    /// keeps none keeps this default.
    fn documents(&self) -> Option<&dyn crate::Documents> {
        None
    }

    /// Whether the backend applies retention policies: its units find the
    /// streams that owe drops ([`Sweepable::retained`]) and drop messages
    /// ([`RecordReader::message_sizes`], [`Records::drop_messages`]). A store
    /// over a backend that keeps this default (`false`) refuses a policy
    /// (`retention/invalid`), rather than keep what its writer asked to
    /// drop.
    fn applies_retention(&self) -> bool {
        false
    }

    /// Whether the backend compacts streams: its units drop positions
    /// inside a stream ([`Records::drop_positions`]) and read with holes
    /// ([`RecordReader::messages_at`], [`RecordReader::messages_before`]).
    /// A store over a backend that keeps this default (`false`) refuses a
    /// compaction policy (`compaction/invalid`), rather than keep every
    /// superseded change its writer asked to drop.
    fn compacts(&self) -> bool {
        false
    }
}

/// The key type of a backend's units.
pub type UnitKey<B> = <<B as Backend>::Unit as RecordReader>::Key;

/// A backend's atomic unit, with savepoints so that several appends share
/// one commit (group commit) and one that fails takes back only its own
/// writes.
pub trait Unit: Records + Send + 'static {
    /// A point to roll back to.
    type Mark: Send;

    /// The unit's writes so far.
    fn mark(&self) -> Self::Mark;

    /// Forgets the writes made after `mark`.
    fn rollback(&mut self, mark: Self::Mark);

    /// Why the unit's writes cannot be committed at once (a limit of the
    /// backend's transactions), if they cannot. A group commit then takes
    /// back the last append and commits it in the next group; an append
    /// that is too large alone fails with this error.
    fn overflow(&self) -> Option<StreamError>;
}

/// The outcome of [`Backend::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Every write is durable.
    Done,
    /// A record the unit loaded changed meanwhile: nothing was written.
    Conflict,
}

/// Options of a [`RecordStorage`].
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// The largest append accepted, in bytes.
    pub max_append_bytes: usize,
    /// The most idempotent producers whose state one stream keeps; a new
    /// producer beyond it is refused ([`StreamError::TooManyProducers`]).
    pub max_producers_per_stream: usize,
    /// How long an idle producer's state is kept after its last accepted
    /// write: retries within it are deduplicated, and after it the
    /// producer's next append starts it afresh.
    pub producer_expiry: Duration,
    /// What one write may do: messages per append, bytes a fork copies.
    pub limits: Limits,
    /// Where the store reads the time (for expiry). Processes that share
    /// a backend should have their clocks in sync.
    pub clock: Arc<dyn Clock>,
    /// How often the streams that readers wait on are read again to see
    /// other processes' commits: the longest a commit elsewhere waits
    /// before a reader here wakes, besides the read itself.
    pub poll: Duration,
    /// The most appends to one stream committed together.
    pub max_group: usize,
    /// How long a call that keeps losing races to other writers of the
    /// same stream runs again before it fails with a retryable error
    /// having written nothing (see the DESIGN of a backend for the bound
    /// this gives W writer processes).
    pub contention_timeout: Duration,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            max_producers_per_stream: DEFAULT_MAX_PRODUCERS_PER_STREAM,
            producer_expiry: DEFAULT_PRODUCER_EXPIRY,
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            poll: Duration::from_millis(100),
            max_group: 64,
            contention_timeout: Duration::from_secs(10),
        }
    }
}
