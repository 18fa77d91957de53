//! What a backup needs beyond [`Storage::read`](crate::Storage::read): a
//! stream's state apart from its messages, read in one atomic unit with
//! its tail, and the restore of that state with the messages.

use crate::{ProducerPosition, StreamConfig, StreamPath};

/// A stream's state apart from its messages: configuration, tail, close,
/// `Stream-Seq` and producer states, all as of one commit. The messages at
/// positions `0..count` are the stream's messages at that commit (they
/// never change once written), so reading them afterwards completes a
/// consistent copy while the store keeps serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSnapshot {
    /// The stream.
    pub path: StreamPath,
    /// The stream's incarnation (the first part of its offsets). A restore
    /// does not keep it: the restored stream is a new one, with a new
    /// incarnation, so that offsets handed out after the snapshot was
    /// taken can never name the restored stream's other data.
    pub incarnation: u64,
    /// Its configuration (content type, expiry, closed at creation).
    pub config: StreamConfig,
    /// Whether the stream is closed.
    pub closed: bool,
    /// How many messages it holds (the position of its tail).
    pub count: u64,
    /// The size of those messages in bytes.
    pub bytes: u64,
    /// The last accepted `Stream-Seq` value.
    pub last_stream_seq: Option<String>,
    /// The producer append that closed the stream, so that its retry is
    /// still acknowledged after a restore.
    pub closed_by: Option<ProducerPosition>,
    /// Every idempotent producer's last accepted position, with when it
    /// was accepted, sorted by id. Expired states the store still holds
    /// are included (an append treats them as unknown either way).
    pub producers: Vec<SnapshotProducer>,
    /// Where compaction dropped deletes past their lifetime, if it did: a
    /// restore keeps it (at the same position of the new incarnation).
    pub dropped_deletes: Option<crate::DroppedDeletes>,
}

/// One idempotent producer's state in a [`StreamSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotProducer {
    /// Its last accepted position.
    pub position: ProducerPosition,
    /// When that write was accepted, in unix milliseconds: a restore
    /// keeps it, so the producer expires when it would have. `None` (a
    /// backup written before the store kept it) restores as the restore's
    /// time.
    pub last_ms: Option<i64>,
}
