//! Retention on DynamoDB (issue 34): the store refused every policy. It
//! now keeps them: the streams that owe drops are found in the retention
//! queue (`ds|r`), each sweep step is one transaction of at most 100
//! items, a pack is deleted once wholly below the first kept message,
//! and a source keeps its packs while forks read them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Query, QueryPage, Table, TableError, TransactWriteItem};
use eddy_streams::{Append, Fork, Payload, ReadFrom, Retention, Storage, StreamConfig, StreamPath};

use crate::common;

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

fn policy(text: &str) -> Retention {
    text.parse().expect("policy")
}

/// Counts what a sweep step asks of the table.
#[derive(Default)]
struct Counted {
    queries: AtomicU64,
    batch_gets: AtomicU64,
    transactions: AtomicU64,
    /// The most items of one transaction.
    most_items: AtomicUsize,
}

impl Counted {
    fn take(&self) -> (u64, u64, u64) {
        (
            self.queries.swap(0, Ordering::SeqCst),
            self.batch_gets.swap(0, Ordering::SeqCst),
            self.transactions.swap(0, Ordering::SeqCst),
        )
    }
}

#[async_trait::async_trait]
impl common::Hooks for Counted {
    async fn query(&self, table: &dyn Table, query: Query) -> Result<QueryPage, TableError> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        table.query(query).await
    }

    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<TransactWriteItem>,
    ) -> Result<(), TableError> {
        self.transactions.fetch_add(1, Ordering::SeqCst);
        self.most_items.fetch_max(items.len(), Ordering::SeqCst);
        table.transact_write_items(items).await
    }

    async fn batch_get_item(
        &self,
        table: &dyn Table,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<eddy_dynamo::Item>, TableError> {
        self.batch_gets.fetch_add(1, Ordering::SeqCst);
        table.batch_get_item(keys).await
    }
}

fn store(table: &Arc<dyn Table>) -> eddy_streams_dynamodb::DynamoStorage {
    eddy_streams_dynamodb::open(Arc::clone(table), eddy_streams_dynamodb::options()).expect("open")
}

/// How many message items the stream at `p` keeps in its data partition.
async fn message_items(table: &dyn Table, p: &StreamPath) -> usize {
    let item = table
        .get_item(common::key(&format!("ds|s|{p}"), "-"))
        .await
        .expect("get")
        .expect("a path item");
    let Some(AttributeValue::S(id)) = item.get("id") else {
        panic!("a path item without id");
    };
    common::items(table, &format!("ds|d|{id}")).await
}

async fn read_all(store: &dyn Storage, p: &StreamPath) -> Vec<String> {
    let chunk = store
        .read(p, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    chunk
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
}

async fn sweep_all(store: &dyn Storage) -> usize {
    let mut swept = 0;
    while let step @ 1.. = store.sweep(64).await.expect("sweep") {
        swept += step;
    }
    swept
}

/// 250 messages in items of their own under `messages=10`: the queue
/// holds the stream from the append that passes the bound until the
/// drop that brings it back, and the 240 items go in steps of at most
/// 100 items, each three queue `Query`s, one `Query` of the stream's
/// items, one `BatchGetItem` and one transaction, besides the walk's page
/// of the directory (one `Query`, one `BatchGetItem`).
#[test]
fn a_long_prefix_goes_in_bounded_steps() {
    common::runtime().block_on(async {
        let hooked = common::Hooked::new(common::embedded(), Counted::default());
        let table: Arc<dyn Table> = hooked.clone();
        let store = store(&table);
        let p = path("log");
        let config = StreamConfig::bytes("text/plain").with_retention(policy("messages=10"));
        store
            .create(&p, config, Payload::empty())
            .await
            .expect("create");
        for n in 0..250 {
            store
                .append(&p, Append::body(n.to_string()))
                .await
                .expect("append");
            let queued = common::items(&*table, "ds|r").await;
            assert_eq!(queued, usize::from(n >= 10), "after message {n}");
        }
        assert_eq!(message_items(&*table, &p).await, 250);
        hooked.hooks.take();
        let mut steps = 0;
        loop {
            let step = store.sweep(64).await.expect("sweep");
            let (queries, batches, transactions) = hooked.hooks.take();
            if step == 0 {
                break;
            }
            steps += 1;
            assert_eq!(
                (queries, batches, transactions),
                (5, 2, 1),
                "step {steps} dropped {step}"
            );
        }
        assert_eq!(steps, 3, "240 items, at most 100 a transaction");
        assert!(hooked.hooks.most_items.load(Ordering::SeqCst) <= 100);
        let info = store.head(&p).await.expect("head");
        assert_eq!(info.earliest.position(), 240);
        assert_eq!(info.tail.position(), 250);
        let kept: Vec<String> = (240..250).map(|n| n.to_string()).collect();
        assert_eq!(read_all(&store, &p).await, kept);
        assert_eq!(message_items(&*table, &p).await, 10);
        assert_eq!(common::items(&*table, "ds|r").await, 0, "nothing owed");
        let (queries, batches, transactions) = hooked.hooks.take();
        assert_eq!(
            (queries, batches, transactions),
            (3, 0, 0),
            "a step with nothing due reads its three queues"
        );
    });
}

/// Twelve streams owing 40 items each share the steps: every step is one
/// transaction of at most 100 items, and every stream gets its drops.
#[test]
fn streams_due_together_share_each_steps_room() {
    common::runtime().block_on(async {
        let hooked = common::Hooked::new(common::embedded(), Counted::default());
        let table: Arc<dyn Table> = hooked.clone();
        let store = store(&table);
        let config = StreamConfig::bytes("text/plain").with_retention(policy("messages=1"));
        let paths: Vec<StreamPath> = (0..12).map(|n| path(&format!("many/{n:02}"))).collect();
        for p in &paths {
            store
                .create(p, config.clone(), Payload::empty())
                .await
                .expect("create");
            for n in 0..41 {
                store
                    .append(p, Append::body(n.to_string()))
                    .await
                    .expect("append");
            }
        }
        hooked.hooks.take();
        hooked.hooks.most_items.store(0, Ordering::SeqCst);
        let mut steps = 0;
        while store.sweep(64).await.expect("sweep") > 0 {
            steps += 1;
            let (_, _, transactions) = hooked.hooks.take();
            assert_eq!(transactions, 1, "step {steps}");
        }
        assert!(hooked.hooks.most_items.load(Ordering::SeqCst) <= 100);
        assert!(steps <= 8, "480 items in {steps} steps");
        for p in &paths {
            assert_eq!(read_all(&store, p).await, ["40"]);
            assert_eq!(message_items(&*table, p).await, 1);
        }
        assert_eq!(common::items(&*table, "ds|r").await, 0);
    });
}

/// A pack partly below the first kept message stays (its kept messages
/// are read from it) until a later drop passes its end.
async fn a_pack_goes_once_wholly_below(table: Arc<dyn Table>) {
    let store = store(&table);
    let p = path("batched");
    let config = StreamConfig::json().with_retention(policy("messages=5"));
    store
        .create(&p, config, Payload::empty())
        .await
        .expect("create");
    store
        .append(&p, Append::body("[0,1,2,3,4,5,6,7]"))
        .await
        .expect("append");
    assert_eq!(message_items(&*table, &p).await, 1, "one pack");
    assert_eq!(sweep_all(&store).await, 3);
    assert_eq!(read_all(&store, &p).await, ["3", "4", "5", "6", "7"]);
    assert_eq!(message_items(&*table, &p).await, 1, "partly below: kept");
    let head = store.head(&p).await.expect("head");
    assert_eq!(head.bytes, 5);
    for n in 8..13 {
        store
            .append(&p, Append::body(format!("[{n}]")))
            .await
            .expect("append");
    }
    assert_eq!(sweep_all(&store).await, 5);
    assert_eq!(read_all(&store, &p).await, ["8", "9", "10", "11", "12"]);
    assert_eq!(message_items(&*table, &p).await, 5, "the pack went");
    assert_eq!(store.head(&p).await.expect("head").bytes, 8);
}

#[test]
fn a_pack_partly_below_the_first_kept_message_stays() {
    common::runtime().block_on(a_pack_goes_once_wholly_below(common::embedded()));
}

/// A source keeps the items its forks read, whatever it drops; once
/// its forks are gone, its next drop deletes them. Forks of a source
/// that dropped messages inherit the kept bytes, and so do their forks.
async fn forks_keep_their_sources_items(table: Arc<dyn Table>) {
    let store = store(&table);
    let source = path("source");
    let config = StreamConfig::bytes("text/plain").with_retention(policy("messages=2"));
    store
        .create(&source, config, Payload::empty())
        .await
        .expect("create");
    for word in ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"] {
        store
            .append(&source, Append::body(word))
            .await
            .expect("append");
    }
    let copy = path("copy");
    let whole = Fork::of(source.clone()).with_retention(Retention::NONE);
    store.fork(&copy, whole).await.expect("fork");
    assert_eq!(sweep_all(&store).await, 4);
    assert_eq!(read_all(&store, &source).await, ["eeeee", "ffffff"]);
    assert_eq!(
        message_items(&*table, &source).await,
        6,
        "a fork reads them"
    );
    assert_eq!(read_all(&store, &copy).await.len(), 6);

    // A fork at the tail inherits what the source keeps: 11 bytes; its
    // own fork inherits the same and its own message.
    let late = path("late");
    store
        .fork(&late, Fork::of(source.clone()))
        .await
        .expect("fork");
    let info = store.head(&late).await.expect("head");
    assert_eq!((info.earliest.position(), info.bytes), (4, 11));
    store
        .append(&late, Append::body("gg"))
        .await
        .expect("append");
    let later = path("later");
    store
        .fork(
            &later,
            Fork::of(late.clone()).with_retention(Retention::NONE),
        )
        .await
        .expect("fork");
    let info = store.head(&later).await.expect("head");
    assert_eq!((info.earliest.position(), info.bytes), (4, 13));
    assert_eq!(read_all(&store, &later).await, ["eeeee", "ffffff", "gg"]);

    // The forks go; the source's next drop deletes everything below.
    for fork in [&later, &late, &copy] {
        store.delete(fork).await.expect("delete");
    }
    store
        .append(&source, Append::body("g"))
        .await
        .expect("append");
    assert_eq!(sweep_all(&store).await, 1);
    assert_eq!(read_all(&store, &source).await, ["ffffff", "g"]);
    assert_eq!(message_items(&*table, &source).await, 2);
    assert_eq!(store.head(&source).await.expect("head").bytes, 7);
}

#[test]
fn a_source_keeps_what_its_forks_read() {
    common::runtime().block_on(forks_keep_their_sources_items(common::embedded()));
}

/// A message cut into parts goes with all its parts; a fork's own drops
/// delete its own items only, never its source's.
#[test]
fn large_messages_and_a_forks_own_items() {
    common::runtime().block_on(async {
        let table = common::embedded();
        let store = store(&table);
        let big = path("big");
        let config =
            StreamConfig::bytes("application/octet-stream").with_retention(policy("messages=1"));
        store
            .create(&big, config, Payload::empty())
            .await
            .expect("create");
        for fill in [b'a', b'b'] {
            let body = vec![fill; 800_000];
            store
                .append(&big, Append::body(body))
                .await
                .expect("append");
        }
        assert_eq!(message_items(&*table, &big).await, 6, "three parts each");
        assert_eq!(sweep_all(&store).await, 1);
        assert_eq!(message_items(&*table, &big).await, 3);
        let chunk = store
            .read(&big, ReadFrom::Beginning, 1 << 21)
            .await
            .expect("read");
        assert_eq!(chunk.messages.len(), 1);
        assert_eq!(chunk.messages[0].len(), 800_000);
        assert!(chunk.messages[0].iter().all(|b| *b == b'b'));

        let source = path("wide");
        let config = StreamConfig::bytes("text/plain").with_retention(policy("messages=100"));
        store
            .create(&source, config, Payload::empty())
            .await
            .expect("create");
        for word in ["s0", "s1", "s2"] {
            store
                .append(&source, Append::body(word))
                .await
                .expect("append");
        }
        let fork = path("narrow");
        let narrow = Fork::of(source.clone()).with_retention(policy("messages=2"));
        store.fork(&fork, narrow).await.expect("fork");
        for word in ["f3", "f4", "f5"] {
            store
                .append(&fork, Append::body(word))
                .await
                .expect("append");
        }
        assert_eq!(sweep_all(&store).await, 4);
        assert_eq!(read_all(&store, &fork).await, ["f4", "f5"]);
        assert_eq!(message_items(&*table, &fork).await, 2, "its own f3 went");
        assert_eq!(
            message_items(&*table, &source).await,
            3,
            "the source's stay"
        );
        assert_eq!(read_all(&store, &source).await, ["s0", "s1", "s2"]);
        assert_eq!(store.head(&fork).await.expect("head").bytes, 4);
    });
}

#[cfg(feature = "aws")]
mod moto {
    use crate::common;

    #[test]
    fn a_pack_partly_below_the_first_kept_message_stays() {
        common::runtime().block_on(async {
            if let Some(table) = common::moto().await {
                super::a_pack_goes_once_wholly_below(table).await;
            }
        });
    }

    #[test]
    fn a_source_keeps_what_its_forks_read() {
        common::runtime().block_on(async {
            if let Some(table) = common::moto().await {
                super::forks_keep_their_sources_items(table).await;
            }
        });
    }
}
