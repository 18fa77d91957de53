//! Regression (issue 33): expired streams and old tombstones were never
//! swept on DynamoDB (`Storage::sweep` swept nothing: the store had no
//! way to find them but reading every record). They are now found in
//! the two sweep queues, oldest first, each step a bounded number of
//! reads and one transaction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_dynamo::{AttributeValue, Query, QueryPage, Table, TableError};
use eddy_streams::{ManualClock, Payload, ReadFrom, Storage, StreamConfig, StreamPath};

use crate::common;

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

/// Counts the sweep's own reads: queries other than the purge's (of
/// removed streams' data and fork partitions), batch reads and the keys
/// they ask for.
#[derive(Default)]
struct Counted {
    queries: AtomicU64,
    batch_gets: AtomicU64,
    keys_read: AtomicU64,
}

#[async_trait::async_trait]
impl common::Hooks for Counted {
    async fn query(&self, table: &dyn Table, query: Query) -> Result<QueryPage, TableError> {
        let purge = matches!(
            &query.partition,
            AttributeValue::S(pk) if pk.starts_with("ds|d|") || pk.starts_with("ds|f|")
        );
        if !purge {
            self.queries.fetch_add(1, Ordering::SeqCst);
        }
        table.query(query).await
    }

    async fn batch_get_item(
        &self,
        table: &dyn Table,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<eddy_dynamo::Item>, TableError> {
        self.batch_gets.fetch_add(1, Ordering::SeqCst);
        self.keys_read
            .fetch_add(keys.len() as u64, Ordering::SeqCst);
        table.batch_get_item(keys).await
    }
}

async fn expired_streams_and_old_tombstones_go(table: Arc<dyn Table>, counted: Option<&Counted>) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = common::clocked_store(&table, &clock);
    let short = StreamConfig::json().with_ttl(Duration::from_secs(1));
    let sliding = StreamConfig::json().with_ttl(Duration::from_secs(90));
    for n in 0..40 {
        let p = path(&format!("ttl/{n:02}"));
        store
            .create(&p, short.clone(), Payload::Body("[1]".into()))
            .await
            .expect("create");
    }
    store
        .create(&path("slides"), sliding, Payload::Body("[1]".into()))
        .await
        .expect("create");
    for n in 0..20 {
        let p = path(&format!("deleted/{n:02}"));
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store.delete(&p).await.expect("delete");
    }
    store
        .create(&path("kept"), StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    assert_eq!(
        common::items(&*table, "ds|x").await,
        41,
        "one entry per stream that expires"
    );
    assert_eq!(
        common::items(&*table, "ds|t").await,
        20,
        "one entry per tombstone"
    );
    // Past the grace; the sliding stream is read just before.
    clock.advance(eddy_streams::SWEEP_GRACE + Duration::from_secs(10));
    store
        .read(&path("slides"), ReadFrom::Beginning, 1024)
        .await
        .expect("a read touches it");
    let mut swept = 0;
    let mut steps = 0;
    loop {
        let before = counted.map(|c| {
            (
                c.queries.load(Ordering::SeqCst),
                c.batch_gets.load(Ordering::SeqCst),
                c.keys_read.load(Ordering::SeqCst),
            )
        });
        let step = store.sweep(64).await.expect("sweep");
        if let (Some(c), Some((queries, batches, keys))) = (counted, before) {
            let queries = c.queries.load(Ordering::SeqCst) - queries;
            let batches = c.batch_gets.load(Ordering::SeqCst) - batches;
            let keys = c.keys_read.load(Ordering::SeqCst) - keys;
            assert!(
                queries <= 4,
                "a step queries its three queues and a page of the directory: {queries}"
            );
            assert!(
                batches <= 2,
                "a step reads its entries' paths at once, and its page's: {batches}"
            );
            assert!(
                keys <= 32 + 100,
                "at most 16 streams and 16 tombstones, and 100 of the directory: {keys}"
            );
        }
        swept += step;
        steps += 1;
        if step == 0 {
            break;
        }
    }
    assert_eq!(
        swept, 60,
        "40 expired streams and 20 tombstones in {steps} steps"
    );
    assert!(steps <= 5, "{steps} steps");
    assert_eq!(
        store
            .head(&path("deleted/00"))
            .await
            .expect_err("forgotten")
            .code(),
        "stream/not-found",
        "a dropped tombstone"
    );
    store
        .head(&path("kept"))
        .await
        .expect("a live stream stays");
    store
        .head(&path("slides"))
        .await
        .expect("a touched stream stays");
    assert_eq!(
        common::items(&*table, "ds|l").await,
        2,
        "directory: kept and slides"
    );
    assert_eq!(common::items(&*table, "ds|t").await, 0);
    // The touched stream's entry, and the one the walk's first lap
    // queued at its expiry now (they meet when the first comes due).
    let queued = common::items(&*table, "ds|x").await;
    assert!((1..=2).contains(&queued), "the touched stream: {queued}");
    store.backend().purge_pending().await.expect("purge");
    assert_eq!(
        common::items(&*table, "ds|g").await,
        0,
        "every removed stream's data is purged"
    );
    // Later, the touched one expires too and goes.
    clock.advance(Duration::from_secs(200));
    while store.sweep(64).await.expect("sweep") > 0 {}
    assert_eq!(common::items(&*table, "ds|l").await, 1);
    assert_eq!(common::items(&*table, "ds|x").await, 0);
}

#[test]
fn expired_streams_and_old_tombstones_are_swept_in_bounded_steps() {
    common::runtime().block_on(async {
        let inner = common::embedded();
        let hooked = common::Hooked::new(inner, Counted::default());
        let table: Arc<dyn Table> = hooked.clone();
        expired_streams_and_old_tombstones_go(table, Some(&hooked.hooks)).await;
    });
}

#[cfg(feature = "aws")]
#[test]
fn expired_streams_and_old_tombstones_are_swept_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            expired_streams_and_old_tombstones_go(table, None).await;
        }
    });
}

/// Deletes every item of partition `pk`: what a table written before that
/// partition existed lacks.
async fn clear(table: &dyn Table, pk: &str) {
    let page = table
        .query(Query::partition(AttributeValue::S(pk.into())))
        .await
        .expect("query");
    for item in page.items {
        let sk = match item.get("sk") {
            Some(AttributeValue::S(sk)) => sk.clone(),
            _ => panic!("an item without a string sort key"),
        };
        table
            .delete_item(eddy_dynamo::Delete::new(common::key(pk, &sk)))
            .await
            .expect("delete");
    }
}

/// Regression (issue 33): streams with an expiry and tombstones written
/// before the sweep's queues existed had no entry in them, and the sweep
/// never found them. The directory walk queues the streams and a scan of
/// the table the tombstones (once per table), and the sweep then removes
/// them.
async fn expired_streams_without_a_queue_entry_go(table: Arc<dyn Table>) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = common::clocked_store(&table, &clock);
    let short = StreamConfig::json().with_ttl(Duration::from_secs(1));
    for n in 0..30 {
        store
            .create(
                &path(&format!("old/{n:02}")),
                short.clone(),
                Payload::empty(),
            )
            .await
            .expect("create");
    }
    for n in 0..20 {
        let p = path(&format!("old/deleted/{n:02}"));
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store.delete(&p).await.expect("delete");
    }
    store
        .create(&path("old/kept"), StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    // The old layout: no queue entries.
    clear(&*table, "ds|x").await;
    clear(&*table, "ds|t").await;
    clock.advance(eddy_streams::SWEEP_GRACE + Duration::from_secs(10));
    let mut swept = 0;
    for _ in 0..20 {
        let step = store.sweep(64).await.expect("sweep");
        swept += step;
        if step == 0 && common::items(&*table, "ds|l").await == 1 {
            break;
        }
    }
    assert_eq!(
        swept,
        30 + 20,
        "every expired stream and tombstone is swept"
    );
    assert_eq!(
        store
            .head(&path("old/deleted/00"))
            .await
            .expect_err("forgotten")
            .code(),
        "stream/not-found",
        "a dropped tombstone"
    );
    assert_eq!(
        store.head(&path("old/00")).await.expect_err("swept").code(),
        "stream/not-found"
    );
    store.head(&path("old/kept")).await.expect("kept");
    assert_eq!(common::items(&*table, "ds|x").await, 0);
    assert_eq!(common::items(&*table, "ds|t").await, 0);
}

#[test]
fn expired_streams_without_a_queue_entry_are_swept() {
    common::runtime().block_on(expired_streams_without_a_queue_entry_go(common::embedded()));
}

#[cfg(feature = "aws")]
#[test]
fn expired_streams_without_a_queue_entry_are_swept_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            expired_streams_without_a_queue_entry_go(table).await;
        }
    });
}
