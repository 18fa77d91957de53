//! The embedded table: DynamoDB semantics on memory or SQLite, with its own
//! ordered change feed.

mod engine;
mod memory;
mod records;
mod sqlite;
mod store;

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::Utc;
use tokio::sync::Notify;

use self::store::Store;
use crate::accounting::{RequestCounter, RequestStats};
use crate::change_feed::{ChangeFeed, ChangeRecord};
use crate::error::TableError;
use crate::item::Item;
use crate::key_schema::TableSchema;
use crate::query::{Query, QueryPage};
use crate::request::TransactWriteItem;
use crate::table::Table;

#[cfg_attr(not(feature = "aws"), allow(unused_imports))]
pub(crate) use engine::{validate_query, validate_transaction};
pub(crate) use records::parse_sequence;

/// The encoded primary key of an item or key, for telling keys apart.
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
pub(crate) fn encode_key_of(schema: &TableSchema, key: &Item) -> Option<(String, String)> {
    engine::encode_key(&schema.key, key)
}

/// A table with DynamoDB's semantics, stored in memory or in a SQLite file,
/// that records every change in an ordered feed.
///
/// Cheap to clone: clones share the same table. Blocking storage calls run on
/// tokio's blocking pool, one at a time.
#[derive(Clone)]
pub struct EmbeddedTable {
    schema: Arc<TableSchema>,
    store: Arc<Mutex<Box<dyn Store>>>,
    changed: Arc<Notify>,
    requests: RequestCounter,
}

impl std::fmt::Debug for EmbeddedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedTable")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl EmbeddedTable {
    /// A table in memory, empty, lost when the last clone is dropped.
    pub fn memory(schema: TableSchema) -> Self {
        Self::with_store(schema, Box::new(memory::MemoryStore::default()))
    }

    /// Opens the table stored in the SQLite file at `path`, creating it when
    /// absent. A file created with another schema is refused.
    pub fn open_sqlite(path: impl AsRef<Path>, schema: TableSchema) -> Result<Self, TableError> {
        let store = sqlite::SqliteStore::open(path.as_ref(), &schema)?;
        Ok(Self::with_store(schema, Box::new(store)))
    }

    fn with_store(schema: TableSchema, store: Box<dyn Store>) -> Self {
        Self {
            schema: Arc::new(schema),
            store: Arc::new(Mutex::new(store)),
            changed: Arc::new(Notify::new()),
            requests: RequestCounter::default(),
        }
    }

    /// Deletes every item whose TTL attribute (epoch seconds) is at or before
    /// `now_secs`, as DynamoDB's TTL process does, and returns how many. Their
    /// REMOVE records name the DynamoDB service as the user identity. Until
    /// this runs, expired items are still read, as on DynamoDB.
    pub async fn expire_items(&self, now_secs: u64) -> Result<usize, TableError> {
        let count = self
            .run(move |store, schema| engine::expire(store, schema, now_secs, Utc::now()))
            .await?;
        if count > 0 {
            self.changed.notify_waiters();
        }
        Ok(count)
    }

    /// Resolves at the next commit that records a change.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Counts a write the engine refused for its condition: DynamoDB bills
    /// those too. A request that failed validation never reached a table
    /// and is not counted.
    fn count_refused(&self, error: &TableError, count: impl FnOnce(&RequestCounter)) {
        if error.is_condition_failure() {
            count(&self.requests);
        }
    }

    /// A single write (`PutItem` / `DeleteItem`), counted as one.
    async fn write_one(&self, item: TransactWriteItem) -> Result<(), TableError> {
        let records = self
            .run(move |store, schema| {
                crate::table::single(engine::transact(store, schema, vec![item], Utc::now()))
            })
            .await
            .inspect_err(|e| self.count_refused(e, RequestCounter::write))?;
        self.requests.write();
        if !records.is_empty() {
            self.changed.notify_waiters();
        }
        Ok(())
    }

    async fn run<T, F>(&self, f: F) -> Result<T, TableError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Store, &TableSchema) -> Result<T, TableError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        let schema = Arc::clone(&self.schema);
        tokio::task::spawn_blocking(move || {
            let mut guard = store.lock().map_err(|_| {
                TableError::internal("the table is poisoned by an earlier panic; reopen it")
            })?;
            f(guard.as_mut(), &schema)
        })
        .await
        .map_err(|e| TableError::internal_from("the storage task failed", e))?
    }
}

#[async_trait]
impl Table for EmbeddedTable {
    fn schema(&self) -> &TableSchema {
        &self.schema
    }

    fn request_stats(&self) -> RequestStats {
        self.requests.snapshot()
    }

    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        let item = self
            .run(move |store, schema| {
                schema.validate_key(&key)?;
                let (pk, sk) = engine::encode_key(&schema.key, &key)
                    .ok_or_else(|| TableError::internal("validated key did not encode"))?;
                store.get(&pk, &sk)
            })
            .await?;
        self.requests.read(usize::from(item.is_some()));
        Ok(item)
    }

    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        if keys.len() > engine::MAX_TRANSACTION_ITEMS {
            return Err(crate::error::ValidationError::TooManyItems { count: keys.len() }.into());
        }
        let items: Vec<Option<Item>> = self
            .run(move |store, schema| {
                keys.iter()
                    .map(|key| {
                        schema.validate_key(key)?;
                        let (pk, sk) = engine::encode_key(&schema.key, key)
                            .ok_or_else(|| TableError::internal("validated key did not encode"))?;
                        store.get(&pk, &sk)
                    })
                    .collect()
            })
            .await?;
        self.requests
            .transact_read(items.iter().filter(|i| i.is_some()).count());
        Ok(items)
    }

    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        let page = self
            .run(move |store, schema| engine::query(store, schema, &query))
            .await?;
        self.requests.read(page.items.len());
        Ok(page)
    }

    async fn put_item(&self, put: crate::request::Put) -> Result<(), TableError> {
        self.write_one(put.into()).await
    }

    async fn delete_item(&self, delete: crate::request::Delete) -> Result<(), TableError> {
        self.write_one(delete.into()).await
    }

    async fn update_item(&self, update: crate::request::UpdateItem) -> Result<Item, TableError> {
        // Write and read back in one transaction, so the answer is what was written.
        let (records, item) = self
            .run(move |store, schema| engine::update(store, schema, update.into(), Utc::now()))
            .await
            .inspect_err(|e| self.count_refused(e, RequestCounter::write))?;
        self.requests.write();
        if !records.is_empty() {
            self.changed.notify_waiters();
        }
        Ok(item)
    }

    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        let count = items.len();
        let records = self
            .run(move |store, schema| engine::transact(store, schema, items, Utc::now()))
            .await
            .inspect_err(|e| self.count_refused(e, |r| r.transact_write(count)))?;
        self.requests.transact_write(count);
        if !records.is_empty() {
            self.changed.notify_waiters();
        }
        Ok(())
    }
}

#[async_trait]
impl ChangeFeed for EmbeddedTable {
    async fn read_changes(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError> {
        let after = match after {
            None => 0,
            Some(text) => parse_sequence(&text).ok_or_else(|| {
                TableError::Validation(crate::error::ValidationError::InvalidQuery(format!(
                    "{text} is not a sequence number of this feed"
                )))
            })?,
        };
        self.run(move |store, _| store.changes_after(after, limit))
            .await
    }

    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError> {
        let consumer = consumer.to_owned();
        self.run(move |store, _| store.load_checkpoint(&consumer))
            .await
    }

    async fn save_checkpoint(&self, consumer: &str, sequence: &str) -> Result<(), TableError> {
        let (consumer, sequence) = (consumer.to_owned(), sequence.to_owned());
        self.run(move |store, _| store.save_checkpoint(&consumer, &sequence))
            .await
    }
}
