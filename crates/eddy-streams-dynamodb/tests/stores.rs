//! Several stores on one table (as several processes would be), group
//! commit, and what removals leave behind: on the embedded table, and
//! (feature `aws`) on moto.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_dynamo::{AttributeValue, Item, Table, TableError};
use eddy_streams::backend::RecordOptions;
use eddy_streams::{
    Append, Offset, Payload, ProducerPosition, ReadFrom, Storage, StreamConfig, StreamPath, Wait,
};
use eddy_streams_dynamodb::DynamoStorage;

use crate::common;

fn store(table: &Arc<dyn Table>) -> DynamoStorage {
    let options = RecordOptions {
        poll: Duration::from_millis(20),
        ..eddy_streams_dynamodb::options()
    };
    eddy_streams_dynamodb::open(Arc::clone(table), options).expect("open")
}

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

/// Runs `case` on a fresh embedded table, then on a fresh moto table.
macro_rules! on_every_table {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn embedded() {
                    crate::common::runtime().block_on(super::$name(crate::common::embedded()));
                }

                #[cfg(feature = "aws")]
                #[test]
                fn moto() {
                    crate::common::runtime().block_on(async {
                        if let Some(table) = crate::common::moto().await {
                            super::$name(table).await;
                        }
                    });
                }
            }
        )*
    };
}

on_every_table!(
    a_reader_of_one_store_wakes_at_another_stores_append,
    producers_through_two_stores_append_each_message_once_in_one_order,
    a_removed_stream_leaves_no_data_items,
);

async fn a_reader_of_one_store_wakes_at_another_stores_append(table: Arc<dyn Table>) {
    let polled = common::Hooked::new(
        Arc::clone(&table),
        Polls(tokio::sync::watch::Sender::new(0)),
    );
    let writer = store(&table);
    let reader = Arc::new(store(&(Arc::clone(&polled) as Arc<dyn Table>)));
    let p = path("live/one");
    reader
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    let polls_before = *polled.hooks.0.borrow();
    let waiting = tokio::spawn({
        let (reader, p) = (Arc::clone(&reader), p.clone());
        async move { reader.wait(&p, Offset::ZERO, Duration::from_secs(20)).await }
    });
    // The reader polls the records of the streams it waits on: after two
    // polls of an empty stream it has looked and is parked, so only a poll
    // after the append can wake it.
    polled.hooks.until(polls_before + 2).await;
    writer.append(&p, Append::body("1")).await.expect("append");
    match waiting.await.expect("join").expect("wait") {
        Wait::Changed(info) => assert_eq!(info.tail.position(), 1),
        Wait::TimedOut(info) => panic!("the reader never saw the other store's append: {info:?}"),
    }
    let chunk = reader
        .read(&p, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    assert_eq!(chunk.messages, vec![Bytes::from("1")]);
}

/// A store polls the streams its readers wait on one interval after the
/// first wait, not at once: the waiter has just read its stream's record,
/// and a poll then would read it again. (On the paused clock, which moves
/// on to the next timer whenever the test waits.)
#[tokio::test(start_paused = true)]
async fn the_first_poll_comes_one_interval_after_the_first_wait() {
    let table = common::embedded();
    let started = common::Hooked::new(
        Arc::clone(&table),
        PollStarts(tokio::sync::watch::Sender::new(Vec::new())),
    );
    let interval = Duration::from_secs(5);
    let options = RecordOptions {
        poll: interval,
        ..eddy_streams_dynamodb::options()
    };
    let reader = Arc::new(
        eddy_streams_dynamodb::open(Arc::clone(&started) as Arc<dyn Table>, options).expect("open"),
    );
    let p = path("live/first-poll");
    reader
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    let waited_at = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let (reader, p) = (Arc::clone(&reader), p.clone());
        async move { reader.wait(&p, Offset::ZERO, Duration::from_secs(60)).await }
    });
    let mut starts = started.hooks.0.subscribe();
    let starts = starts
        .wait_for(|starts| starts.len() >= 2)
        .await
        .expect("polls");
    assert!(
        starts[0] >= waited_at + interval,
        "the first poll came {:?} after the wait",
        starts[0] - waited_at
    );
    assert!(starts[1] >= starts[0] + interval, "then one per interval");
    drop(starts);
    waiting.abort();
}

/// When each poll of stream records (`BatchGetItem`) began, on tokio's
/// clock.
struct PollStarts(tokio::sync::watch::Sender<Vec<tokio::time::Instant>>);

#[async_trait::async_trait]
impl common::Hooks for PollStarts {
    async fn batch_get_item(
        &self,
        table: &dyn Table,
        keys: Vec<Item>,
    ) -> Result<Vec<Item>, TableError> {
        self.0
            .send_modify(|starts| starts.push(tokio::time::Instant::now()));
        table.batch_get_item(keys).await
    }
}

/// Counts the polls of stream records (`BatchGetItem`) made through a
/// table.
struct Polls(tokio::sync::watch::Sender<usize>);

impl Polls {
    /// Waits until `count` polls have been answered.
    async fn until(&self, count: usize) {
        let mut polls = self.0.subscribe();
        let answered = polls.wait_for(|polls| *polls >= count);
        tokio::time::timeout(Duration::from_secs(20), answered)
            .await
            .expect("the reader never polled")
            .expect("polls");
    }
}

#[async_trait::async_trait]
impl common::Hooks for Polls {
    async fn batch_get_item(
        &self,
        table: &dyn Table,
        keys: Vec<Item>,
    ) -> Result<Vec<Item>, TableError> {
        let found = table.batch_get_item(keys).await;
        self.0.send_modify(|polls| *polls += 1);
        found
    }
}

/// Appends `count` messages as producer `id`, each retried while the
/// store answers a retryable error (lost races, as a client would).
async fn produce(store: Arc<DynamoStorage>, p: StreamPath, id: String, count: u64) {
    for seq in 0..count {
        let body = format!(r#"{{"p":"{id}","n":{seq}}}"#);
        loop {
            let append =
                Append::body(body.clone()).with_producer(ProducerPosition::new(id.clone(), 0, seq));
            match store.append(&p, append).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() => continue,
                Err(e) => panic!("{id} seq {seq}: {e}"),
            }
        }
    }
}

async fn producers_through_two_stores_append_each_message_once_in_one_order(table: Arc<dyn Table>) {
    let stores = [Arc::new(store(&table)), Arc::new(store(&table))];
    let p = path("shared/log");
    stores[0]
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    let count = 30;
    let mut tasks = Vec::new();
    for n in 0..4 {
        let store = Arc::clone(&stores[n % 2]);
        tasks.push(tokio::spawn(produce(
            store,
            p.clone(),
            format!("w{n}"),
            count,
        )));
    }
    for task in tasks {
        task.await.expect("producer");
    }
    let mut orders = Vec::new();
    for store in &stores {
        let chunk = store
            .read(&p, ReadFrom::Beginning, usize::MAX)
            .await
            .expect("read");
        let mut next: HashMap<String, u64> = HashMap::new();
        for message in &chunk.messages {
            let value: serde_json::Value = serde_json::from_slice(message).expect("json");
            let producer = value["p"].as_str().expect("producer").to_owned();
            let expected = next.entry(producer.clone()).or_default();
            assert_eq!(
                value["n"].as_u64(),
                Some(*expected),
                "{producer} out of order or twice"
            );
            *expected += 1;
        }
        assert_eq!(
            chunk.messages.len() as u64,
            4 * count,
            "every acknowledged message once"
        );
        orders.push(chunk.messages);
    }
    assert_eq!(orders[0], orders[1], "both stores read one order");
}

async fn a_removed_stream_leaves_no_data_items(table: Arc<dyn Table>) {
    let store = store(&table);
    let p = path("gone/soon");
    store
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    for seq in 0..3 {
        let append = Append::body("[1,2,3]").with_producer(ProducerPosition::new("w", 0, seq));
        store.append(&p, append).await.expect("append");
    }
    let record = table
        .get_item(common::key("ds|s|gone/soon", "-"))
        .await
        .expect("get")
        .expect("the path item");
    let Some(AttributeValue::S(id)) = record.get("id") else {
        panic!("no stream id in {record:?}");
    };
    assert_eq!(
        common::items(&*table, &format!("ds|d|{id}")).await,
        4,
        "three packs and a producer"
    );
    store.delete(&p).await.expect("delete");
    store.backend().purge_pending().await.expect("purge");
    assert_eq!(
        common::items(&*table, &format!("ds|d|{id}")).await,
        0,
        "its data items"
    );
    assert_eq!(common::items(&*table, "ds|g").await, 0, "its garbage entry");
    assert_eq!(
        common::items(&*table, "ds|l").await,
        0,
        "its directory entry"
    );
    let err = store.head(&p).await.expect_err("gone");
    assert_eq!(err.code(), "stream/gone", "the tombstone stays");
}

/// Concurrent appends to one stream share one transaction; one that does
/// not fit with the others goes into the next.
#[test]
fn concurrent_appends_share_transactions_and_the_overflow_goes_next() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let table = common::embedded();
        let store = store(&table);
        let p = path("group");
        store
            .create(
                &p,
                StreamConfig::bytes("application/octet-stream"),
                Payload::empty(),
            )
            .await
            .expect("create");
        let before = table.request_stats();
        // On one thread every append is queued before the runner runs.
        let appends = (0..40).map(|n| store.append(&p, Append::body(format!("m{n:02}"))));
        for appended in futures::future::join_all(appends).await {
            appended.expect("append");
        }
        let small = table.request_stats() - before;
        assert_eq!(small.transactions, 1, "40 appends, one commit: {small:?}");
        assert_eq!(small.reads, 1, "one read of the stream's record: {small:?}");

        let before = table.request_stats();
        let large = (0..3).map(|_| store.append(&p, Append::body(vec![b'x'; 1_500_000])));
        for appended in futures::future::join_all(large).await {
            appended.expect("a large append fits a commit of its own");
        }
        let large = table.request_stats() - before;
        assert_eq!(
            large.transactions, 2,
            "two fit in 4 MB, the third goes next: {large:?}"
        );
        let info = store.head(&p).await.expect("head");
        assert_eq!(info.tail.position(), 43);
        assert_eq!(info.bytes, 40 * 3 + 3 * 1_500_000);
        let chunk = store
            .read(
                &p,
                ReadFrom::Offset(info.tail.with_position(38)),
                usize::MAX,
            )
            .await
            .expect("read");
        assert_eq!(
            chunk.messages[..2],
            [Bytes::from("m38"), Bytes::from("m39")]
        );
        assert!(chunk.messages[2..].iter().all(|m| m.len() == 1_500_000));
    });
}

/// Sixteen stores on one table (as sixteen server processes) append to
/// one stream at once, each from eight callers that never pause: every
/// append is answered, none refused for losing races, and the stream
/// holds each once, every caller's in its order. With 16 attempts and no
/// turn-taking a store that lost 16 rounds in a row refused its group.
#[test]
fn sixteen_writer_processes_on_one_stream_have_every_append_answered() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    /// Each transaction takes a few milliseconds, as DynamoDB's do: long
    /// enough for the other writers to read the record meanwhile.
    struct RoundTrip;
    #[async_trait::async_trait]
    impl common::Hooks for RoundTrip {
        async fn transact_write_items(
            &self,
            table: &dyn Table,
            items: Vec<eddy_dynamo::TransactWriteItem>,
        ) -> Result<(), TableError> {
            tokio::time::sleep(Duration::from_millis(3)).await;
            table.transact_write_items(items).await
        }
    }
    runtime.block_on(async {
        let table: Arc<dyn Table> = common::Hooked::new(common::embedded(), RoundTrip);
        let stores: Vec<Arc<DynamoStorage>> = (0..16).map(|_| Arc::new(store(&table))).collect();
        let p = path("contended");
        stores[0]
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let per_caller = 20;
        let mut callers = Vec::new();
        for (s, store) in stores.iter().enumerate() {
            for c in 0..8 {
                let (store, p) = (Arc::clone(store), p.clone());
                callers.push(tokio::spawn(async move {
                    for n in 0..per_caller {
                        let body = format!(r#"{{"w":"{s}-{c}","n":{n}}}"#);
                        store.append(&p, Append::body(body)).await?;
                    }
                    Ok::<_, eddy_streams::StreamError>(())
                }));
            }
        }
        for caller in callers {
            caller.await.expect("caller").expect("no append refused");
        }
        let chunk = stores[15]
            .read(&p, ReadFrom::Beginning, usize::MAX)
            .await
            .expect("read");
        assert_eq!(chunk.messages.len(), 16 * 8 * per_caller);
        let mut next: HashMap<String, u64> = HashMap::new();
        for message in &chunk.messages {
            let value: serde_json::Value = serde_json::from_slice(message).expect("json");
            let writer = value["w"].as_str().expect("writer").to_owned();
            let expected = next.entry(writer.clone()).or_default();
            assert_eq!(value["n"].as_u64(), Some(*expected), "{writer}");
            *expected += 1;
        }
    });
}
