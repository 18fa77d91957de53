//! Recently written streams' messages, in memory, so that reads of recent
//! data (catch-up reads, live readers woken by an append) need no
//! row-by-row copying out of the database (SQLite, PostgreSQL).
//!
//! Only the store's writer fills the cache, from the writes of a group
//! after its commit, so the cache never holds what is not committed. It
//! answers for messages only, never for a stream's head: a read takes the
//! head (tail, closed, expiry) from the database and then the messages up
//! to that tail from the cache. A message at a position of a stream (a row
//! id, never reused) never changes once committed, so the answer is exact
//! even when another process writes the same database; the messages the
//! cache does not hold are read from the database. The cache holds
//! at most its byte budget of messages: a stream keeps at most an eighth of
//! it, the least recently used streams go first. It also keeps each
//! stream's record, to know where its messages end and whether it holds
//! JSON.
//!
//! The budget counts what the cache really pins. A message handed to it
//! is a slice of a larger buffer (a request body, a database answer), and
//! keeping the slice would keep the whole buffer alive, so the cache copies
//! the messages of each write into buffers of its own (up to
//! [`BUFFER_BYTES`] each; a larger message alone) and keeps slices of
//! those: one allocation per buffer rather than per message. Each message
//! is charged its slot; the last message of a buffer also carries the
//! buffer (its bytes and [`BUFFER_OVERHEAD`]). Messages leave a stream
//! from its front, so a buffer's last message leaves last, exactly when
//! the buffer is freed: the charge is what the cache holds.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use crate::record::StreamRecord;
use crate::rules::take_within;

/// The most streams the cache describes (each costs its record).
const MAX_STREAMS: usize = 65_536;

/// The most bytes of messages copied into one buffer (and at most an
/// eighth of a stream's share of the budget, so that trimming a stream,
/// which frees a buffer only with its last message, stays fine-grained).
const BUFFER_BYTES: usize = 64 * 1024;

/// What a buffer costs besides its bytes: the allocator's header and
/// rounding, and the shared header a `Bytes` allocates when it is first
/// sliced.
const BUFFER_OVERHEAD: usize = 64;

/// What holding one message costs besides its buffer: its slot.
const SLOT: usize = std::mem::size_of::<Cached>();

/// A message as the cache keeps it: a slice of a buffer of the cache's
/// own, with what holding it costs.
#[derive(Debug)]
struct Cached {
    message: Bytes,
    /// Its slot, and for the last message of a buffer the buffer too.
    cost: usize,
}

/// Copies `messages` into buffers of the cache's own of at most
/// `buffer_bytes` each (a larger message alone), so that they pin no
/// larger buffer they were sliced from.
fn packed(messages: &[Bytes], buffer_bytes: usize) -> Vec<Cached> {
    let mut out = Vec::with_capacity(messages.len());
    let mut rest = messages;
    while !rest.is_empty() {
        // As many messages as one buffer takes, one at least.
        let (mut count, mut bytes) = (0, 0);
        for message in rest {
            if count > 0 && bytes + message.len() > buffer_bytes {
                break;
            }
            bytes += message.len();
            count += 1;
        }
        let (run, after) = rest.split_at(count);
        let mut buffer = Vec::with_capacity(bytes);
        for message in run {
            buffer.extend_from_slice(message);
        }
        let buffer = Bytes::from(buffer);
        let carried = SLOT + bytes + BUFFER_OVERHEAD;
        if count == 1 {
            // Kept whole: a slice would allocate the shared header now,
            // where a message no reader asks for never needs one.
            out.push(Cached {
                message: buffer,
                cost: carried,
            });
        } else {
            let mut start = 0;
            for (index, message) in run.iter().enumerate() {
                let end = start + message.len();
                let last = index + 1 == count;
                out.push(Cached {
                    message: buffer.slice(start..end),
                    cost: if last { carried } else { SLOT },
                });
                start = end;
            }
        }
        rest = after;
    }
    out
}

/// A record write of a committed group, as the cache learns it.
#[derive(Debug)]
pub(crate) enum Change {
    /// A stream's record after an insert or update.
    Record {
        key: i64,
        path: String,
        record: StreamRecord,
    },
    /// Messages stored at positions `first..`.
    Messages {
        key: i64,
        path: String,
        first: u64,
        messages: Vec<Bytes>,
    },
    /// A TTL touch stored.
    Slide { key: i64, at_ms: i64 },
    /// A stream removed.
    Removed { key: i64 },
    /// Messages of a stream dropped by compaction: the cache forgets the
    /// messages it holds of the stream (it holds runs without holes).
    Compacted { key: i64 },
}

/// The cache of one store.
#[derive(Debug)]
pub(crate) struct Cache {
    inner: Mutex<Inner>,
    budget: usize,
}

#[derive(Debug, Default)]
struct Inner {
    streams: HashMap<i64, Entry>,
    by_path: HashMap<String, i64>,
    bytes: usize,
    /// Counts reads, to find the least recently used stream.
    reads: u64,
}

#[derive(Debug)]
struct Entry {
    path: String,
    record: Option<StreamRecord>,
    /// The position of the first cached message.
    first: u64,
    messages: VecDeque<Cached>,
    bytes: usize,
    used: u64,
}

impl Entry {
    fn end(&self) -> u64 {
        self.first + self.messages.len() as u64
    }

    /// Holds `run` after the messages held; returns what it costs.
    fn push_back(&mut self, run: Vec<Cached>) -> usize {
        let added: usize = run.iter().map(|c| c.cost).sum();
        self.messages.extend(run);
        self.bytes += added;
        added
    }

    /// Holds `run` (the messages just before `first`) before the messages
    /// held; returns what it costs.
    #[cfg(feature = "postgres")]
    fn push_front(&mut self, run: Vec<Cached>) -> usize {
        let added: usize = run.iter().map(|c| c.cost).sum();
        self.first -= run.len() as u64;
        for cached in run.into_iter().rev() {
            self.messages.push_front(cached);
        }
        self.bytes += added;
        added
    }

    /// Forgets the messages; the cache now starts at `first`.
    fn restart(&mut self, first: u64) -> usize {
        let freed = self.bytes;
        self.first = first;
        self.messages.clear();
        self.bytes = 0;
        freed
    }
}

impl Cache {
    /// A cache holding at most `budget` bytes of messages.
    pub fn new(budget: usize) -> Self {
        Cache {
            inner: Mutex::default(),
            budget,
        }
    }

    /// The most bytes one buffer of messages takes (see [`BUFFER_BYTES`]).
    fn buffer_bytes(&self) -> usize {
        BUFFER_BYTES.min(self.budget / 64)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Learns the record writes of a committed group, in order.
    pub fn apply(&self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        // Copied before the lock is taken: readers wait only for the
        // bookkeeping.
        let runs: Vec<Option<Vec<Cached>>> = changes
            .iter()
            .map(|change| match change {
                Change::Messages { messages, .. } => Some(packed(messages, self.buffer_bytes())),
                _ => None,
            })
            .collect();
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut touched = Vec::new();
        for (change, run) in changes.into_iter().zip(runs) {
            match change {
                Change::Record { key, path, record } => {
                    let entry = inner.entry(key, path);
                    let mut freed = 0;
                    if record.head.count != entry.end() {
                        freed = entry.restart(record.head.count);
                    }
                    entry.record = Some(record);
                    inner.bytes -= freed;
                    touched.push(key);
                }
                Change::Messages {
                    key, path, first, ..
                } => {
                    let entry = inner.entry(key, path);
                    let mut freed = 0;
                    if first != entry.end() {
                        freed = entry.restart(first);
                    }
                    let added = entry.push_back(run.unwrap_or_default());
                    inner.bytes = inner.bytes - freed + added;
                    touched.push(key);
                }
                Change::Slide { key, at_ms } => {
                    let record = inner.streams.get_mut(&key).and_then(|e| e.record.as_mut());
                    if let Some(record) = record {
                        record.accessed_ms = record.accessed_ms.max(at_ms);
                    }
                }
                Change::Removed { key } => inner.remove(key),
                Change::Compacted { key } => {
                    if let Some(entry) = inner.streams.get_mut(&key) {
                        let end = entry.end();
                        let freed = entry.restart(end);
                        inner.bytes -= freed;
                    }
                }
            }
        }
        for key in &touched {
            if inner.streams.get(key).is_some_and(|e| e.record.is_none()) {
                inner.remove(*key);
            }
        }
        inner.trim(&touched, self.budget);
    }

    /// Learns messages a read took from the database: positions `first..`
    /// of the stream `key` at `path`. They were committed, so they never
    /// change: they join what the cache holds of the stream where the two
    /// runs meet or overlap, and stand alone where it holds nothing; a run
    /// apart from the one held is left out. (PostgreSQL's reads fill the
    /// cache so, since its writer only knows what this process wrote.)
    #[cfg(feature = "postgres")]
    pub fn fill(&self, key: i64, path: &str, first: u64, messages: Vec<Bytes>) {
        if messages.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.reads += 1;
        let used = inner.reads;
        let entry = inner.entry(key, path.to_owned());
        entry.used = used;
        let end = first + messages.len() as u64;
        let buffer_bytes = self.buffer_bytes();
        let added = if entry.messages.is_empty() {
            entry.first = first;
            entry.push_back(packed(&messages, buffer_bytes))
        } else if first <= entry.end() && end >= entry.first {
            let (held_first, held_end) = (entry.first, entry.end());
            let before = usize::try_from(held_first.saturating_sub(first)).unwrap_or(0);
            let after = usize::try_from(held_end.saturating_sub(first)).unwrap_or(usize::MAX);
            let after = after.min(messages.len());
            entry.push_front(packed(&messages[..before], buffer_bytes))
                + entry.push_back(packed(&messages[after..], buffer_bytes))
        } else {
            0
        };
        inner.bytes += added;
        inner.trim(&[key], self.budget);
    }

    /// Whether the cached stream at `path` holds JSON, if the cache knows.
    pub fn is_json(&self, path: &str) -> Option<bool> {
        let inner = self.lock();
        let entry = inner.streams.get(inner.by_path.get(path)?)?;
        Some(entry.record.as_ref()?.head.config.is_json())
    }

    /// The messages of stream `key` at positions `range` (stopping before
    /// their total passes `max_bytes`, but at least one), when the cache
    /// holds them all.
    pub fn messages(&self, key: i64, range: Range<u64>, max_bytes: usize) -> Option<Vec<Bytes>> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.reads += 1;
        let entry = inner
            .streams
            .get_mut(&key)
            .filter(|e| range.start >= e.first && range.end <= e.end())?;
        entry.used = inner.reads;
        let skip = usize::try_from(range.start - entry.first).ok()?;
        let take = usize::try_from(range.end - range.start).ok()?;
        let wanted = entry
            .messages
            .iter()
            .skip(skip)
            .take(take)
            .map(|c| c.message.clone());
        Some(take_within(wanted, max_bytes))
    }
}

/// What the cache holds of a stream from some position on.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub(crate) struct Held {
    /// The stream's key.
    pub key: i64,
    /// Its messages from the position asked for, within the byte budget.
    pub messages: Vec<Bytes>,
    /// Their size in bytes.
    pub bytes: usize,
    /// Whether the budget stopped them before the cache's end: a read
    /// needs nothing more.
    pub full: bool,
    /// The position after the last message the cache holds of the stream.
    pub end: u64,
}

impl Cache {
    /// The messages the cache holds of the stream at `path` from position
    /// `start` on, stopping before their total passes `max_bytes` (at
    /// least one), if it holds the stream at `start`. The stream's head
    /// may have moved past [`Held::end`] since: the rest is the database's.
    #[cfg(feature = "postgres")]
    pub fn from(&self, path: &str, start: u64, max_bytes: usize) -> Option<Held> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.reads += 1;
        let key = *inner.by_path.get(path)?;
        let entry = inner.streams.get_mut(&key)?;
        if start < entry.first || start > entry.end() {
            return None;
        }
        entry.used = inner.reads;
        let skip = usize::try_from(start - entry.first).ok()?;
        let available = entry.messages.len() - skip;
        let held = entry.messages.iter().skip(skip).map(|c| c.message.clone());
        let messages = take_within(held, max_bytes);
        Some(Held {
            key,
            bytes: messages.iter().map(Bytes::len).sum(),
            full: messages.len() < available,
            messages,
            end: entry.end(),
        })
    }
}

impl Inner {
    fn entry(&mut self, key: i64, path: String) -> &mut Entry {
        let used = self.reads;
        self.streams.entry(key).or_insert_with(|| {
            self.by_path.insert(path.clone(), key);
            Entry {
                path,
                record: None,
                first: 0,
                messages: VecDeque::new(),
                bytes: 0,
                used,
            }
        })
    }

    fn remove(&mut self, key: i64) {
        if let Some(entry) = self.streams.remove(&key) {
            self.bytes -= entry.bytes;
            if self.by_path.get(&entry.path) == Some(&key) {
                self.by_path.remove(&entry.path);
            }
        }
    }

    /// Keeps each stream of `touched` (the only ones that grew) under an
    /// eighth of the budget, and the whole under the budget and
    /// [`MAX_STREAMS`]: past either, the least recently used streams go,
    /// down to seven eighths of it, so that a cache at its bound does not
    /// look through every stream on every commit.
    fn trim(&mut self, touched: &[i64], budget: usize) {
        let per_stream = budget / 8;
        for key in touched {
            let Some(entry) = self.streams.get_mut(key) else {
                continue;
            };
            while entry.bytes > per_stream {
                let Some(cached) = entry.messages.pop_front() else {
                    break;
                };
                entry.first += 1;
                entry.bytes -= cached.cost;
                self.bytes -= cached.cost;
            }
        }
        if self.bytes <= budget && self.streams.len() <= MAX_STREAMS {
            return;
        }
        let mut by_use: Vec<(u64, i64)> = self.streams.iter().map(|(k, e)| (e.used, *k)).collect();
        by_use.sort_unstable();
        for (_, key) in by_use {
            if self.bytes <= budget / 8 * 7 && self.streams.len() <= MAX_STREAMS / 8 * 7 {
                break;
            }
            self.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Head;
    use crate::StreamConfig;

    fn messages(range: Range<u64>) -> Vec<Bytes> {
        range.map(|n| Bytes::from(format!("m{n}"))).collect()
    }

    fn written(key: i64, first: u64, count: u64) -> Vec<Change> {
        let mut head = Head::new(StreamConfig::json(), 1);
        head.count = first + count;
        vec![
            Change::Messages {
                key,
                path: "p".into(),
                first,
                messages: messages(first..first + count),
            },
            Change::Record {
                key,
                path: "p".into(),
                record: StreamRecord::new(head, None, 0),
            },
        ]
    }

    #[cfg(feature = "postgres")]
    fn held(cache: &Cache, start: u64) -> Option<(Vec<Bytes>, u64)> {
        cache
            .from("p", start, usize::MAX)
            .map(|held| (held.messages, held.end))
    }

    #[test]
    fn a_cached_message_does_not_keep_its_request_buffer_alive() {
        let cache = Cache::new(1 << 20);
        let request = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut changes = written(1, 0, 1);
        if let Change::Messages { messages, .. } = &mut changes[0] {
            *messages = vec![request.slice(..10)];
        }
        cache.apply(changes);
        assert!(
            request.is_unique(),
            "the cache holds a copy of the message, not a slice of the request"
        );
        assert_eq!(
            cache.messages(1, 0..1, usize::MAX),
            Some(vec![Bytes::from_static(b"xxxxxxxxxx")])
        );
    }

    #[test]
    fn each_message_is_charged_what_holding_it_costs() {
        // A stream keeps an eighth of the budget (8 KiB) and a buffer at
        // most 1 KiB of it: 1 000 messages of 100 bytes are 100 buffers of
        // ten, each costing ten slots, its bytes and its overhead.
        let cache = Cache::new(64 * 1024);
        let mut changes = written(1, 0, 1000);
        if let Change::Messages { messages, .. } = &mut changes[0] {
            *messages = vec![Bytes::from(vec![b'x'; 100]); 1000];
        }
        cache.apply(changes);
        assert_eq!(cache.messages(1, 0..1000, usize::MAX), None);
        let inner = cache.lock();
        let entry = inner.streams.get(&1).expect("the stream is cached");
        let buffer = 10 * SLOT + 1000 + BUFFER_OVERHEAD;
        // Five buffers fit the share, a sixth does not: a buffer is
        // charged whole while any of its messages is held, so none of the
        // sixth's stays.
        assert_eq!(entry.messages.len(), 50);
        assert_eq!(entry.first, 950);
        assert_eq!(entry.bytes, 5 * buffer);
        assert_eq!(inner.bytes, entry.bytes);
    }

    #[test]
    fn a_write_is_copied_into_shared_buffers_of_at_most_buffer_bytes() {
        let small = messages(0..3);
        let run = packed(&small, BUFFER_BYTES);
        let lengths: usize = small.iter().map(Bytes::len).sum();
        let shares_one_buffer = run.windows(2).all(|pair| {
            pair[0].message.as_ptr().wrapping_add(pair[0].message.len()) == pair[1].message.as_ptr()
        });
        assert!(shares_one_buffer);
        let costs: Vec<usize> = run.iter().map(|c| c.cost).collect();
        assert_eq!(costs, [SLOT, SLOT, SLOT + lengths + BUFFER_OVERHEAD]);
        // Two of 40 KiB do not fit one buffer: each is its own.
        let large = vec![Bytes::from(vec![b'a'; 40 * 1024]); 2];
        let costs: Vec<usize> = packed(&large, BUFFER_BYTES)
            .iter()
            .map(|c| c.cost)
            .collect();
        assert_eq!(costs, [SLOT + 40 * 1024 + BUFFER_OVERHEAD; 2]);
        let messages: Vec<Bytes> = packed(&large, BUFFER_BYTES)
            .into_iter()
            .map(|c| c.message)
            .collect();
        assert_eq!(messages, large);
    }

    #[test]
    fn a_buffer_stops_being_charged_with_its_last_message() {
        // A stream's share is 1 KiB, a buffer at most 128 bytes: each
        // write of four 30-byte messages is one buffer.
        let cache = Cache::new(8 * 1024);
        let write = |first: u64| {
            let mut changes = written(1, first, 4);
            if let Change::Messages { messages, .. } = &mut changes[0] {
                *messages = vec![Bytes::from(vec![b'x'; 30]); 4];
            }
            changes
        };
        let buffer = 4 * SLOT + 120 + BUFFER_OVERHEAD;
        cache.apply(write(0));
        cache.apply(write(4));
        assert_eq!(cache.lock().bytes, 2 * buffer);
        // The third write passes the share by 8 bytes: the first message
        // leaves, freeing its slot; its buffer stays, charged whole.
        cache.apply(write(8));
        let state = |cache: &Cache| {
            let inner = cache.lock();
            let entry = inner.streams.get(&1).expect("the stream is cached");
            assert_eq!(inner.bytes, entry.bytes);
            (entry.first, entry.bytes)
        };
        assert_eq!(state(&cache), (1, 3 * buffer - SLOT));
        // The fourth: the first buffer's last message leaves and takes the
        // buffer's charge with it; then the next buffer's first slot.
        cache.apply(write(12));
        assert_eq!(state(&cache), (5, 3 * buffer - SLOT));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn reads_fill_the_cache_around_what_the_writer_put_there() {
        let cache = Cache::new(1 << 20);
        cache.apply(written(1, 10, 5));
        assert_eq!(held(&cache, 10), Some((messages(10..15), 15)));
        assert_eq!(held(&cache, 3), None, "nothing before 10 yet");
        // A read of 3..12 meets the run: it starts at 3 now.
        cache.fill(1, "p", 3, messages(3..12));
        assert_eq!(held(&cache, 3), Some((messages(3..15), 15)));
        // A read past the end (another process's appends) extends it.
        cache.fill(1, "p", 14, messages(14..18));
        assert_eq!(held(&cache, 0), None);
        assert_eq!(held(&cache, 3), Some((messages(3..18), 18)));
        // A run apart from the one held is left out.
        cache.fill(1, "p", 30, messages(30..32));
        assert_eq!(held(&cache, 30), None);
        assert_eq!(held(&cache, 17), Some((messages(17..18), 18)));
        // The writer's next append after another process's starts over.
        cache.apply(written(1, 20, 1));
        assert_eq!(held(&cache, 17), None);
        assert_eq!(held(&cache, 20), Some((messages(20..21), 21)));
        // A stream created again at the path is another key.
        cache.fill(2, "p", 0, messages(0..2));
        assert_eq!(cache.from("p", 0, usize::MAX).map(|h| h.key), Some(2));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_cache_keeps_to_its_budget_dropping_the_least_read_streams() {
        let cache = Cache::new(8 * 1024);
        for key in 0..100 {
            cache.fill(
                key,
                &format!("s{key}"),
                0,
                vec![Bytes::from(vec![b'x'; 256])],
            );
            // Stream 0 is read all along.
            assert!(cache.from("s0", 0, usize::MAX).is_some(), "after {key}");
        }
        let inner = cache.lock();
        assert!(inner.bytes <= 8 * 1024);
        assert_eq!(
            inner.bytes,
            inner.streams.values().map(|e| e.bytes).sum::<usize>()
        );
        assert!(inner.streams.contains_key(&99), "the newest stays");
        drop(inner);
        // One stream keeps at most an eighth of the budget, its latest.
        cache.fill(
            200,
            "big",
            0,
            (0..20).map(|_| Bytes::from(vec![b'y'; 100])).collect(),
        );
        let held = cache.from("big", 0, usize::MAX);
        assert!(held.is_none(), "its first messages went");
        let held = cache.from("big", 15, usize::MAX).expect("its latest stay");
        assert_eq!(held.end, 20);
        assert!(held.bytes <= 1024);
    }
}
