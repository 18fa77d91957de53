//! Regression (issue 33): a snapshot read a stream's record and then its
//! producers in two requests, so a commit between them gave a snapshot
//! whose producers were ahead of its count (a backup that restores a
//! producer past messages it does not hold). A snapshot now checks that
//! what it read is unchanged, and reads again when it is not.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use eddy_dynamo::{Item, Query, Table, TableError};
use eddy_streams::{Append, Payload, ProducerPosition, Storage, StreamConfig, StreamPath};

use crate::common;

type Hook = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A table that runs a hook before its next query (a commit of another
/// process landing between two reads of one snapshot).
struct Interleaved {
    table: Arc<dyn Table>,
    before_query: Mutex<Option<Hook>>,
}

#[async_trait::async_trait]
impl Table for Interleaved {
    fn schema(&self) -> &eddy_dynamo::TableSchema {
        self.table.schema()
    }
    fn request_stats(&self) -> eddy_dynamo::RequestStats {
        self.table.request_stats()
    }
    fn rows_at_once(&self) -> usize {
        self.table.rows_at_once()
    }
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(&self, query: Query) -> Result<eddy_dynamo::QueryPage, TableError> {
        let hook = self.before_query.lock().expect("hook").take();
        if let Some(hook) = hook {
            hook.await;
        }
        self.table.query(query).await
    }
    async fn transact_write_items(
        &self,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), TableError> {
        self.table.transact_write_items(items).await
    }
    async fn transact_write_tables(
        &self,
        items: Vec<eddy_dynamo::TableWrite>,
    ) -> Result<(), TableError> {
        self.table.transact_write_tables(items).await
    }
    async fn put_item(&self, put: eddy_dynamo::Put) -> Result<(), TableError> {
        self.table.put_item(put).await
    }
    async fn update_item(&self, update: eddy_dynamo::UpdateItem) -> Result<Item, TableError> {
        self.table.update_item(update).await
    }
    async fn delete_item(&self, delete: eddy_dynamo::Delete) -> Result<(), TableError> {
        self.table.delete_item(delete).await
    }
    async fn batch_get_item(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.table.batch_get_item(keys).await
    }
}

#[tokio::test]
async fn a_snapshot_is_as_of_one_commit() {
    let inner = common::embedded();
    let table = Arc::new(Interleaved {
        table: Arc::clone(&inner),
        before_query: Mutex::new(None),
    });
    let options = eddy_streams_dynamodb::options;
    let reader =
        eddy_streams_dynamodb::open(Arc::clone(&table) as Arc<dyn Table>, options()).expect("open");
    let other: Arc<dyn Storage> =
        Arc::new(eddy_streams_dynamodb::open(inner, options()).expect("open"));
    let p = StreamPath::new("snap/log").expect("path");
    let produce = |seq: u64| {
        Append::body(format!(r#"{{"n":{seq}}}"#)).with_producer(ProducerPosition::new("p1", 0, seq))
    };
    other
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    other.append(&p, produce(0)).await.expect("append 0");

    // Another process appends between the snapshot's record and its
    // producers.
    let (store, path) = (Arc::clone(&other), p.clone());
    *table.before_query.lock().expect("hook") = Some(Box::pin(async move {
        store.append(&path, produce(1)).await.expect("append 1");
    }));
    let snapshot = reader.snapshot(&p).await.expect("snapshot");
    let seq = snapshot
        .producers
        .iter()
        .find(|producer| producer.id == "p1")
        .map(|producer| producer.seq);
    assert_eq!(
        (snapshot.count, seq),
        (2, Some(1)),
        "count and producers of one commit"
    );
}
