//! The record-level seam: what a backend stores, and the few operations
//! the engine needs from it. Public through [`crate::backend`].
//!
//! A backend stores, per stream path, one [`StreamRecord`] (the head and
//! its lifecycle fields), the messages by position, and the idempotent
//! producers' states; plus tombstones of deleted paths. It knows nothing
//! about the rules: the engine decides, the backend reads and writes
//! records inside one atomic unit (a lock, a savepoint, a transaction).
//!
//! The methods return futures so that a backend on an asynchronous driver
//! (PostgreSQL) implements them directly; backends that answer at once
//! (memory, SQLite) return ready futures and drive the engine with
//! `engine::complete`. Each future is `Send`, so the
//! engine's futures are `Send` whenever the backend's handle is.

use std::future::Future;
use std::ops::Range;

use bytes::Bytes;

use crate::clock::unix_ms;
use crate::fork::ForkOrigin;
use crate::rules::{expired, Head, ProducerState};
use crate::{Expiry, ReadFrom, StreamError};

/// Everything the engine keeps about a stream besides its messages and
/// producers.
///
/// A backend outside this crate treats it as a value: it stores its serde
/// form (every field the engine keeps, so a backend never misses one that
/// a later version adds) and gives it back as loaded. It reads only what
/// its own bookkeeping needs: the last access ([`accessed_ms`], which a
/// read's TTL touch moves without a full write) and the fork source
/// ([`fork_source`], to find a stream's forks).
///
/// [`accessed_ms`]: StreamRecord::accessed_ms
/// [`fork_source`]: StreamRecord::fork_source
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    /// Configuration, tail, close and `Stream-Seq` state.
    pub(crate) head: Head,
    /// When the stream was last read or written (for sliding TTLs).
    pub(crate) accessed_ms: i64,
    /// Where the stream was forked from, if it is a fork.
    pub(crate) origin: Option<ForkOrigin>,
    /// Deleted while forks still read from it.
    pub(crate) soft_deleted: bool,
}

impl StreamRecord {
    /// When the stream was last read or written, in unix milliseconds.
    pub fn accessed_ms(&self) -> i64 {
        self.accessed_ms
    }

    /// Moves the last access forward to `at_ms`, never back: how a
    /// backend that stores read touches apart from the record merges them
    /// in when it loads it.
    pub fn slide(&mut self, at_ms: i64) {
        self.accessed_ms = self.accessed_ms.max(at_ms);
    }

    /// Whether the stream was deleted while forks still read from it
    /// (retired until they are gone): a backend that removes a chain of
    /// forks in several steps tells the stream a delete removes (live
    /// until then) from those that were already dead.
    pub fn soft_deleted(&self) -> bool {
        self.soft_deleted
    }

    /// The stream's incarnation (its creation time in microseconds).
    pub fn incarnation(&self) -> u64 {
        self.head.incarnation
    }

    /// When the stream expires as its record stands, in unix
    /// milliseconds; `None` if it never does. Reads and appends move a
    /// sliding TTL's expiry later, never earlier, so an expiry computed
    /// from an older record is never after the stream's.
    pub fn expires_at_ms(&self) -> Option<i64> {
        match self.head.config.expiry {
            Expiry::Never => None,
            Expiry::Ttl(secs) => Some(
                self.accessed_ms
                    .saturating_add(i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)),
            ),
            Expiry::At(at) => Some(unix_ms(at)),
        }
    }

    /// The path this stream was forked from, if it is a fork.
    pub fn fork_source(&self) -> Option<&str> {
        self.origin.as_ref().map(|origin| origin.source.as_str())
    }

    /// The number of messages in the stream.
    pub fn count(&self) -> u64 {
        self.head.count
    }

    /// The size of the stream's messages, in bytes.
    pub fn bytes(&self) -> u64 {
        self.head.bytes
    }

    /// A new stream's record.
    pub(crate) fn new(head: Head, origin: Option<ForkOrigin>, now_ms: i64) -> Self {
        StreamRecord {
            head,
            accessed_ms: now_ms,
            origin,
            soft_deleted: false,
        }
    }

    /// Whether the stream has expired at `now_ms`.
    pub(crate) fn expired(&self, now_ms: i64) -> bool {
        expired(&self.head.config, self.accessed_ms, now_ms)
    }

    /// Whether the stream is readable and writable at `now_ms`.
    pub(crate) fn is_live(&self, now_ms: i64) -> bool {
        !self.soft_deleted && !self.expired(now_ms)
    }

    /// The first message position the stream keeps: 0 unless its
    /// retention policy dropped a prefix.
    pub fn first(&self) -> u64 {
        self.head.retained.first
    }

    /// Whether the stream may have holes where messages were dropped
    /// inside it (it has a compaction policy, or was restored or forked
    /// with holes): its reads skip missing positions.
    pub fn has_holes(&self) -> bool {
        self.head.config.compaction.is_some() || self.head.retained.compacted.dropped > 0
    }

    /// When the sweep should next drop messages of this stream under its
    /// retention policy, in unix milliseconds (`i64::MIN`: at once);
    /// `None` when nothing will be droppable until it is written again.
    /// A backend that finds [`Sweepable::retained`] stores it with the
    /// record, to find the streams due.
    pub fn retention_due_ms(&self) -> Option<i64> {
        self.head.retention_due_ms()
    }

    /// The message position a read from `from` starts at. Besides its own
    /// offsets, a stream takes the zero offset (its beginning) and, on a
    /// fork, its source's offsets up to the branch point, which name the
    /// same data here. Any other incarnation's offset is stale. The
    /// beginning is the first message kept; an offset before it was
    /// dropped.
    pub fn start_position(&self, path: &str, from: ReadFrom) -> Result<u64, StreamError> {
        let position = self.position(path, from)?;
        let first = self.first();
        if position < first {
            if let ReadFrom::Offset(offset) = from {
                return Err(StreamError::OffsetDropped {
                    path: path.to_owned(),
                    offset,
                    earliest: self.head.offset(first),
                });
            }
        }
        Ok(position.max(first))
    }

    /// The message position `from` names, kept or not.
    fn position(&self, path: &str, from: ReadFrom) -> Result<u64, StreamError> {
        let head = &self.head;
        let offset = match from {
            ReadFrom::Beginning => return Ok(0),
            ReadFrom::Tail => return Ok(head.count),
            ReadFrom::Offset(offset) => offset,
        };
        let inherited = self.origin.as_ref().is_some_and(|origin| {
            offset.incarnation() == origin.incarnation && offset.position() <= origin.position
        });
        if offset.is_zero() || inherited {
            return Ok(offset.position());
        }
        if offset.incarnation() > head.incarnation
            || (offset.incarnation() == head.incarnation && offset.position() > head.count)
        {
            return Err(StreamError::OffsetBeyondTail {
                offset,
                tail: head.tail(),
            });
        }
        if offset.incarnation() < head.incarnation {
            return Err(StreamError::StaleOffset {
                path: path.to_owned(),
                offset,
                incarnation: head.incarnation,
            });
        }
        Ok(offset.position())
    }

    /// Whether reads and appends move the expiry (a sliding TTL).
    pub(crate) fn slides(&self) -> bool {
        matches!(self.head.config.expiry, Expiry::Ttl(_))
    }
}

/// An expiry as SQL backends store it: `(ttl_secs, expires_at_ms)`, at
/// most one of them set.
pub(crate) fn expiry_columns(expiry: Expiry) -> (Option<i64>, Option<i64>) {
    match expiry {
        Expiry::Never => (None, None),
        Expiry::Ttl(secs) => (Some(i64::try_from(secs).unwrap_or(i64::MAX)), None),
        Expiry::At(at) => (None, Some(unix_ms(at))),
    }
}

/// The expiry stored as [`expiry_columns`].
pub(crate) fn expiry_from_columns(ttl_secs: Option<i64>, expires_at_ms: Option<i64>) -> Expiry {
    match (ttl_secs, expires_at_ms) {
        (Some(secs), _) => Expiry::Ttl(u64::try_from(secs).unwrap_or(0)),
        (None, Some(ms)) => Expiry::At(from_unix_ms(ms)),
        (None, None) => Expiry::Never,
    }
}

fn from_unix_ms(ms: i64) -> std::time::SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// A record as loaded, with the backend's key for its stream.
#[derive(Clone, Debug)]
pub struct Stored<K> {
    /// The backend's handle on this stream's rows.
    pub key: K,
    /// The record.
    pub record: StreamRecord,
}

/// Shorthand for the futures of record operations: `Send`, and failing
/// with a [`StreamError`].
pub trait Op<T>: Future<Output = Result<T, StreamError>> + Send {}
impl<T, F: Future<Output = Result<T, StreamError>> + Send> Op<T> for F {}

/// Reads records.
pub trait RecordReader {
    /// The backend's handle on one stream's rows. A key is never reused for
    /// another stream, even at the same path.
    type Key: Clone + Send + Sync;

    /// The record at `path`, if any (live, soft-deleted or expired).
    fn load(&mut self, path: &str) -> impl Op<Option<Stored<Self::Key>>>;

    /// The incarnation of the deleted stream whose tombstone `path` holds,
    /// if it holds one (no stream was created there since). Tombstones
    /// written before incarnations existed answer 0.
    fn tombstoned(&mut self, path: &str) -> impl Op<Option<u64>>;

    /// The paths of the streams forked from `path`.
    fn forks_of(&mut self, path: &str) -> impl Op<Vec<String>>;

    /// A producer's state on a stream.
    fn producer(&mut self, key: &Self::Key, producer: &str) -> impl Op<Option<ProducerState>>;

    /// Every producer's state on a stream, sorted by producer id.
    fn producers(&mut self, key: &Self::Key) -> impl Op<Vec<(String, ProducerState)>>;
    /// How many producers' states a stream keeps.
    fn producer_count(&mut self, key: &Self::Key) -> impl Op<u64>;

    /// The messages kept at positions `range`, each with its position, in
    /// order (a compacted stream has holes where messages were dropped),
    /// stopping before the total passes `max_bytes` but always at least
    /// one when the range holds one.
    fn messages_at(
        &mut self,
        key: &Self::Key,
        range: Range<u64>,
        max_bytes: usize,
    ) -> impl Op<Vec<(u64, Bytes)>>;

    /// The messages of [`messages_at`](RecordReader::messages_at) without
    /// their positions. The default drops them; a backend that holds the
    /// bare messages (a cache) may answer them directly.
    fn messages(
        &mut self,
        key: &Self::Key,
        range: Range<u64>,
        max_bytes: usize,
    ) -> impl Op<Vec<Bytes>> {
        let read = self.messages_at(key, range, max_bytes);
        async move {
            Ok(read
                .await?
                .into_iter()
                .map(|(_, message)| message)
                .collect())
        }
    }

    /// The last messages kept at positions `range`, at most `max` of
    /// them and, beyond the last one, at most `max_bytes` together, each
    /// with its position, in order: what a compaction step reads, going
    /// backwards. The default reads
    /// [`messages_at`](RecordReader::messages_at) of the last `max`
    /// positions.
    fn messages_before(
        &mut self,
        key: &Self::Key,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> impl Op<Vec<(u64, Bytes)>> {
        let start = range.end.saturating_sub(max).max(range.start);
        let read = self.messages_at(key, start..range.end, usize::MAX);
        async move {
            let mut last =
                crate::rules::take_sized(read.await?.into_iter().rev(), max_bytes, |m| m.1.len());
            last.reverse();
            Ok(last)
        }
    }

    /// Whether the unit has room for the writes of a compaction step
    /// now. A backend whose unit holds few writes (DynamoDB's 100-item
    /// transaction, shared by a sweep step's streams) answers no when
    /// the unit is nearly full: the step then does nothing and its pass
    /// waits for a later step, rather than end having looked at less.
    /// The default says yes.
    fn room_to_compact(&mut self) -> impl Op<bool> {
        std::future::ready(Ok(true))
    }

    /// The messages the stream keeps at positions `range`, each as its
    /// position and its size in bytes, in order: what retention's byte
    /// bound weighs (a compacted stream has holes between them). A
    /// backend may answer a prefix of `range` only: one that ends with the
    /// first message that takes the sizes past `max_bytes` (the sweep
    /// drops no more in one step, so weighing further only holds the
    /// writer), or one whose unit holds few writes weighs no more than it
    /// could drop. The sweep then drops no further than the last message
    /// weighed. The default reads the messages; a backend that can read
    /// sizes alone should.
    fn message_sizes(
        &mut self,
        key: &Self::Key,
        range: Range<u64>,
        max_bytes: u64,
    ) -> impl Op<Vec<(u64, u64)>> {
        let read = self.messages_at(key, range, usize::MAX);
        async move {
            let sizes = read.await?;
            let sizes = sizes
                .iter()
                .map(|(position, m)| Ok((*position, m.len() as u64)));
            crate::retention::within_bytes(sizes, max_bytes)
        }
    }

    /// Every record whose path starts with `prefix`, sorted by path.
    fn list(&mut self, prefix: &str) -> impl Op<Vec<(String, StreamRecord)>>;

    /// One page of [`list`](RecordReader::list): the records whose path
    /// starts with `prefix` and sorts after `after`, at most `limit`,
    /// with where the next page starts (`None` on the last). The default
    /// lists everything and keeps the page.
    fn list_page(
        &mut self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Op<(Vec<(String, StreamRecord)>, Option<String>)> {
        let listed = self.list(prefix);
        async move {
            let mut page: Vec<_> = listed
                .await?
                .into_iter()
                .filter(|(path, _)| after.is_none_or(|after| path.as_str() > after))
                .take(limit.saturating_add(1))
                .collect();
            let next = if page.len() > limit {
                page.truncate(limit);
                page.last().map(|(path, _)| path.clone())
            } else {
                None
            };
            Ok((page, next))
        }
    }

    /// One page of the paths of [`list_page`](RecordReader::list_page),
    /// live or not, when the backend can read them without their records;
    /// the default cannot (`None`), and the store keeps the paths of a
    /// page of live streams instead.
    fn list_paths_page(
        &mut self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Op<Option<crate::PathPage>> {
        let _ = (prefix, after, limit);
        std::future::ready(Ok(None))
    }

    /// How many records there are under `prefix` (live or not), when the
    /// backend can tell without reading them; the default cannot
    /// (`None`), and the store counts a listing of live streams instead.
    fn count(&mut self, prefix: &str) -> impl Op<Option<usize>> {
        let _ = prefix;
        std::future::ready(Ok(None))
    }

    /// What may be swept (see [`Sweepable`]): up to `max` streams that
    /// are not soft-deleted, whose incarnation is below `below` and that
    /// had expired by `now_ms` as far as their stored record says, and up
    /// to `max` tombstones whose incarnation is below `below`. The engine
    /// checks each again in the write that sweeps them, so a backend may
    /// find them outside it (on a reader) and may find too many. A backend
    /// that cannot find them keeps this default, which finds none: its
    /// expired streams then go only when a create meets them.
    fn sweepable(&mut self, now_ms: i64, below: u64, max: usize) -> impl Op<Sweepable> {
        let _ = (now_ms, below, max);
        std::future::ready(Ok(Sweepable::default()))
    }
}

/// What [`RecordReader::sweepable`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweepable {
    /// Paths of streams that may have expired.
    pub streams: Vec<String>,
    /// Paths whose tombstones may be dropped.
    pub tombstones: Vec<String>,
    /// Paths of live streams whose retention policy may let messages go:
    /// those whose [`retention_due_ms`](StreamRecord::retention_due_ms)
    /// is at or before the sweep's now. A backend that leaves it empty
    /// keeps every message (its streams' policies are not applied).
    pub retained: Vec<String>,
}

impl Sweepable {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty() && self.tombstones.is_empty() && self.retained.is_empty()
    }
}

/// Writes records. Each method is one step of the caller's atomic unit:
/// the engine only starts writing once every check has passed.
pub trait Records: RecordReader {
    /// Stores a new stream at `path` (dropping its tombstone) and returns
    /// its key.
    fn insert(&mut self, path: &str, record: &StreamRecord) -> impl Op<Self::Key>;

    /// Replaces a stream's record. It is passed by value so that a backend
    /// that keeps records (memory) moves it in instead of copying it.
    fn update(&mut self, key: &Self::Key, record: StreamRecord) -> impl Op<()>;

    /// Stores messages at positions `first..`, taken by value for the same
    /// reason.
    fn insert_messages(&mut self, key: &Self::Key, first: u64, messages: Vec<Bytes>)
        -> impl Op<()>;

    /// Copies the first `count` messages of `from` to `to` (positions
    /// kept) and returns their size in bytes.
    fn copy_prefix(&mut self, from: &Self::Key, to: &Self::Key, count: u64) -> impl Op<u64>;

    /// Stores a producer's state on a stream.
    fn save_producer(
        &mut self,
        key: &Self::Key,
        producer: &str,
        state: ProducerState,
    ) -> impl Op<()>;

    /// Drops one producer's state on a stream; whether it had one. A
    /// backend that cannot keeps this default, which refuses.
    fn remove_producer(&mut self, key: &Self::Key, producer: &str) -> impl Op<bool> {
        let _ = (key, producer);
        std::future::ready(Err(StreamError::InvalidArgument(
            "this stream store cannot release producer state".into(),
        )))
    }

    /// Drops up to `max` of stream `key`'s producer states whose last
    /// accepted write was at or before `cutoff_ms` (expired ones); how many
    /// it dropped. The engine calls it when a new producer would pass the
    /// stream's cap, so it should find them without reading every
    /// producer of the stream, and may drop fewer than `max` (a backend
    /// whose unit holds few writes). A backend that cannot keeps this
    /// default, which drops none: its expired producers then still count
    /// against the cap.
    fn drop_expired_producers(
        &mut self,
        key: &Self::Key,
        cutoff_ms: i64,
        max: usize,
    ) -> impl Op<u64> {
        let _ = (key, cutoff_ms, max);
        std::future::ready(Ok(0))
    }

    /// Drops up to `max` producer states of any stream whose last accepted
    /// write was at or before `cutoff_ms`; how many it dropped: one step
    /// of the store's sweep. The default drops none (for a backend that
    /// cannot find them without reading every stream).
    fn sweep_expired_producers(&mut self, cutoff_ms: i64, max: usize) -> impl Op<u64> {
        let _ = (cutoff_ms, max);
        std::future::ready(Ok(0))
    }

    /// Drops the messages at positions `range` of a stream (its retention
    /// policy let them go; the engine updates the record). A backend that
    /// cannot keeps this default, which refuses: it must then leave
    /// [`Sweepable::retained`] empty.
    fn drop_messages(&mut self, key: &Self::Key, range: Range<u64>) -> impl Op<()> {
        let _ = (key, range);
        std::future::ready(Err(StreamError::InvalidArgument(
            "this stream store cannot drop messages".into(),
        )))
    }

    /// Drops the messages at `positions` of a stream (compaction let them
    /// go; the engine updates the record); returns the bytes freed, of
    /// the messages that were there. A backend that cannot keeps this
    /// default, which refuses: its store must refuse compaction policies.
    fn drop_positions(&mut self, key: &Self::Key, positions: Vec<u64>) -> impl Op<u64> {
        let _ = (key, positions);
        std::future::ready(Err(StreamError::InvalidCompaction(
            "this stream store cannot compact streams".into(),
        )))
    }

    /// Removes a stream with its messages and producers.
    fn remove(&mut self, key: &Self::Key, path: &str) -> impl Op<()>;

    /// Moves a stream's last access forward to `at_ms` (a read's TTL
    /// touch; never backwards).
    fn slide(&mut self, key: &Self::Key, at_ms: i64) -> impl Op<()>;

    /// Marks `path` as deleted, keeping the deleted stream's incarnation.
    fn tombstone(&mut self, path: &str, incarnation: u64, now_ms: i64) -> impl Op<()>;

    /// Drops the tombstone of `path` if its incarnation is below `below`;
    /// whether it did. The default drops none (for a backend whose
    /// [`sweepable`](RecordReader::sweepable) finds none).
    fn drop_tombstone(&mut self, path: &str, below: u64) -> impl Op<bool> {
        let _ = (path, below);
        std::future::ready(Ok(false))
    }
}
