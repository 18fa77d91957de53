//! Regression (issue 33): a snapshot read a stream's record and then its
//! producers in two requests, so a commit between them gave a snapshot
//! whose producers were ahead of its count (a backup that restores a
//! producer past messages it does not hold). A snapshot now checks that
//! what it read is unchanged, and reads again when it is not.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use eddy_dynamo::{Query, Table, TableError};
use eddy_streams::{Append, Payload, ProducerPosition, Storage, StreamConfig, StreamPath};

use crate::common;

type Hook = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs a hook before the table's next query (a commit of another
/// process landing between two reads of one snapshot).
struct Interleaved(Mutex<Option<Hook>>);

#[async_trait::async_trait]
impl common::Hooks for Interleaved {
    async fn query(
        &self,
        table: &dyn Table,
        query: Query,
    ) -> Result<eddy_dynamo::QueryPage, TableError> {
        let hook = self.0.lock().expect("hook").take();
        if let Some(hook) = hook {
            hook.await;
        }
        table.query(query).await
    }
}

#[tokio::test]
async fn a_snapshot_is_as_of_one_commit() {
    let inner = common::embedded();
    let table = common::Hooked::new(Arc::clone(&inner), Interleaved(Mutex::new(None)));
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
    *table.hooks.0.lock().expect("hook") = Some(Box::pin(async move {
        store.append(&path, produce(1)).await.expect("append 1");
    }));
    let snapshot = reader.snapshot(&p).await.expect("snapshot");
    let seq = snapshot
        .producers
        .iter()
        .find(|producer| producer.position.id == "p1")
        .map(|producer| producer.position.seq);
    assert_eq!(
        (snapshot.count, seq),
        (2, Some(1)),
        "count and producers of one commit"
    );
}
