//! The `Table` trait: the seam between the item model and a storage engine.

use async_trait::async_trait;

use crate::accounting::RequestStats;
use crate::error::{CancellationReason, TableError};
use crate::item::Item;
use crate::key_schema::TableSchema;
use crate::query::{Query, QueryPage, Scan};
use crate::request::{Delete, Put, TableWrite, TransactWriteItem, UpdateItem};

/// A DynamoDB table, or something with exactly its semantics.
///
/// The operations follow the DynamoDB API one for one, so the embedded
/// table and `aws-sdk-dynamodb` implement the same trait. Reads are strongly
/// consistent. Four operations are required; single writes and batch get
/// default to the transactional ones.
#[async_trait]
pub trait Table: Send + Sync {
    /// The table's key schema.
    fn schema(&self) -> &TableSchema;

    /// Reads one item by its primary key (`GetItem`, consistent read).
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError>;

    /// Reads several items atomically (`TransactGetItems`), in request order.
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError>;

    /// Queries one partition (`Query`).
    async fn query(&self, query: Query) -> Result<QueryPage, TableError>;

    /// Reads a page of the whole table (`Scan`, consistent read). A table
    /// that cannot keeps this default, which refuses
    /// (`table/misconfigured`).
    async fn scan(&self, scan: Scan) -> Result<QueryPage, TableError> {
        let _ = scan;
        Err(TableError::Misconfigured {
            message: format!("table {} cannot be scanned", self.schema().name),
        })
    }

    /// Writes up to 100 items atomically (`TransactWriteItems`): all apply or
    /// none, failing with one cancellation reason per item.
    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError>;

    /// Writes up to 100 items of this table and of the other tables of its
    /// database atomically (`TransactWriteItems` naming several tables):
    /// all apply or none. A table answers for the tables opened beside it
    /// (`EmbeddedTable::open_table`, `DynamoTable::open_table`); another
    /// name is `table/misconfigured`. By default only this table is known.
    async fn transact_write_tables(&self, items: Vec<TableWrite>) -> Result<(), TableError> {
        let own = &self.schema().name;
        if let Some(other) = items.iter().find(|w| &w.table != own) {
            return Err(TableError::Misconfigured {
                message: format!(
                    "table {own} cannot write table {} in one transaction: open it beside this one",
                    other.table
                ),
            });
        }
        self.transact_write_items(items.into_iter().map(|w| w.item).collect())
            .await
    }

    /// Writes one item (`PutItem`).
    async fn put_item(&self, put: Put) -> Result<(), TableError> {
        single(self.transact_write_items(vec![put.into()]).await)
    }

    /// Updates one item (`UpdateItem`), returning it as written.
    async fn update_item(&self, update: UpdateItem) -> Result<Item, TableError> {
        let key = update.key.clone();
        single(self.transact_write_items(vec![update.into()]).await)?;
        self.get_item(key).await?.ok_or_else(|| {
            TableError::internal("the updated item vanished before it was read back")
        })
    }

    /// Deletes one item (`DeleteItem`).
    async fn delete_item(&self, delete: Delete) -> Result<(), TableError> {
        single(self.transact_write_items(vec![delete.into()]).await)
    }

    /// How many rows a projection batch applies at once when the projection
    /// does not set its own `concurrency`. The default, 16, keeps a DynamoDB
    /// client's connections (and a cold Lambda's TLS handshakes) few while
    /// still overlapping round trips; a table whose concurrent writes are
    /// cheaper together says more.
    fn rows_at_once(&self) -> usize {
        16
    }

    /// The requests this table has served, by kind. A backend that does not
    /// count answers zeros.
    fn request_stats(&self) -> RequestStats {
        RequestStats::default()
    }

    /// Reads several items (`BatchGetItem`); absent items are left out.
    async fn batch_get_item(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(100) {
            found.extend(
                self.transact_get_items(chunk.to_vec())
                    .await?
                    .into_iter()
                    .flatten(),
            );
        }
        Ok(found)
    }

    /// Reads several items as [`batch_get_item`](Self::batch_get_item)
    /// does, but eventually consistent where the table offers it
    /// (DynamoDB: half the read units, and an item may be answered as it
    /// was a moment ago); for callers that look again later anyway, such
    /// as a poll. A table without such reads answers consistently.
    async fn batch_get_item_eventually(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.batch_get_item(keys).await
    }
}

/// Turns the cancellation of a one-item transaction into the error of a
/// single write.
pub(crate) fn single<T>(result: Result<T, TableError>) -> Result<T, TableError> {
    match result {
        Err(TableError::TransactionCanceled { mut reasons }) if reasons.len() == 1 => {
            let reason: CancellationReason = reasons.remove(0);
            Err(TableError::ConditionalCheckFailed {
                item: reason.item.map(Box::new),
            })
        }
        other => other,
    }
}
