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

pub use crate::record::{Op, RecordReader, Records, Stored, StreamRecord};
pub use crate::rules::ProducerState;
