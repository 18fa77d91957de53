//! Live readers share store reads: one append wakes every long-poll and
//! SSE reader waiting at the stream's tail, and they all want the same
//! read. Readers at one (path, start, max bytes) form a [`ReadGroup`];
//! a reader joins the group of the offset it waits at *before* it waits,
//! so every reader one commit wakes is in the group when it wakes, and
//! the group answers them all from one read, on every store.
//!
//! Which read a reader may take: the group keeps its latest read, in
//! flight or done, with the stream state it was started for ([`Seen`]:
//! tail and close), and a reader takes it when it knows that same state
//! and nothing later.
//!
//! - A woken reader knows the state its wake handed it. The read for that
//!   state was started by a reader that had already seen it, so it holds
//!   everything up to it, which is all a reader woken with it can know
//!   of. Readers woken by the same commit thus share one read even when
//!   it ends before most of them are scheduled.
//! - A reader that was not woken (its first read, before any wait; an SSE
//!   reader catching up) knows the state the store last published for
//!   the stream (while anyone waits on it): a read for that state holds
//!   every commit published before the reader came. So the readers an
//!   append answered, polling again at once, share one read too. A commit
//!   of another process that this one has not seen yet reaches such a
//!   reader with its wake, within the store's poll, as it reaches readers
//!   already waiting.
//! - A reader that knows no state takes only a read still in flight: an
//!   answer that is at worst a shorter prefix of the stream (an empty one
//!   sends the reader to wait, and the wait looks at the stream again).
//! - A read from the tail (`now`) is never shared: an earlier read's tail
//!   would hand the reader messages appended before its request.
//!
//! Errors are shared by the readers that took the read while it ran; a
//! reader that comes after a failed read reads again.
//!
//! Bounds: a group lives while one of its readers holds it, and keeps one
//! read; there are never more groups than live readers plus reads
//! running.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use eddy_streams::{Offset, ReadChunk, ReadFrom, Storage, StreamError, StreamPath};
use futures::future::{BoxFuture, FutureExt, Shared};

/// What a shared read answers: one chunk or one error for every reader.
pub(crate) type SharedChunk = Result<Arc<ReadChunk>, StreamError>;

/// The stream state a reader knows (the tail and whether the stream is
/// closed): what its wake handed it, or what the store last published;
/// `None` when it knows none.
pub(crate) type Seen = Option<(Offset, bool)>;

/// The groups of live readers, by the read they want.
#[derive(Default)]
pub(crate) struct SharedReads {
    groups: Arc<Mutex<Groups>>,
}

type Groups = HashMap<Key, Weak<Group>>;

/// Which read a group's readers want.
#[derive(Clone, PartialEq, Eq)]
struct Key {
    path: StreamPath,
    from: ReadFrom,
    max_bytes: usize,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.path.hash(state);
        match self.from {
            ReadFrom::Beginning => 0u8.hash(state),
            ReadFrom::Tail => 1u8.hash(state),
            ReadFrom::Offset(offset) => {
                2u8.hash(state);
                offset.hash(state);
            }
        }
        self.max_bytes.hash(state);
    }
}

/// Readers that want one read: a handle to the group, held by each of
/// them while it waits and reads.
#[derive(Clone)]
pub(crate) struct ReadGroup(Arc<Group>);

struct Group {
    key: Key,
    groups: Arc<Mutex<Groups>>,
    /// The group's latest read and the state it was started for.
    latest: Mutex<Option<(Seen, Flight)>>,
}

type Flight = Shared<BoxFuture<'static, SharedChunk>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl SharedReads {
    /// Joins the group of readers of `path` from `from`, up to
    /// `max_bytes`.
    pub(crate) fn group(&self, path: &StreamPath, from: ReadFrom, max_bytes: usize) -> ReadGroup {
        let key = Key {
            path: path.clone(),
            from,
            max_bytes,
        };
        let mut groups = lock(&self.groups);
        if let Some(group) = groups.get(&key).and_then(Weak::upgrade) {
            return ReadGroup(group);
        }
        let group = Arc::new(Group {
            key: key.clone(),
            groups: Arc::clone(&self.groups),
            latest: Mutex::new(None),
        });
        groups.insert(key, Arc::downgrade(&group));
        ReadGroup(group)
    }

    /// How many groups exist.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.groups).len()
    }
}

impl ReadGroup {
    /// Whether this is the group of readers of `path` from `from`.
    pub(crate) fn is_at(&self, path: &StreamPath, from: ReadFrom) -> bool {
        self.0.key.path == *path && self.0.key.from == from
    }

    /// The group's read for a reader woken with the state `woken`, or
    /// (`None`) for one that was not woken, which knows the state the
    /// store last published for the stream, if it did. Shared with the
    /// other readers when they may share it (see the module docs).
    pub(crate) async fn read(&self, store: &Arc<dyn Storage>, woken: Seen) -> SharedChunk {
        let seen = woken.or_else(|| {
            store
                .notifier()
                .watch(self.0.key.path.as_str())
                .latest()
                .map(|info| (info.tail, info.closed))
        });
        let Key {
            path,
            from,
            max_bytes,
        } = &self.0.key;
        if *from == ReadFrom::Tail {
            return store.read(path, *from, *max_bytes).await.map(Arc::new);
        }
        let flight = {
            let mut latest = lock(&self.0.latest);
            match &*latest {
                Some((held, flight)) if *held == seen && joinable(flight, seen) => flight.clone(),
                _ => {
                    let flight = read(Arc::clone(store), self.0.key.clone());
                    *latest = Some((seen, flight.clone()));
                    flight
                }
            }
        };
        flight.await
    }
}

/// Whether a reader that has `seen` may take `flight`, a read for that
/// state: while it runs, always; once done, when it succeeded and the
/// reader knows a state (an error ends with the readers that shared it,
/// so that a store's passing failure is not handed to readers who come
/// later).
fn joinable(flight: &Flight, seen: Seen) -> bool {
    match flight.peek() {
        None => true,
        Some(Ok(_)) => seen.is_some(),
        Some(Err(_)) => false,
    }
}

/// One read, as a future any of the group's readers can drive.
fn read(store: Arc<dyn Storage>, key: Key) -> Flight {
    async move {
        store
            .read(&key.path, key.from, key.max_bytes)
            .await
            .map(Arc::new)
    }
    .boxed()
    .shared()
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut groups = lock(&self.groups);
        // A reader may have made a new group for the key meanwhile.
        if groups
            .get(&self.key)
            .is_some_and(|group| group.strong_count() == 0)
        {
            groups.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eddy_streams::{Append, MemoryStorage, Payload, StreamConfig};

    fn seen(tail: Offset) -> Seen {
        Some((tail, false))
    }

    #[tokio::test]
    async fn readers_of_one_state_share_its_read_and_its_error() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let path = StreamPath::new("s").expect("path");
        let reads = SharedReads::default();
        let (first, second) = (
            reads.group(&path, ReadFrom::Beginning, 1024),
            reads.group(&path, ReadFrom::Beginning, 1024),
        );
        let tail = seen(Offset::new(1, 1));
        let (one, other) = futures::join!(first.read(&store, tail), second.read(&store, tail));
        assert!(matches!(one, Err(StreamError::NotFound { .. })), "{one:?}");
        assert_eq!(one, other, "the error is shared");

        store
            .create(&path, StreamConfig::default(), Payload::empty())
            .await
            .expect("create");
        store
            .append(&path, Append::body("a"))
            .await
            .expect("append");
        let later = seen(Offset::new(1, 2));
        let one = first.read(&store, later).await.expect("read");
        let other = second.read(&store, later).await.expect("read");
        assert!(Arc::ptr_eq(&one, &other), "one read answered both");
        assert_eq!(one.messages, ["a"]);

        let fresh = first.read(&store, None).await.expect("read");
        assert!(
            !Arc::ptr_eq(&one, &fresh),
            "a reader that knows no state takes no done read"
        );

        let _waiting = store.notifier().watch("s");
        store
            .append(&path, Append::body("b"))
            .await
            .expect("append");
        let one = first.read(&store, None).await.expect("read");
        let other = second.read(&store, None).await.expect("read");
        assert!(
            Arc::ptr_eq(&one, &other),
            "readers share the read for the published state"
        );
        assert_eq!(one.messages, ["a", "b"]);
        assert_eq!(reads.len(), 1);
        drop((first, second));
        assert_eq!(reads.len(), 0, "a group goes with its last reader");
    }
}
