//! Regression (issue 33): expired producers' states were never swept on
//! DynamoDB (`sweep_expired_producers` was not implemented: they stayed
//! until their stream was removed or the producer cap made room). The
//! sweep's walk over the directory now drops them, a bounded step at a
//! time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use eddy_dynamo::{AttributeValue, Query, SortCondition, Table, TableError, TransactWriteItem};
use eddy_streams::{
    Append, ManualClock, Payload, ProducerPosition, Storage, StreamConfig, StreamPath,
    DEFAULT_PRODUCER_EXPIRY,
};

use crate::common;

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

fn write(id: &str, seq: u64) -> Append {
    Append::body("1").with_producer(ProducerPosition::new(id, 0, seq))
}

/// The producer items of the stream at `path`, and the count its path
/// item keeps.
async fn producers(table: &dyn Table, path: &str) -> (usize, u64) {
    let item = table
        .get_item(common::key(&format!("ds|s|{path}"), "-"))
        .await
        .expect("get")
        .expect("a path item");
    let id = match item.get("id") {
        Some(AttributeValue::S(id)) => id.clone(),
        _ => panic!("a stream's path item has its id"),
    };
    let count = match item.get("np") {
        Some(AttributeValue::N(n)) => n.parse().expect("a number"),
        _ => 0,
    };
    let query = Query::partition(AttributeValue::S(format!("ds|d|{id}")))
        .sort(SortCondition::BeginsWith(AttributeValue::S("p|".into())));
    let items = table.query(query).await.expect("query").items.len();
    (items, count)
}

async fn every_stream_is_walked(table: Arc<dyn Table>, counted: bool) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = common::clocked_store(&table, &clock);
    for n in 0..30 {
        let p = path(&format!("walk/{n:02}"));
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        for producer in ["a", "b", "c"] {
            store.append(&p, write(producer, 0)).await.expect("append");
        }
    }
    let many = path("walk/many");
    store
        .create(&many, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    for n in 0..40 {
        store
            .append(&many, write(&format!("p{n:02}"), 0))
            .await
            .expect("append");
    }
    for n in 0..5 {
        store
            .create(
                &path(&format!("walk/quiet/{n}")),
                StreamConfig::json(),
                Payload::empty(),
            )
            .await
            .expect("create");
    }
    assert_eq!(store.sweep(64).await, Ok(0), "nothing expired yet");
    clock.advance(DEFAULT_PRODUCER_EXPIRY - Duration::from_secs(60));
    store
        .append(&path("walk/00"), write("a", 1))
        .await
        .expect("a is used again");
    clock.advance(Duration::from_secs(120));
    let mut swept = 0;
    let mut steps = 0;
    loop {
        let before = table.request_stats();
        let step = store.sweep(64).await.expect("sweep");
        let cost = table.request_stats() - before;
        steps += 1;
        assert!(step <= 16, "at most 16 drops a step: {step}");
        if counted {
            // Where the walk is, two queues, the directory's page, at
            // most 8 pages of producers; the embedded table counts its
            // batch reads (at most two) as transactions.
            assert!(cost.reads <= 12, "{cost:?}");
            assert!(cost.items_read <= 1 + 32 + 100 + 1_000 + 100, "{cost:?}");
            assert!(cost.transactions <= 3, "{cost:?}");
            assert!(cost.items_written <= 100, "{cost:?}");
        }
        swept += step;
        if step == 0 || steps > 40 {
            break;
        }
    }
    assert_eq!(
        swept,
        30 * 3 - 1 + 40,
        "every expired producer, in {steps} steps"
    );
    for n in 0..30 {
        let p = format!("walk/{n:02}");
        let kept = usize::from(n == 0);
        assert_eq!(producers(&*table, &p).await, (kept, kept as u64), "{p}");
    }
    assert_eq!(producers(&*table, "walk/many").await, (0, 0));
    let retry = store
        .append(&path("walk/00"), write("a", 1))
        .await
        .expect("retry");
    assert!(retry.duplicate, "the producer used meanwhile is kept");
    assert_eq!(store.sweep(64).await, Ok(0));
}

#[test]
fn the_sweep_walks_every_stream_for_expired_producers() {
    common::runtime().block_on(every_stream_is_walked(common::embedded(), true));
}

#[cfg(feature = "aws")]
#[test]
fn the_sweep_walks_every_stream_for_expired_producers_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            every_stream_is_walked(table, false).await;
        }
    });
}

/// Appends with producer `a` just before the first transaction that
/// deletes a producer item goes through.
#[derive(Default)]
struct UseBeforeDrop {
    store: OnceLock<Arc<dyn Storage>>,
    done: AtomicBool,
}

#[async_trait::async_trait]
impl common::Hooks for UseBeforeDrop {
    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<TransactWriteItem>,
    ) -> Result<(), TableError> {
        let drops = items.iter().any(|item| {
            matches!(item, TransactWriteItem::Delete(delete)
                if matches!(delete.key.get("sk"), Some(AttributeValue::S(sk)) if sk.starts_with("p|")))
        });
        if drops && !self.done.swap(true, Ordering::SeqCst) {
            if let Some(store) = self.store.get() {
                store
                    .append(&path("raced"), write("a", 0))
                    .await
                    .expect("the producer writes");
            }
        }
        table.transact_write_items(items).await
    }
}

/// A producer that writes between the sweep's read and its commit is not
/// deleted, and the stream's count stays exact.
#[test]
fn a_producer_used_while_the_sweep_reads_is_kept() {
    common::runtime().block_on(async {
        let hooked = common::Hooked::new(common::embedded(), UseBeforeDrop::default());
        let table: Arc<dyn Table> = hooked.clone();
        let clock = Arc::new(ManualClock::starting_now());
        let store: Arc<dyn Storage> = Arc::new(common::clocked_store(&table, &clock));
        let _ = hooked.hooks.store.set(Arc::clone(&store));
        let p = path("raced");
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store.append(&p, write("a", 0)).await.expect("a");
        store.append(&p, write("b", 0)).await.expect("b");
        clock.advance(DEFAULT_PRODUCER_EXPIRY + Duration::from_secs(1));
        let mut swept = 0;
        for _ in 0..4 {
            swept += store.sweep(64).await.expect("sweep");
        }
        assert!(hooked.hooks.done.load(Ordering::SeqCst), "the race ran");
        assert_eq!(swept, 1, "only b");
        assert_eq!(producers(&*table, "raced").await, (1, 1));
        let retry = store.append(&p, write("a", 0)).await.expect("retry");
        assert!(retry.duplicate, "a's state was kept");
    });
}
