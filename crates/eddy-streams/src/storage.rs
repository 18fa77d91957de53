//! The `Storage` trait: the seam every backend implements.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast;

use crate::{
    Append, Appended, Committed, Fork, Notifier, Offset, Payload, ReadFrom, Retention,
    StreamConfig, StreamError, StreamInfo, StreamPath, StreamSnapshot,
};

/// The result of a create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// `false` when an equivalent stream already existed.
    pub created: bool,
    /// The stream as it is now.
    pub info: StreamInfo,
}

/// A chunk of messages read from a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadChunk {
    /// The stream's content type.
    pub content_type: String,
    /// The offset of the first message returned.
    pub start: Offset,
    /// The messages, in append order.
    pub messages: Vec<Bytes>,
    /// Each message's position, when they do not follow one another from
    /// `start` (compaction dropped messages between them); `None` when
    /// the message at index `i` is at `start` + `i`. See
    /// [`offset_of`](ReadChunk::offset_of).
    pub positions: Option<Vec<u64>>,
    /// The offset after the last message returned: where the next read starts.
    pub next_offset: Offset,
    /// Whether the read reached the tail.
    pub up_to_date: bool,
    /// Whether the read reached the tail of a closed stream: nothing more
    /// will ever come.
    pub closed: bool,
    /// The stream's retention policy.
    pub retention: Retention,
    /// The stream's compaction policy, if it has one.
    pub compaction: Option<crate::Compaction>,
    /// Where compaction dropped deletes past their lifetime, if it did: a
    /// reader that resumes before it may have missed a delete.
    pub dropped_deletes: Option<crate::DroppedDeletes>,
}

impl ReadChunk {
    /// The offset of the message at index `index` of the chunk.
    pub fn offset_of(&self, index: usize) -> Offset {
        match &self.positions {
            Some(positions) => match positions.get(index) {
                Some(position) => self.start.with_position(*position),
                None => self.next_offset,
            },
            None => self.start.advanced(index as u64),
        }
    }

    /// Where a read goes on after taking the chunk's first `taken`
    /// messages: the next one's offset, or the chunk's next offset when
    /// it took them all.
    pub fn offset_after(&self, taken: usize) -> Offset {
        if taken >= self.messages.len() {
            self.next_offset
        } else {
            self.offset_of(taken)
        }
    }
}

/// The outcome of [`Storage::wait`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The stream has messages after the offset, or is closed.
    Changed(StreamInfo),
    /// Nothing changed before the timeout.
    TimedOut(StreamInfo),
}

/// A durable stream store.
///
/// Every method is atomic: it either does all it says or fails with a
/// [`StreamError`] and changes nothing. Backends differ only in where the
/// bytes live; the rules are shared, and the contract test suite checks that
/// each backend keeps them.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Creates a stream, optionally with initial data. An existing stream
    /// with an equivalent configuration is left as it is (`created: false`);
    /// one with another configuration is a
    /// [`ConfigConflict`](StreamError::ConfigConflict).
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError>;

    /// Appends atomically under the append's conditions.
    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError>;

    /// Reads messages from `from`, at least one when there is one, and then
    /// more while the total stays under `max_bytes`.
    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError>;

    /// Creates `path` as a fork of another stream (see [`Fork`]). A repeated
    /// identical fork is left as it is (`created: false`).
    ///
    /// Backends that do not support forks keep this default, which refuses.
    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let _ = (path, fork);
        Err(StreamError::InvalidArgument(
            "this stream store does not support forks".into(),
        ))
    }

    /// Releases idempotent producer `producer` on the live stream at
    /// `path`: the store drops its state, so it no longer counts against
    /// the stream's producer limit, and its next append is a new
    /// producer's (sequence 0). A retry of an append it made before is
    /// then no longer recognised as one: release a producer only when no
    /// one can still retry its appends (its writer is done for good).
    /// Returns whether the store kept state for it.
    ///
    /// Backends that cannot keep this default, which refuses.
    async fn release_producer(
        &self,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        let _ = (path, producer);
        Err(StreamError::InvalidArgument(
            "this stream store cannot release producer state".into(),
        ))
    }

    /// Describes a live stream.
    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError>;

    /// Deletes a stream: later calls on the path fail with
    /// [`Gone`](StreamError::Gone) until it is created again.
    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError>;

    /// Lists live streams whose path starts with `prefix`, sorted by path.
    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError>;

    /// One page of [`list`](Storage::list): the live streams whose path
    /// starts with `prefix` and sorts after `after` (the previous page's
    /// [`next`](crate::ListPage::next)), at most `limit` of them (1 to
    /// [`MAX_LIST_PAGE`](crate::MAX_LIST_PAGE)), sorted by path.
    ///
    /// The default lists everything and keeps the page; a store that can
    /// read one page alone (DynamoDB) overrides it.
    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::ListPage, StreamError> {
        Ok(crate::ListPage::of(self.list(prefix).await?, after, limit))
    }

    /// One page of the paths of [`list_page`](Storage::list_page), for a
    /// caller that needs the paths alone: on a store that reads a
    /// stream's record apart from its path (DynamoDB) no record is read,
    /// so the page may also hold paths of streams that are no longer
    /// live (see [`PathPage::paths`](crate::PathPage::paths)). Its
    /// cursor is `list_page`'s: the paths after `after`, at most `limit`
    /// (1 to [`MAX_LIST_PAGE`](crate::MAX_LIST_PAGE)).
    ///
    /// The default keeps the paths of a `list_page`.
    async fn list_paths_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::PathPage, StreamError> {
        Ok(self.list_page(prefix, after, limit).await?.into())
    }

    /// How many streams the store keeps under `prefix`: its live streams,
    /// and on a store that counts without reading records (DynamoDB)
    /// also the expired and deleted-but-forked streams it has not removed
    /// yet, so an upper bound there. What a cap on streams counts.
    ///
    /// The default counts a listing.
    async fn count(&self, prefix: &str) -> Result<usize, StreamError> {
        Ok(self.list(prefix).await?.len())
    }

    /// One step of sweeping: removes the remains of up to `max` expired
    /// streams (their messages and producers; nothing live forked from
    /// them) and drops up to `max` tombstones of deleted paths, each once
    /// its stream was created more than
    /// [`SWEEP_GRACE`](crate::SWEEP_GRACE) ago, and up to `max` idempotent
    /// producers' states past the store's producer expiry (which appends
    /// already treat as unknown), and up to 1024 of the oldest messages (and
    /// 1 MiB of them, at least one message) of up to `max` streams whose [`Retention`] policy lets them go;
    /// returns how many it removed. A path whose tombstone was dropped answers
    /// [`NotFound`](StreamError::NotFound) rather than
    /// [`Gone`](StreamError::Gone). Call it again while it returns
    /// something; each step is one short write.
    ///
    /// Backends that cannot keep this default, which sweeps nothing (their
    /// expired streams go when a create meets them).
    async fn sweep(&self, max: usize) -> Result<usize, StreamError> {
        let _ = max;
        Ok(0)
    }

    /// Runs one whole compaction pass of the stream at `path` now (see
    /// [`Compaction`](crate::Compaction)), in steps of at most 1024
    /// messages each, and returns how many messages it dropped. A stream
    /// without a compaction policy drops none.
    ///
    /// Backends that cannot compact keep this default, which refuses.
    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        let _ = path;
        Err(StreamError::InvalidCompaction(
            "this stream store cannot compact streams".into(),
        ))
    }

    /// A live stream's state apart from its messages (configuration,
    /// tail, close, producers), as of one commit: the backup primitive.
    ///
    /// Backends that cannot take one keep this default, which refuses.
    async fn snapshot(&self, path: &StreamPath) -> Result<StreamSnapshot, StreamError> {
        let _ = path;
        Err(StreamError::InvalidArgument(
            "this stream store cannot take snapshots".into(),
        ))
    }

    /// Restores the messages at positions `first..` of a snapshot: the
    /// chunk at 0 creates the stream (the path must be free) with the
    /// snapshot's state; later chunks start at its tail; the last one
    /// brings it to the snapshot's count and bytes, so message positions
    /// and producer deduplication are the snapshot's. The restored stream
    /// is a new one: it gets a new incarnation, so its offsets are not
    /// the snapshot's. Returns the stream as the chunk left it.
    ///
    /// Backends that cannot restore keep this default, which refuses.
    async fn restore(
        &self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        let _ = (snapshot, first, messages);
        Err(StreamError::InvalidArgument(
            "this stream store cannot restore snapshots".into(),
        ))
    }

    /// Checks that the store takes writes now, writing nothing: the
    /// readiness probe's question. SQLite passes an empty job through its
    /// writer's group commit; PostgreSQL commits an empty read-write
    /// transaction on a primary; a remote store asks its server's
    /// `/readyz`.
    ///
    /// A store that takes writes whenever it exists (memory) keeps this
    /// default, which says yes.
    async fn writable(&self) -> Result<(), StreamError> {
        Ok(())
    }

    /// The backend's change signals.
    fn notifier(&self) -> &Notifier;

    /// Waits until the stream has messages after `after` or is closed, at
    /// most `timeout`. Returns at once when that is already so.
    ///
    /// The default looks at the stream once (unless a commit already
    /// published its state) and then decides from what each commit
    /// publishes, without asking the store again.
    async fn wait(
        &self,
        path: &StreamPath,
        after: Offset,
        timeout: Duration,
    ) -> Result<Wait, StreamError> {
        wait_for(self, path, after, timeout).await
    }

    /// Every later commit of this store in this process, as
    /// (path, new tail, closed).
    fn committed(&self) -> broadcast::Receiver<Committed> {
        self.notifier().committed()
    }

    /// The store's durable wake-up marks, when it can write a mark in
    /// the transaction of each commit (SQLite, PostgreSQL); `None` for a
    /// store that cannot (memory, a remote server).
    fn wake_marks(&self) -> Option<&dyn crate::WakeMarks> {
        None
    }

    /// The store's shared [documents](crate::Documents): kept beside its
    /// streams, so that every process serving the store sees the same
    /// ones (SQLite, PostgreSQL, DynamoDB; a memory store's are its
    /// process's own). `None` for a store that keeps none (a remote
    /// server).
    fn documents(&self) -> Option<&dyn crate::Documents> {
        None
    }
}

/// Whether a stream whose tail is `tail` has messages after `after`. The
/// zero offset is the beginning of any stream; an offset of another
/// incarnation (the stream was replaced, or an offset of a fork's source)
/// is left to the caller's next read to decide.
fn has_more_than(tail: Offset, after: Offset) -> bool {
    if after.is_zero() {
        tail.position() > 0
    } else if tail.incarnation() == after.incarnation() {
        tail.position() > after.position()
    } else {
        true
    }
}

/// [`Storage::wait`]: the waiter looks at the stream once (unless a commit
/// already published its state) and then decides from what each commit
/// publishes, without asking the store again; a delete or a commit
/// reported without its state makes it look again. (A backend whose
/// signals can be lost, as PostgreSQL's from other processes, publishes
/// the state of waited-on streams again itself.)
pub(crate) async fn wait_for<S: Storage + ?Sized>(
    store: &S,
    path: &StreamPath,
    after: Offset,
    timeout: Duration,
) -> Result<Wait, StreamError> {
    let mut watcher = store.notifier().watch(path.as_str());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut info = match watcher.latest() {
        Some(info) => info,
        None => store.head(path).await?,
    };
    loop {
        if has_more_than(info.tail, after) || info.closed {
            return Ok(Wait::Changed(info));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(Wait::TimedOut(info));
        }
        info = match tokio::time::timeout_at(deadline, watcher.changed()).await {
            Ok(Some(published)) => published,
            Err(_) => return Ok(Wait::TimedOut(info)),
            Ok(None) => store.head(path).await?,
        };
    }
}
