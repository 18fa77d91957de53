//! The in-memory backend: fast, for tests and throwaway servers.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::clock::duration_ms;
use crate::engine::{complete, Engine};
use crate::engine::{whole_pass, COMPACTION_STEP, COMPACTION_STEP_BYTES};
use crate::payload::DEFAULT_MAX_APPEND_BYTES;
use crate::record::{RecordReader, Records, Stored, StreamRecord, Sweepable};
use crate::rules::{take_sized, ProducerState};
use crate::{
    Append, Appended, Clock, Created, Documents, Fork, Limits, MemoryDocuments, Notifier, Payload,
    ReadChunk, ReadFrom, Storage, StreamConfig, StreamError, StreamInfo, StreamPath,
    StreamSnapshot, SystemClock, DEFAULT_MAX_PRODUCERS_PER_STREAM, DEFAULT_PRODUCER_EXPIRY,
};

/// A stream store that keeps everything in memory. Nothing survives the
/// process.
///
/// ```
/// # tokio_test_run(async {
/// use eddy_streams::{Append, MemoryStorage, Payload, ReadFrom, Storage, StreamConfig, StreamPath};
/// let store = MemoryStorage::new();
/// let path = StreamPath::new("facts/ws-42")?;
/// store.create(&path, StreamConfig::json(), Payload::empty()).await?;
/// store.append(&path, Append::body(r#"[{"n":1},{"n":2}]"#)).await?;
/// let chunk = store.read(&path, ReadFrom::Beginning, 1 << 20).await?;
/// assert_eq!(chunk.messages.len(), 2);
/// # Ok::<(), eddy_streams::StreamError>(())
/// # });
/// # fn tokio_test_run<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryStorage {
    records: Mutex<MemoryRecords>,
    notifier: Notifier,
    engine: Engine,
    documents: MemoryDocuments,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        MemoryStorage::new()
    }
}

impl MemoryStorage {
    /// An empty store with the default append limit (8 MiB).
    pub fn new() -> Self {
        MemoryStorage::with_max_append_bytes(DEFAULT_MAX_APPEND_BYTES)
    }

    /// An empty store that refuses appends larger than `max_append_bytes`.
    pub fn with_max_append_bytes(max_append_bytes: usize) -> Self {
        MemoryStorage {
            records: Mutex::new(MemoryRecords::default()),
            notifier: Notifier::default(),
            engine: Engine {
                max_append_bytes,
                max_producers: DEFAULT_MAX_PRODUCERS_PER_STREAM,
                producer_expiry_ms: duration_ms(DEFAULT_PRODUCER_EXPIRY),
                limits: Limits::default(),
                clock: Arc::new(SystemClock),
                incarnations: Default::default(),
                passes: Default::default(),
            },
            documents: MemoryDocuments::new(),
        }
    }

    /// This store, keeping the state of at most `max` idempotent producers
    /// per stream; a new producer beyond it is refused
    /// ([`StreamError::TooManyProducers`]).
    pub fn with_max_producers_per_stream(mut self, max: usize) -> Self {
        self.engine.max_producers = max;
        self
    }

    /// This store, forgetting an idempotent producer's state once it has
    /// had no write accepted for `expiry` (default
    /// [`DEFAULT_PRODUCER_EXPIRY`]): its retries are deduplicated within
    /// that window, and after it its next append starts it afresh.
    pub fn with_producer_expiry(mut self, expiry: std::time::Duration) -> Self {
        self.engine.producer_expiry_ms = duration_ms(expiry);
        self
    }

    /// This store, bounding what one write may do by `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.engine.limits = limits;
        self
    }

    /// This store, reading the time from `clock` (for expiry).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.engine.clock = clock;
        self
    }

    /// The records, locked for one engine call. The engine checks
    /// everything before it writes and record writes cannot fail here, so
    /// a panic while the lock is held cannot leave a half-done call.
    fn lock(&self) -> MutexGuard<'_, MemoryRecords> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    // Commits are published while the records are still locked, so that
    // waiters see them in commit order.

    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let mut records = self.lock();
        let created = complete(self.engine.create(&mut *records, path, config, initial))?;
        if created.created {
            self.notifier.publish(&created.info);
        }
        Ok(created)
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let mut records = self.lock();
        let (appended, written) = complete(self.engine.append(&mut *records, path, append, None))?;
        if let Some(head) = written {
            self.notifier.publish_head(path.as_str(), &head);
        }
        Ok(appended)
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let mut records = self.lock();
        let (chunk, touch) = complete(self.engine.read(&mut *records, path, from, max_bytes))?;
        if let Some(touch) = touch {
            complete(records.slide(&touch.key, touch.at_ms))?;
        }
        Ok(chunk)
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        complete(self.engine.head(&mut *self.lock(), path))
    }

    async fn release_producer(
        &self,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        complete(
            self.engine
                .release_producer(&mut *self.lock(), path, producer),
        )
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let mut records = self.lock();
        complete(self.engine.delete(&mut *records, path))?;
        self.notifier.touch(path.as_str());
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        complete(self.engine.list(&mut *self.lock(), prefix))
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let mut records = self.lock();
        let created = complete(self.engine.fork(&mut *records, path, fork))?;
        if created.created {
            self.notifier.publish(&created.info);
        }
        Ok(created)
    }

    async fn snapshot(&self, path: &StreamPath) -> Result<StreamSnapshot, StreamError> {
        complete(self.engine.snapshot(&mut *self.lock(), path))
    }

    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        whole_pass(|force| {
            std::future::ready(complete(self.engine.compact_step(
                &mut *self.lock(),
                path.as_str(),
                COMPACTION_STEP,
                COMPACTION_STEP_BYTES,
                force,
            )))
        })
        .await
    }

    async fn sweep(&self, max: usize) -> Result<usize, StreamError> {
        let mut records = self.lock();
        let (now, below) = (self.engine.now_ms(), self.engine.sweep_floor());
        let found = complete(records.sweepable(now, below, max))?;
        let swept = complete(self.engine.sweep(&mut *records, &found, true))?.count();
        let producers = complete(self.engine.sweep_producers(&mut *records, max))?;
        Ok(swept + producers as usize)
    }

    async fn restore(
        &self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        let mut records = self.lock();
        let info = complete(
            self.engine
                .restore(&mut *records, snapshot, first, messages),
        )?;
        self.notifier.publish(&info);
        Ok(info)
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    fn documents(&self) -> Option<&dyn Documents> {
        Some(&self.documents)
    }
}

/// A map keyed by stream paths, hashed with foldhash (randomly seeded per
/// map) rather than SipHash: an append looks its stream up three times.
/// The keys are shared so that handing one out costs no allocation.
type PathMap<V> = HashMap<Key, V, foldhash::fast::RandomState>;

/// A stream's key: its path.
type Key = Arc<str>;

/// The records of the memory backend.
#[derive(Debug, Default)]
pub(crate) struct MemoryRecords {
    streams: PathMap<MemoryStream>,
    /// Deleted paths: the deleted stream's incarnation.
    tombstones: HashMap<String, u64>,
    /// The forks of each stream that has any.
    forks: HashMap<String, BTreeSet<String>>,
}

#[derive(Debug)]
struct MemoryStream {
    record: StreamRecord,
    producers: Producers,
    /// The messages kept, with their positions, in order (retention
    /// drops a prefix, compaction leaves holes).
    messages: VecDeque<(u64, Bytes)>,
    /// The position the next message takes.
    end: u64,
}

impl MemoryStream {
    /// The index in `messages` of the first message at `position` or after.
    fn index(&self, position: u64) -> usize {
        self.messages.partition_point(|(at, _)| *at < position)
    }

    /// The messages kept at positions `range`, with their positions.
    fn range(&self, range: Range<u64>) -> impl DoubleEndedIterator<Item = &(u64, Bytes)> {
        let end = self.index(range.end);
        let start = self.index(range.start).min(end);
        self.messages.range(start..end)
    }
}

/// A stream's producer states, with an index by last write so that the
/// expired ones are found without looking at the others.
#[derive(Debug, Default)]
struct Producers {
    states: HashMap<String, ProducerState>,
    by_last_write: BTreeSet<(i64, String)>,
}

impl Producers {
    fn insert(&mut self, producer: &str, state: ProducerState) {
        if let Some(old) = self.states.insert(producer.to_owned(), state) {
            self.by_last_write
                .remove(&(old.last_ms, producer.to_owned()));
        }
        self.by_last_write
            .insert((state.last_ms, producer.to_owned()));
    }

    fn remove(&mut self, producer: &str) -> bool {
        let Some(old) = self.states.remove(producer) else {
            return false;
        };
        self.by_last_write
            .remove(&(old.last_ms, producer.to_owned()));
        true
    }

    /// Drops up to `max` states last written at or before `cutoff_ms`.
    fn drop_expired(&mut self, cutoff_ms: i64, max: usize) -> u64 {
        let mut dropped = 0;
        while dropped < max {
            let Some((last_ms, _)) = self.by_last_write.first() else {
                break;
            };
            if *last_ms > cutoff_ms {
                break;
            }
            if let Some((_, producer)) = self.by_last_write.pop_first() {
                self.states.remove(&producer);
            }
            dropped += 1;
        }
        dropped as u64
    }
}

impl MemoryRecords {
    fn stream(&mut self, key: &str) -> Result<&mut MemoryStream, StreamError> {
        self.streams
            .get_mut(key)
            .ok_or_else(|| StreamError::internal(format!("no record for stream `{key}`")))
    }
}

impl RecordReader for MemoryRecords {
    type Key = Key;

    async fn load(&mut self, path: &str) -> Result<Option<Stored<Key>>, StreamError> {
        Ok(self
            .streams
            .get_key_value(path)
            .map(|(key, stream)| Stored {
                key: Arc::clone(key),
                record: stream.record.clone(),
            }))
    }

    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        Ok(self.tombstones.get(path).copied())
    }

    async fn forks_of(&mut self, path: &str) -> Result<Vec<String>, StreamError> {
        Ok(self
            .forks
            .get(path)
            .map(|forks| forks.iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn producers(&mut self, key: &Key) -> Result<Vec<(String, ProducerState)>, StreamError> {
        let mut producers: Vec<_> = self
            .stream(key)?
            .producers
            .states
            .iter()
            .map(|(id, state)| (id.clone(), *state))
            .collect();
        producers.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(producers)
    }

    async fn producer(
        &mut self,
        key: &Key,
        producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        Ok(self.stream(key)?.producers.states.get(producer).copied())
    }

    async fn producer_count(&mut self, key: &Key) -> Result<u64, StreamError> {
        Ok(self.stream(key)?.producers.states.len() as u64)
    }

    async fn messages_at(
        &mut self,
        key: &Key,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        let stream = &*self.stream(key)?;
        Ok(take_sized(
            stream.range(range).cloned(),
            max_bytes,
            |(_, m)| m.len(),
        ))
    }

    async fn messages_before(
        &mut self,
        key: &Key,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        let stream = &*self.stream(key)?;
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let newest = stream.range(range).rev().take(max).cloned();
        let mut last = take_sized(newest, max_bytes, |(_, m)| m.len());
        last.reverse();
        Ok(last)
    }

    async fn sweepable(
        &mut self,
        now_ms: i64,
        below: u64,
        max: usize,
    ) -> Result<Sweepable, StreamError> {
        let streams = self
            .streams
            .iter()
            .filter(|(_, stream)| {
                let record = &stream.record;
                !record.soft_deleted && record.head.incarnation < below && record.expired(now_ms)
            })
            .map(|(path, _)| path.to_string())
            .take(max)
            .collect();
        let tombstones = self
            .tombstones
            .iter()
            .filter(|(_, incarnation)| **incarnation < below)
            .map(|(path, _)| path.clone())
            .take(max)
            .collect();
        let retained = self
            .streams
            .iter()
            .filter(|(_, stream)| {
                let record = &stream.record;
                record.is_live(now_ms) && record.retention_due_ms().is_some_and(|due| due <= now_ms)
            })
            .map(|(path, _)| path.to_string())
            .take(max)
            .collect();
        Ok(Sweepable {
            streams,
            tombstones,
            retained,
        })
    }

    async fn list(&mut self, prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        let mut listed: Vec<(String, StreamRecord)> = self
            .streams
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .map(|(path, stream)| (path.to_string(), stream.record.clone()))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(listed)
    }
}

impl Records for MemoryRecords {
    async fn insert(&mut self, path: &str, record: &StreamRecord) -> Result<Key, StreamError> {
        self.tombstones.remove(path);
        if let Some(origin) = &record.origin {
            let forks = self.forks.entry(origin.source.clone()).or_default();
            forks.insert(path.to_owned());
        }
        let stream = MemoryStream {
            record: record.clone(),
            producers: Producers::default(),
            messages: VecDeque::new(),
            end: 0,
        };
        let key: Key = Arc::from(path);
        self.streams.insert(Arc::clone(&key), stream);
        Ok(key)
    }

    async fn update(&mut self, key: &Key, record: StreamRecord) -> Result<(), StreamError> {
        self.stream(key)?.record = record;
        Ok(())
    }

    async fn insert_messages(
        &mut self,
        key: &Key,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), StreamError> {
        let stream = self.stream(key)?;
        let tail = stream.end;
        // Past the tail only where positions were dropped (a compacted
        // stream's restore).
        if first < tail {
            return Err(StreamError::internal(format!(
                "stream `{key}` has {tail} messages, not {first}"
            )));
        }
        stream.end = first + messages.len() as u64;
        stream.messages.extend((first..).zip(messages));
        Ok(())
    }

    async fn copy_prefix(&mut self, from: &Key, to: &Key, count: u64) -> Result<u64, StreamError> {
        let source = &*self.stream(from)?;
        let prefix: VecDeque<(u64, Bytes)> = source.range(0..count).cloned().collect();
        let bytes = prefix.iter().map(|(_, m)| m.len() as u64).sum();
        let fork = self.stream(to)?;
        fork.messages = prefix;
        fork.end = count;
        Ok(bytes)
    }

    async fn save_producer(
        &mut self,
        key: &Key,
        producer: &str,
        state: ProducerState,
    ) -> Result<(), StreamError> {
        self.stream(key)?.producers.insert(producer, state);
        Ok(())
    }

    async fn remove_producer(&mut self, key: &Key, producer: &str) -> Result<bool, StreamError> {
        Ok(self.stream(key)?.producers.remove(producer))
    }

    async fn drop_expired_producers(
        &mut self,
        key: &Key,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        Ok(self.stream(key)?.producers.drop_expired(cutoff_ms, max))
    }

    async fn sweep_expired_producers(
        &mut self,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        let mut dropped = 0;
        for stream in self.streams.values_mut() {
            let left = max.saturating_sub(dropped as usize);
            if left == 0 {
                break;
            }
            dropped += stream.producers.drop_expired(cutoff_ms, left);
        }
        Ok(dropped)
    }

    async fn drop_messages(&mut self, key: &Key, range: Range<u64>) -> Result<(), StreamError> {
        let stream = self.stream(key)?;
        let end = stream.index(range.end);
        stream.messages.drain(..end);
        Ok(())
    }

    async fn drop_positions(&mut self, key: &Key, positions: Vec<u64>) -> Result<u64, StreamError> {
        let stream = self.stream(key)?;
        let mut freed = 0;
        // One pass over the stream's messages, however many go.
        let mut going = positions.iter().peekable();
        stream.messages.retain(|(position, message)| {
            while going.next_if(|p| **p < *position).is_some() {}
            if going.next_if(|p| **p == *position).is_some() {
                freed += message.len() as u64;
                false
            } else {
                true
            }
        });
        Ok(freed)
    }

    async fn remove(&mut self, key: &Key, path: &str) -> Result<(), StreamError> {
        let Some(stream) = self.streams.remove(&**key) else {
            return Ok(());
        };
        if let Some(origin) = stream.record.origin {
            if let Some(forks) = self.forks.get_mut(&origin.source) {
                forks.remove(path);
                if forks.is_empty() {
                    self.forks.remove(&origin.source);
                }
            }
        }
        Ok(())
    }

    async fn slide(&mut self, key: &Key, at_ms: i64) -> Result<(), StreamError> {
        let record = &mut self.stream(key)?.record;
        record.accessed_ms = record.accessed_ms.max(at_ms);
        Ok(())
    }

    async fn tombstone(
        &mut self,
        path: &str,
        incarnation: u64,
        _now_ms: i64,
    ) -> Result<(), StreamError> {
        self.tombstones.insert(path.to_owned(), incarnation);
        Ok(())
    }

    async fn drop_tombstone(&mut self, path: &str, below: u64) -> Result<bool, StreamError> {
        let old = self.tombstones.get(path).is_some_and(|i| *i < below);
        if old {
            self.tombstones.remove(path);
        }
        Ok(old)
    }
}
