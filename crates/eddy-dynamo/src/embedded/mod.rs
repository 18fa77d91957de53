//! The embedded table: DynamoDB semantics on memory or SQLite, with its own
//! ordered change feed.

mod engine;
mod expiry;
mod feed;
mod keys;
mod memory;
mod query;
mod records;
mod sqlite;
mod store;
mod tables;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use self::engine::{WriteClock, Writes};
use self::store::{in_write, Store};
use crate::accounting::{RequestCounter, RequestStats};
use crate::change_feed::{ChangeFeed, ChangeRecord, FeedRead};
use crate::error::{TableError, ValidationError};
use crate::feed_position::FeedPosition;
use crate::item::Item;
use crate::key_schema::TableSchema;
use crate::query::{Query, QueryPage};
use crate::request::{TableWrite, TransactWriteItem};
use crate::table::Table;

pub(crate) use keys::encode_value;
use records::parse_sequence;
pub(crate) use tables::{Namespace, TableRef};
#[cfg_attr(not(feature = "aws"), allow(unused_imports))]
pub(crate) use {
    engine::{validate_transaction, validate_writes},
    query::validate_query,
};

/// The encoded primary key of an item or key, for telling keys apart.
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
pub(crate) fn encode_key_of(schema: &TableSchema, key: &Item) -> Option<(String, String)> {
    keys::encode_key(&schema.key, key)
}

/// How long the change log keeps a record that a registered follower still
/// needs, by default: DynamoDB Streams' 24 hours.
pub const DEFAULT_FEED_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// A table with DynamoDB's semantics, stored in memory or in a SQLite file,
/// that records every change in an ordered feed.
///
/// Cheap to clone: clones share the same table. On SQLite, writes go to
/// one writer thread that commits everything queued in one transaction
/// (group commit); reads run on tokio's blocking pool.
///
/// The change log is bounded: a record is trimmed once every follower that
/// saved a checkpoint has passed it, and at the latest after the retention
/// window ([`DEFAULT_FEED_RETENTION`], see
/// [`with_feed_retention`](Self::with_feed_retention)). Reading after a
/// trimmed position is `history-unavailable`.
///
/// One database (one memory store, one SQLite file) can hold several
/// tables ([`open_table`](Self::open_table)), and one transaction can write
/// them all ([`Table::transact_write_tables`]). Only the table the database
/// was opened with has a change feed.
#[derive(Clone)]
pub struct EmbeddedTable {
    table: TableRef,
    /// Every table of the database opened so far, by name.
    tables: Arc<Mutex<HashMap<String, TableRef>>>,
    store: Arc<dyn Store>,
    changed: Arc<Notify>,
    requests: RequestCounter,
    retention: Duration,
}

impl std::fmt::Debug for EmbeddedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedTable")
            .field("schema", &self.table.schema)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl EmbeddedTable {
    /// A table in memory, empty, lost when the last clone is dropped.
    pub fn memory(schema: TableSchema) -> Self {
        Self::with_store(schema, Arc::new(memory::MemoryStore::default()))
    }

    /// Opens the table stored in the SQLite file at `path`, creating it when
    /// absent. A file written by an older build is upgraded to this build's
    /// layout; indexes the schema adds are created and backfilled from the
    /// stored items, and indexes it drops are removed. A file holding a
    /// table with another name or key is refused (`table/misconfigured`).
    pub fn open_sqlite(path: impl AsRef<Path>, schema: TableSchema) -> Result<Self, TableError> {
        let store = sqlite::SqliteStore::open(path.as_ref(), &schema)?;
        Ok(Self::with_store(schema, Arc::new(store)))
    }

    fn with_store(schema: TableSchema, store: Arc<dyn Store>) -> Self {
        let table = TableRef {
            schema: Arc::new(schema),
            ns: Namespace::default(),
        };
        let tables = HashMap::from([(table.schema.name.clone(), table.clone())]);
        Self {
            table,
            tables: Arc::new(Mutex::new(tables)),
            store,
            changed: Arc::new(Notify::new()),
            requests: RequestCounter::default(),
            retention: DEFAULT_FEED_RETENTION,
        }
    }

    /// Another table in this table's database (the same memory store or
    /// SQLite file), created when absent: a transaction sent to either
    /// handle may write both ([`Table::transact_write_tables`]). Its changes
    /// are not logged (the database's change feed is this table's). The
    /// schema it was first opened with is kept; another one later is
    /// refused (`table/misconfigured`): its indexes would lack the items
    /// written before.
    pub async fn open_table(&self, schema: TableSchema) -> Result<EmbeddedTable, TableError> {
        if schema.name == self.table.schema.name {
            return Err(TableError::Misconfigured {
                message: format!(
                    "table {} is already this database's first table",
                    schema.name
                ),
            });
        }
        let ns = Namespace::other(&schema.name)?;
        let text = serde_json::to_string(&schema)
            .map_err(|e| TableError::internal_from("encoding a table schema", e))?;
        let name = schema.name.clone();
        in_write(self.store.as_ref(), move |txn| match txn.table_schema(&name)? {
            None => txn.save_table_schema(&name, &text),
            Some(stored) if stored == text => Ok(()),
            Some(stored) => Err(TableError::Misconfigured {
                message: format!(
                    "table {name} of this database has the schema {stored}; open it with that schema"
                ),
            }),
        })
        .await?;
        let table = TableRef {
            schema: Arc::new(schema),
            ns,
        };
        self.lock_tables()?
            .insert(table.schema.name.clone(), table.clone());
        Ok(Self {
            table,
            ..self.clone()
        })
    }

    fn lock_tables(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<String, TableRef>>, TableError> {
        self.tables
            .lock()
            .map_err(|_| TableError::internal("the table list is poisoned by an earlier panic"))
    }

    /// Keeps change records at most this long (the records no follower
    /// needs any more go sooner).
    pub fn with_feed_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    fn clock(&self, now: DateTime<Utc>) -> WriteClock {
        WriteClock {
            now,
            retention: self.retention,
        }
    }

    /// Deletes every item whose TTL attribute (epoch seconds) is at or before
    /// `now_secs`, as DynamoDB's TTL process does, and returns how many. Their
    /// REMOVE records name the DynamoDB service as the user identity. Until
    /// this runs, expired items are still read, as on DynamoDB. It sweeps
    /// in steps of a few hundred items, each its own write transaction, so
    /// writers are not held for the whole sweep.
    pub async fn expire_items(&self, now_secs: u64) -> Result<usize, TableError> {
        let clock = self.clock(Utc::now());
        let count =
            expiry::expire(self.store.as_ref(), self.table.clone(), now_secs, clock).await?;
        if count > 0 {
            self.changed.notify_waiters();
        }
        Ok(count)
    }

    /// Trims the change log as of `now`: the records every follower with a
    /// checkpoint has passed, and those older than the retention window.
    /// Commits and checkpoint saves also trim; this is for a table that is
    /// neither written nor followed for a while.
    pub async fn trim_changes(&self, now: DateTime<Utc>) -> Result<(), TableError> {
        let clock = self.clock(now);
        in_write(self.store.as_ref(), move |txn| {
            feed::trim_by_consumers(txn)?;
            feed::trim_by_age(txn, clock)
        })
        .await
    }

    /// Resolves at the next commit of this handle that records a change.
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

    /// Wakes `changed()` waiters when a commit recorded changes.
    fn notify(&self, records: usize) {
        if records > 0 {
            self.changed.notify_waiters();
        }
    }

    /// A single write (`PutItem` / `DeleteItem`), counted as one.
    async fn write_one(&self, item: TransactWriteItem) -> Result<(), TableError> {
        let clock = self.clock(Utc::now());
        let writes = vec![(self.table.clone(), item)];
        let written = engine::transact(self.store.as_ref(), writes, clock).await;
        let records = crate::table::single(written)
            .inspect_err(|e| self.count_refused(e, RequestCounter::write))?;
        self.requests.write();
        self.notify(records);
        Ok(())
    }

    /// A transaction, counted as one.
    async fn transact(&self, writes: Writes) -> Result<(), TableError> {
        let count = writes.len();
        let clock = self.clock(Utc::now());
        let records = engine::transact(self.store.as_ref(), writes, clock)
            .await
            .inspect_err(|e| self.count_refused(e, |r| r.transact_write(count)))?;
        self.requests.transact_write(count);
        self.notify(records);
        Ok(())
    }

    /// Runs a read on the store: on the blocking pool when it does I/O.
    async fn read<T, F>(&self, read: F) -> Result<T, TableError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store, &TableRef) -> Result<T, TableError> + Send + 'static,
    {
        if !self.store.blocking() {
            return read(self.store.as_ref(), &self.table);
        }
        let store = Arc::clone(&self.store);
        let table = self.table.clone();
        tokio::task::spawn_blocking(move || read(store.as_ref(), &table))
            .await
            .map_err(|e| TableError::internal_from("the storage task failed", e))?
    }
}

/// The stored key of a (validated) key.
fn encoded(table: &TableRef, key: &Item) -> Result<(String, String), TableError> {
    table.schema.validate_key(key)?;
    table
        .encode_key(key)
        .ok_or_else(|| TableError::internal("a validated key did not encode"))
}

#[async_trait]
impl Table for EmbeddedTable {
    fn schema(&self) -> &TableSchema {
        &self.table.schema
    }

    fn request_stats(&self) -> RequestStats {
        self.requests.snapshot()
    }

    /// The whole batch, up to the most writes one SQLite commit groups: on
    /// SQLite the rows' writes queued together share the writer's group
    /// commits (fewer fsyncs; more rows than one commit takes would only
    /// hold blocking threads waiting for a read connection), and there are
    /// no connections to spare.
    fn rows_at_once(&self) -> usize {
        sqlite::GROUP
    }

    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        let (pk, sk) = encoded(&self.table, &key)?;
        let item = self.read(move |store, _| store.get(&pk, &sk)).await?;
        self.requests.read(usize::from(item.is_some()));
        Ok(item)
    }

    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        if keys.len() > engine::MAX_TRANSACTION_ITEMS {
            return Err(ValidationError::TooManyItems { count: keys.len() }.into());
        }
        let keys = keys
            .iter()
            .map(|key| encoded(&self.table, key))
            .collect::<Result<Vec<_>, _>>()?;
        let items = self.read(move |store, _| store.get_many(&keys)).await?;
        self.requests
            .transact_read(items.iter().filter(|i| i.is_some()).count());
        Ok(items)
    }

    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        let page = self
            .read(move |store, table| query::run(store, table, &query))
            .await?;
        self.requests.read(page.items.len());
        Ok(page)
    }

    async fn scan(&self, scan: crate::query::Scan) -> Result<QueryPage, TableError> {
        let page = self
            .read(move |store, table| query::scan(store, table, &scan))
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
        // Written and read back in one transaction: the answer is what was written.
        let clock = self.clock(Utc::now());
        let (records, item) = engine::update(
            self.store.as_ref(),
            self.table.clone(),
            update.into(),
            clock,
        )
        .await
        .inspect_err(|e| self.count_refused(e, RequestCounter::write))?;
        self.requests.write();
        self.notify(records);
        Ok(item)
    }

    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        let writes = items.into_iter().map(|i| (self.table.clone(), i)).collect();
        self.transact(writes).await
    }

    async fn transact_write_tables(&self, items: Vec<TableWrite>) -> Result<(), TableError> {
        let writes = {
            let tables = self.lock_tables()?;
            items
                .into_iter()
                .map(|w| match tables.get(&w.table) {
                    Some(table) => Ok((table.clone(), w.item)),
                    None => Err(TableError::Misconfigured {
                        message: format!(
                            "table {} is not open in this database: open it with open_table",
                            w.table
                        ),
                    }),
                })
                .collect::<Result<Writes, _>>()?
        };
        self.transact(writes).await
    }
}

/// The position after a record of this table's log.
fn position_after(record: &ChangeRecord) -> Result<FeedPosition, TableError> {
    record
        .change
        .sequence_number
        .as_deref()
        .and_then(parse_sequence)
        .map(FeedPosition::embedded)
        .ok_or_else(|| TableError::internal("a change record of the log has no sequence number"))
}

#[async_trait]
impl ChangeFeed for EmbeddedTable {
    /// Records of the log after `after` (an embedded position, or an older
    /// eddy's sequence number upgraded: the log's order is its sequence
    /// numbers').
    async fn read_changes(
        &self,
        after: Option<&FeedPosition>,
        limit: usize,
    ) -> Result<FeedRead, TableError> {
        let after = after.map(FeedPosition::embedded_after).transpose()?;
        let records = self
            .read(move |store, _| store.changes_after(after, limit))
            .await?;
        let mut read = FeedRead::default();
        for record in records {
            let position = position_after(&record)?;
            read.push(record, position);
        }
        Ok(read)
    }

    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<FeedPosition>, TableError> {
        let consumer = consumer.to_owned();
        let seq = self
            .read(move |store, _| store.load_checkpoint(&consumer))
            .await?;
        Ok(seq.map(FeedPosition::embedded))
    }

    /// Saves the checkpoint and trims what every follower has now passed.
    async fn save_checkpoint(
        &self,
        consumer: &str,
        position: &FeedPosition,
    ) -> Result<(), TableError> {
        let seq = position.embedded_after()?;
        let (consumer, clock) = (consumer.to_owned(), self.clock(Utc::now()));
        in_write(self.store.as_ref(), move |txn| {
            txn.save_checkpoint(&consumer, seq)?;
            feed::trim_by_consumers(txn)?;
            feed::trim_by_age(txn, clock)
        })
        .await
    }
}
