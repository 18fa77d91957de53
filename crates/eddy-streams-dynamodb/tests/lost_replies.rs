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

use eddy_dynamo::{Table, TableError};
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

/// Loses the answer of a chosen transaction.
struct Lossy {
    transactions: AtomicUsize,
    plan: Mutex<Option<(usize, Loss)>>,
}

impl Lossy {
    fn new() -> Self {
        Lossy {
            transactions: AtomicUsize::new(0),
            plan: Mutex::new(None),
        }
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
impl common::Hooks for Lossy {
    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), TableError> {
        let n = self.transactions.fetch_add(1, Ordering::SeqCst) + 1;
        let loss = match *self.plan.lock().expect("plan") {
            Some((at, loss)) if at == n => Some(loss),
            _ => None,
        };
        match loss {
            None => table.transact_write_items(items).await,
            Some(Loss::AppliedThenConditionFailed) => {
                table.transact_write_items(items).await?;
                Err(TableError::ConditionalCheckFailed { item: None })
            }
            Some(Loss::AppliedThenUnavailable) => {
                table.transact_write_items(items).await?;
                Err(unavailable())
            }
            Some(Loss::NotApplied) => Err(unavailable()),
        }
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
async fn lossy_store() -> (
    Arc<common::Hooked<Lossy>>,
    eddy_streams_dynamodb::DynamoStorage,
    StreamPath,
) {
    let table = common::Hooked::new(common::embedded(), Lossy::new());
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
        table.hooks.lose_next(loss);
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
        table.hooks.lose_next(loss);
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
        table.hooks.lose_next(loss);
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
    table.hooks.lose_next(Loss::NotApplied);
    let appended = store.append(&p, Append::body(r#"{"n":1}"#)).await;
    assert!(
        matches!(&appended, Err(e) if e.is_retryable()),
        "{appended:?}"
    );
    assert_eq!(messages(&store, &p).await, [r#"{"n":0}"#]);
}
