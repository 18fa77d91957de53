//! The engine over records whose operations suspend, as an asynchronous
//! database driver's do: its calls are `Send` futures that run on any task.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::Engine;
use crate::memory::MemoryRecords;
use crate::record::{RecordReader, Records, Stored, StreamRecord};
use crate::rules::ProducerState;
use crate::{
    Append, Fork, ManualClock, Payload, ProducerPosition, ReadFrom, StreamConfig, StreamError,
    StreamPath,
};

/// Memory records that yield to the scheduler before every operation,
/// and fail to drop compacted messages while the flag says so (a fault).
#[derive(Default)]
struct Suspending(MemoryRecords, bool);

async fn pause() {
    tokio::task::yield_now().await;
}

impl RecordReader for Suspending {
    type Key = Arc<str>;

    async fn load(&mut self, path: &str) -> Result<Option<Stored<Arc<str>>>, StreamError> {
        pause().await;
        self.0.load(path).await
    }

    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        pause().await;
        self.0.tombstoned(path).await
    }

    async fn forks_of(&mut self, path: &str) -> Result<Vec<String>, StreamError> {
        pause().await;
        self.0.forks_of(path).await
    }

    async fn producers(
        &mut self,
        key: &Arc<str>,
    ) -> Result<Vec<(String, ProducerState)>, StreamError> {
        pause().await;
        self.0.producers(key).await
    }

    async fn producer(
        &mut self,
        key: &Arc<str>,
        producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        pause().await;
        self.0.producer(key, producer).await
    }

    async fn producer_count(&mut self, key: &Arc<str>) -> Result<u64, StreamError> {
        pause().await;
        self.0.producer_count(key).await
    }

    async fn messages(
        &mut self,
        key: &Arc<str>,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StreamError> {
        pause().await;
        self.0.messages(key, range, max_bytes).await
    }

    async fn messages_at(
        &mut self,
        key: &Arc<str>,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        pause().await;
        self.0.messages_at(key, range, max_bytes).await
    }

    async fn messages_before(
        &mut self,
        key: &Arc<str>,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        pause().await;
        self.0.messages_before(key, range, max, max_bytes).await
    }

    async fn list(&mut self, prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        pause().await;
        self.0.list(prefix).await
    }
}

impl Records for Suspending {
    async fn insert(&mut self, path: &str, record: &StreamRecord) -> Result<Arc<str>, StreamError> {
        pause().await;
        self.0.insert(path, record).await
    }

    async fn update(&mut self, key: &Arc<str>, record: StreamRecord) -> Result<(), StreamError> {
        pause().await;
        self.0.update(key, record).await
    }

    async fn insert_messages(
        &mut self,
        key: &Arc<str>,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), StreamError> {
        pause().await;
        self.0.insert_messages(key, first, messages).await
    }

    async fn copy_prefix(
        &mut self,
        from: &Arc<str>,
        to: &Arc<str>,
        count: u64,
    ) -> Result<u64, StreamError> {
        pause().await;
        self.0.copy_prefix(from, to, count).await
    }

    async fn save_producer(
        &mut self,
        key: &Arc<str>,
        producer: &str,
        state: ProducerState,
    ) -> Result<(), StreamError> {
        pause().await;
        self.0.save_producer(key, producer, state).await
    }

    async fn drop_positions(
        &mut self,
        key: &Arc<str>,
        positions: Vec<u64>,
    ) -> Result<u64, StreamError> {
        pause().await;
        if self.1 {
            return Err(StreamError::unavailable("an injected fault"));
        }
        self.0.drop_positions(key, positions).await
    }

    async fn slide(&mut self, key: &Arc<str>, at_ms: i64) -> Result<(), StreamError> {
        pause().await;
        self.0.slide(key, at_ms).await
    }

    async fn remove(&mut self, key: &Arc<str>, path: &str) -> Result<(), StreamError> {
        pause().await;
        self.0.remove(key, path).await
    }

    async fn tombstone(
        &mut self,
        path: &str,
        incarnation: u64,
        now_ms: i64,
    ) -> Result<(), StreamError> {
        pause().await;
        self.0.tombstone(path, incarnation, now_ms).await
    }
}

/// An engine with a manual clock and limits no case here reaches.
fn test_engine() -> Engine {
    Engine {
        max_append_bytes: 1 << 20,
        max_producers: 10,
        producer_expiry_ms: i64::MAX,
        limits: Default::default(),
        clock: Arc::new(ManualClock::starting_now()),
        incarnations: Default::default(),
        passes: Default::default(),
    }
}

#[tokio::test]
async fn engine_calls_are_send_futures_over_suspending_records() {
    let engine = test_engine();
    let task = tokio::spawn(async move {
        let mut records = Suspending::default();
        let (src, fork) = (StreamPath::new("src")?, StreamPath::new("fork")?);
        engine
            .create(&mut records, &src, StreamConfig::json(), Payload::empty())
            .await?;
        let producer = ProducerPosition::new("w", 0, 0);
        let append = Append::body("[1,2]").with_producer(producer);
        engine
            .append(&mut records, &src, append.clone(), None)
            .await?;
        let (retry, _) = engine.append(&mut records, &src, append, None).await?;
        engine
            .fork(&mut records, &fork, Fork::of(src.clone()))
            .await?;
        engine.delete(&mut records, &src).await?;
        let (chunk, _) = engine
            .read(&mut records, &fork, ReadFrom::Beginning, 1024)
            .await?;
        Ok::<_, StreamError>((retry.duplicate, chunk.messages))
    });
    let (duplicate, messages) = task.await.expect("join").expect("engine calls");
    assert!(duplicate);
    assert_eq!(messages, ["1", "2"]);
}

/// A payload split ahead for the other kind of stream (the stream was
/// recreated meanwhile) is split again for the stream's own kind.
#[tokio::test]
async fn a_split_for_the_other_kind_of_stream_is_ignored() {
    let engine = test_engine();
    let mut records = Suspending::default();
    let path = StreamPath::new("bytes").expect("path");
    let config = StreamConfig::bytes("text/plain");
    engine
        .create(&mut records, &path, config, Payload::empty())
        .await
        .expect("create");
    let append = Append::body("[1,2]");
    let as_json = crate::payload::Split::ahead(&append.payload, true, engine.bounds());
    assert_eq!(as_json.as_ref().map(|s| s.messages.len()), Some(2));
    engine
        .append(&mut records, &path, append, as_json)
        .await
        .expect("append");
    let (chunk, _) = engine
        .read(&mut records, &path, ReadFrom::Beginning, 1024)
        .await
        .expect("read");
    assert_eq!(chunk.messages, ["[1,2]"]);
}

/// The rows a stream's messages describe (what both materializers find).
async fn rows(
    engine: &Engine,
    records: &mut Suspending,
    path: &StreamPath,
) -> (crate::Materialized, u64) {
    let mut state = crate::Materialized::default();
    let mut from = ReadFrom::Beginning;
    let mut bytes = 0;
    loop {
        let (chunk, _) = engine.read(records, path, from, 100).await.expect("read");
        for message in &chunk.messages {
            bytes += message.len() as u64;
            state.apply(crate::StateMessage::decode(message).expect("a state message"));
        }
        if chunk.up_to_date {
            return (state, bytes);
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

proptest::proptest! {
    /// Compaction steps that fail (the backend cannot drop) change
    /// nothing; the passes after them, interleaved with appends, leave a
    /// stream that materializes as the whole history, with its bytes
    /// counted right.
    #[test]
    fn failed_compaction_steps_change_nothing(
        rounds in proptest::collection::vec(
            (proptest::collection::vec((0u8..6, proptest::bool::ANY), 1..40),
             proptest::collection::vec(proptest::bool::ANY, 0..6)),
            1..8,
        ),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        runtime.block_on(async {
            let engine = test_engine();
            let mut records = Suspending::default();
            let (path, plain) = (StreamPath::new("c").expect("path"), StreamPath::new("p").expect("path"));
            let config = StreamConfig::json().with_compaction(crate::Compaction::ON);
            engine.create(&mut records, &path, config, Payload::empty()).await.expect("create");
            engine.create(&mut records, &plain, StreamConfig::json(), Payload::empty()).await.expect("create");
            for (changes, faults) in rounds {
                let body: Vec<String> = changes
                    .iter()
                    .map(|(key, delete)| {
                        let operation = if *delete { "delete" } else { "upsert" };
                        format!(r#"{{"type":"t","key":"k{key}","value":{key},"headers":{{"operation":"{operation}"}}}}"#)
                    })
                    .collect();
                let body = format!("[{}]", body.join(","));
                for p in [&path, &plain] {
                    engine.append(&mut records, p, Append::body(body.clone()), None).await.expect("append");
                }
                for fault in faults {
                    records.1 = fault;
                    let step = engine.compact_step(&mut records, path.as_str(), 7, 400, false).await;
                    assert!(step.is_ok() || fault, "only a fault fails a step: {step:?}");
                }
            }
            records.1 = false;
            let mut force = true;
            while !engine.compact_step(&mut records, path.as_str(), 7, 400, force).await.expect("step").done {
                force = false;
            }
            let (compacted, bytes) = rows(&engine, &mut records, &path).await;
            let (full, _) = rows(&engine, &mut records, &plain).await;
            assert_eq!(compacted.collections, full.collections);
            let info = engine.head(&mut records, &path).await.expect("head");
            assert_eq!(info.bytes, bytes, "the kept bytes are counted");
        });
    }
}
