//! Regression (issue 33): a commit whose answer was lost was run again
//! blind. When a `TransactWriteItems` lands but its answer does not reach
//! the store (a timeout, a dropped connection), and a re-send then finds
//! its own write in the way, the store took the failed condition for a
//! lost race and ran the call again: a plain append was written twice, a
//! `Stream-Seq` append answered 409 and a delete 410 although each had
//! succeeded. A table that applies chosen transactions and then answers
//! with an error shows it on the embedded table.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use eddy_dynamo::{Item, Query, Table, TableError};
use eddy_streams::{Append, Payload, ReadFrom, Storage, StreamConfig, StreamError, StreamPath};

use crate::common;

/// What a lossy table answers to the transaction it was told to lose.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// Applied, then answered as a re-send would be: its conditions
    /// failed (the first attempt's write was in the way).
    AppliedThenConditionFailed,
    /// Applied, then answered with a transient error (a timeout).
    AppliedThenUnavailable,
    /// Not applied, and answered with a transient error.
    NotApplied,
}

/// A table that loses the answer of its `lose_at`-th transaction.
struct Lossy {
    table: Arc<dyn Table>,
    transactions: AtomicUsize,
    plan: Mutex<Option<(usize, Loss)>>,
}

impl Lossy {
    fn new(table: Arc<dyn Table>) -> Arc<Self> {
        Arc::new(Lossy {
            table,
            transactions: AtomicUsize::new(0),
            plan: Mutex::new(None),
        })
    }

    /// Loses the answer of the next transaction as `loss` says.
    fn lose_next(&self, loss: Loss) {
        let next = self.transactions.load(Ordering::SeqCst) + 1;
        *self.plan.lock().expect("plan") = Some((next, loss));
    }
}

fn unavailable() -> TableError {
    TableError::Unavailable {
        message: "the request timed out".into(),
        source: None,
    }
}

#[async_trait::async_trait]
impl Table for Lossy {
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
        self.table.query(query).await
    }
    async fn transact_write_items(
        &self,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), TableError> {
        let n = self.transactions.fetch_add(1, Ordering::SeqCst) + 1;
        let loss = match *self.plan.lock().expect("plan") {
            Some((at, loss)) if at == n => Some(loss),
            _ => None,
        };
        match loss {
            None => self.table.transact_write_items(items).await,
            Some(Loss::AppliedThenConditionFailed) => {
                self.table.transact_write_items(items).await?;
                Err(TableError::ConditionalCheckFailed { item: None })
            }
            Some(Loss::AppliedThenUnavailable) => {
                self.table.transact_write_items(items).await?;
                Err(unavailable())
            }
            Some(Loss::NotApplied) => Err(unavailable()),
        }
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

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

async fn messages(store: &dyn Storage, p: &StreamPath) -> Vec<String> {
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

/// A store on a lossy embedded table, with one JSON stream holding one
/// message.
async fn lossy_store() -> (Arc<Lossy>, eddy_streams_dynamodb::DynamoStorage, StreamPath) {
    let table = Lossy::new(common::embedded());
    let store = eddy_streams_dynamodb::open(
        Arc::clone(&table) as Arc<dyn Table>,
        eddy_streams_dynamodb::options(),
    )
    .expect("open");
    let p = path("lossy/log");
    store
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    store
        .append(&p, Append::body(r#"{"n":0}"#))
        .await
        .expect("first append");
    (table, store, p)
}

#[tokio::test]
async fn an_append_whose_answer_was_lost_is_written_once_and_succeeds() {
    for loss in [
        Loss::AppliedThenConditionFailed,
        Loss::AppliedThenUnavailable,
    ] {
        let (table, store, p) = lossy_store().await;
        table.lose_next(loss);
        let appended = store.append(&p, Append::body(r#"{"n":1}"#)).await;
        assert!(appended.is_ok(), "{loss:?}: {appended:?}");
        assert_eq!(
            messages(&store, &p).await,
            [r#"{"n":0}"#, r#"{"n":1}"#],
            "{loss:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_seq_append_whose_answer_was_lost_succeeds() {
    for loss in [
        Loss::AppliedThenConditionFailed,
        Loss::AppliedThenUnavailable,
    ] {
        let (table, store, p) = lossy_store().await;
        table.lose_next(loss);
        let appended = store
            .append(&p, Append::body(r#"{"n":1}"#).with_stream_seq("0001"))
            .await;
        assert!(appended.is_ok(), "{loss:?}: {appended:?}");
        assert_eq!(messages(&store, &p).await.len(), 2, "{loss:?}");
    }
}

#[tokio::test]
async fn a_delete_whose_answer_was_lost_succeeds() {
    for loss in [
        Loss::AppliedThenConditionFailed,
        Loss::AppliedThenUnavailable,
    ] {
        let (table, store, p) = lossy_store().await;
        table.lose_next(loss);
        let deleted = store.delete(&p).await;
        assert!(deleted.is_ok(), "{loss:?}: {deleted:?}");
        assert!(
            matches!(store.head(&p).await, Err(StreamError::Gone { .. })),
            "{loss:?}"
        );
    }
}

/// A transaction that failed before it was applied still fails, having
/// written nothing: the read-back does not mistake it for a success.
#[tokio::test]
async fn a_commit_that_did_not_land_still_fails_and_writes_nothing() {
    let (table, store, p) = lossy_store().await;
    table.lose_next(Loss::NotApplied);
    let appended = store.append(&p, Append::body(r#"{"n":1}"#)).await;
    assert!(
        matches!(&appended, Err(e) if e.is_retryable()),
        "{appended:?}"
    );
    assert_eq!(messages(&store, &p).await, [r#"{"n":0}"#]);
}
