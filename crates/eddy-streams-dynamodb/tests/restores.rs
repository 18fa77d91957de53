//! Regression (issue 33): a restore of a stream with more producers than
//! one transaction holds failed (its first chunk creates the stream with
//! every producer's state: 5 000 producers are 5 000 items, and one
//! transaction holds 100). A new stream's data items are now written
//! ahead, under a garbage entry its creating transaction deletes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use eddy_dynamo::{AttributeValue, Table, TableError, TransactWriteItem};
use eddy_streams::{
    Append, ProducerPosition, SnapshotProducer, Storage, StreamConfig, StreamPath, StreamSnapshot,
};

use crate::common;

fn snapshot(producers: usize) -> StreamSnapshot {
    StreamSnapshot {
        path: StreamPath::new("restored/many-producers").expect("path"),
        incarnation: 1,
        config: StreamConfig::json(),
        closed: false,
        count: 2,
        bytes: 2,
        last_stream_seq: None,
        closed_by: None,
        producers: (0..producers)
            .map(|n| SnapshotProducer {
                position: ProducerPosition::new(format!("producer-{n:05}"), 0, 7),
                last_ms: None,
            })
            .collect(),
        dropped_deletes: None,
    }
}

async fn a_stream_with_thousands_of_producers_is_restored(table: Arc<dyn Table>, producers: usize) {
    let store = eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
        .expect("open");
    let snapshot = snapshot(producers);
    let messages = vec![Bytes::from_static(b"1"), Bytes::from_static(b"2")];
    store
        .restore(&snapshot, 0, messages)
        .await
        .expect("the restore");
    let taken = store.snapshot(&snapshot.path).await.expect("snapshot");
    let positions = |s: &StreamSnapshot| -> Vec<ProducerPosition> {
        s.producers.iter().map(|p| p.position.clone()).collect()
    };
    assert_eq!(
        positions(&taken),
        positions(&snapshot),
        "every producer's state"
    );
    assert_eq!(taken.count, 2);
    // A producer's retry is still a duplicate; its next append is taken.
    let retry = Append::body("[3]").with_producer(ProducerPosition::new("producer-00042", 0, 7));
    let appended = store.append(&snapshot.path, retry).await.expect("retry");
    assert!(appended.duplicate, "deduplicated as before the backup");
    let next = Append::body("[3]").with_producer(ProducerPosition::new("producer-00042", 0, 8));
    let appended = store.append(&snapshot.path, next).await.expect("next");
    assert!(!appended.duplicate);
    assert_eq!(
        common::items(&*table, "ds|g").await,
        0,
        "no staged entry is left"
    );
}

#[test]
fn a_stream_with_5000_producers_is_restored() {
    common::runtime().block_on(a_stream_with_thousands_of_producers_is_restored(
        common::embedded(),
        5000,
    ));
}

#[cfg(feature = "aws")]
#[test]
fn a_stream_with_thousands_of_producers_is_restored_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            a_stream_with_thousands_of_producers_is_restored(table, 1000).await;
        }
    });
}

/// Refuses the first transaction that puts a path item, as a lost race
/// would (nothing applied).
struct LoseFirstCommit(AtomicBool);

#[async_trait::async_trait]
impl common::Hooks for LoseFirstCommit {
    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<TransactWriteItem>,
    ) -> Result<(), TableError> {
        let commits = items.iter().any(|item| {
            matches!(item, TransactWriteItem::Put(put)
                if matches!(put.item.get("pk"), Some(AttributeValue::S(pk)) if pk.starts_with("ds|s|")))
        });
        if commits && !self.0.swap(true, Ordering::SeqCst) {
            return Err(TableError::ConditionalCheckFailed { item: None });
        }
        table.transact_write_items(items).await
    }
}

/// A restore whose creating transaction loses a race runs again with a
/// new stream; what it had written ahead is purged, and the restored
/// stream is whole.
#[test]
fn staged_items_of_a_lost_commit_are_purged() {
    common::runtime().block_on(async {
        let inner = common::embedded();
        let hooked =
            common::Hooked::new(Arc::clone(&inner), LoseFirstCommit(AtomicBool::new(false)));
        let table: Arc<dyn Table> = hooked.clone();
        let store =
            eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
                .expect("open");
        let snapshot = snapshot(300);
        let messages = vec![Bytes::from_static(b"1"), Bytes::from_static(b"2")];
        store
            .restore(&snapshot, 0, messages)
            .await
            .expect("the restore");
        assert!(hooked.hooks.0.load(Ordering::SeqCst), "a commit was lost");
        store.backend().purge_pending().await.expect("purge");
        assert_eq!(common::items(&*inner, "ds|g").await, 0, "no garbage left");
        let taken = store.snapshot(&snapshot.path).await.expect("snapshot");
        assert_eq!(taken.producers.len(), 300);
    });
}
