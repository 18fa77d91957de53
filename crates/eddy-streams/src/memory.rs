//! The in-memory backend: fast, for tests and throwaway servers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::fork::{check_refork, plan, ForkOrigin};
use crate::payload::{split, DEFAULT_MAX_APPEND_BYTES};
use crate::rules::{decide, expired, take_within, Decision, Head, ProducerState};
use crate::{
    Append, Appended, Clock, Committed, Created, Fork, Notifier, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath, SystemClock,
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
    streams: Mutex<HashMap<String, Slot>>,
    notifier: Notifier,
    max_append_bytes: usize,
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
enum Slot {
    Live(Box<MemoryStream>),
    Gone,
}

#[derive(Debug)]
struct MemoryStream {
    head: Head,
    producers: HashMap<String, ProducerState>,
    messages: Vec<Bytes>,
    accessed_ms: i64,
    /// Where this stream was forked from, if it is a fork.
    origin: Option<ForkOrigin>,
    /// How many forks (live or soft-deleted) branch from this stream.
    forks: u64,
    /// Deleted while forks still use it.
    soft_deleted: bool,
}

impl MemoryStream {
    fn new(head: Head, messages: Vec<Bytes>, origin: Option<ForkOrigin>, now: i64) -> Self {
        MemoryStream {
            head,
            producers: HashMap::new(),
            messages,
            accessed_ms: now,
            origin,
            forks: 0,
            soft_deleted: false,
        }
    }
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
            streams: Mutex::new(HashMap::new()),
            notifier: Notifier::default(),
            max_append_bytes,
            clock: Arc::new(SystemClock),
        }
    }

    /// This store, reading the time from `clock` (for expiry).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding the lock cannot leave a half-applied append:
        // every change is computed first and applied with infallible steps.
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The live stream at `path`, or the error that says why there is none.
/// An expired stream is dropped on the way and reads as absent.
fn live<'a>(
    streams: &'a mut HashMap<String, Slot>,
    path: &StreamPath,
    now: i64,
) -> Result<&'a mut MemoryStream, StreamError> {
    let expired_now = match streams.get(path.as_str()) {
        Some(Slot::Live(s)) => expired(&s.head.config, s.accessed_ms, now),
        _ => false,
    };
    if expired_now {
        streams.remove(path.as_str());
    }
    match streams.get_mut(path.as_str()) {
        Some(Slot::Live(stream)) if stream.soft_deleted => Err(StreamError::SoftDeleted {
            path: path.to_string(),
        }),
        Some(Slot::Live(stream)) => Ok(stream),
        Some(Slot::Gone) => Err(StreamError::Gone {
            path: path.to_string(),
        }),
        None => Err(StreamError::NotFound {
            path: path.to_string(),
        }),
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let messages = split(initial, config.is_json(), self.max_append_bytes, true)?;
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        match live(&mut streams, path, now) {
            Ok(existing) => {
                existing.head.check_recreate(path.as_str(), &config)?;
                return Ok(Created {
                    created: false,
                    info: existing.head.info(path.as_str()),
                });
            }
            Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => {}
            Err(other) => return Err(other),
        }
        let mut head = Head::new(config);
        head.push(&messages);
        let info = head.info(path.as_str());
        streams.insert(
            path.to_string(),
            Slot::Live(Box::new(MemoryStream::new(head, messages, None, now))),
        );
        drop(streams);
        self.notifier.commit(Committed {
            path: path.to_string(),
            tail: info.tail,
            closed: info.closed,
        });
        Ok(Created {
            created: true,
            info,
        })
    }

    async fn append(&self, path: &StreamPath, mut append: Append) -> Result<Appended, StreamError> {
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        let stream = live(&mut streams, path, now)?;
        let json = stream.head.config.is_json();
        // The rules read the append's conditions, never its payload.
        let payload = std::mem::replace(&mut append.payload, Payload::empty());
        let messages = split(payload, json, self.max_append_bytes, false)?;
        let stored = append
            .producer
            .as_ref()
            .and_then(|p| stream.producers.get(&p.id).copied());
        stream.accessed_ms = now;
        let (producer, close) =
            match decide(path.as_str(), &stream.head, stored, &append, messages.len())? {
                Decision::Acknowledge(outcome) => return Ok(outcome),
                Decision::Write { producer, close } => (producer, close),
            };
        stream.head.apply(&messages, &append, close);
        stream.messages.extend(messages);
        if let (Some(position), Some(state)) = (&append.producer, producer) {
            stream.producers.insert(position.id.clone(), state);
        }
        let outcome = stream.head.appended(producer);
        drop(streams);
        self.notifier.commit(Committed {
            path: path.to_string(),
            tail: outcome.next_offset,
            closed: outcome.closed,
        });
        Ok(outcome)
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        let stream = live(&mut streams, path, now)?;
        stream.accessed_ms = now;
        let start = stream.head.start_position(from)?;
        let rest = stream.messages.iter().skip(start as usize).cloned();
        Ok(stream.head.chunk(start, take_within(rest, max_bytes)))
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        Ok(live(&mut streams, path, now)?.head.info(path.as_str()))
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        let stream = live(&mut streams, path, now)?;
        if stream.forks > 0 {
            stream.soft_deleted = true;
        } else {
            let origin = stream.origin.take();
            streams.insert(path.to_string(), Slot::Gone);
            release(&mut streams, origin);
        }
        drop(streams);
        self.notifier.touch(path.as_str());
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        let now = self.clock.now_ms();
        let streams = self.lock();
        let mut infos: Vec<StreamInfo> = streams
            .iter()
            .filter(|(path, _)| path.starts_with(prefix))
            .filter_map(|(path, slot)| match slot {
                Slot::Live(s)
                    if !s.soft_deleted && !expired(&s.head.config, s.accessed_ms, now) =>
                {
                    Some(s.head.info(path))
                }
                _ => None,
            })
            .collect();
        infos.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(infos)
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let now = self.clock.now_ms();
        let mut streams = self.lock();
        let source = live(&mut streams, &fork.source, now)?;
        let planned = plan(&fork, &source.head.config, source.head.tail(), |p| {
            Ok(source.messages.get(p as usize).cloned())
        })?;
        let initial = split(
            fork.initial.clone(),
            planned.config.is_json(),
            self.max_append_bytes,
            true,
        )?;
        let mut messages: Vec<Bytes> = source.messages[..planned.inherit as usize].to_vec();
        messages.extend(planned.partial.clone());
        messages.extend(initial);
        match live(&mut streams, path, now) {
            Ok(existing) => {
                check_refork(
                    path.as_str(),
                    &existing.head.config,
                    existing.origin.as_ref(),
                    &planned,
                )?;
                return Ok(Created {
                    created: false,
                    info: existing.head.info(path.as_str()),
                });
            }
            Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => {}
            Err(other) => return Err(other),
        }
        let mut head = Head::new(planned.config);
        head.push(&messages);
        let info = head.info(path.as_str());
        streams.insert(
            path.to_string(),
            Slot::Live(Box::new(MemoryStream::new(
                head,
                messages,
                Some(planned.origin),
                now,
            ))),
        );
        if let Some(Slot::Live(source)) = streams.get_mut(fork.source.as_str()) {
            source.forks += 1;
        }
        drop(streams);
        self.notifier.commit(Committed {
            path: path.to_string(),
            tail: info.tail,
            closed: info.closed,
        });
        Ok(Created {
            created: true,
            info,
        })
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

/// Drops a deleted fork's reference to its source, removing sources that
/// were soft-deleted and have no forks left (up the chain).
fn release(streams: &mut HashMap<String, Slot>, mut origin: Option<ForkOrigin>) {
    while let Some(ForkOrigin { source, .. }) = origin.take() {
        let Some(Slot::Live(stream)) = streams.get_mut(&source) else {
            return;
        };
        stream.forks = stream.forks.saturating_sub(1);
        if stream.soft_deleted && stream.forks == 0 {
            origin = stream.origin.take();
            streams.insert(source, Slot::Gone);
        }
    }
}
