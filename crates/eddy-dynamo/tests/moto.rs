//! The same suites on DynamoDB, through `aws-sdk-dynamodb` against moto's
//! local server (`scripts/moto.sh start` exports `EDDY_DYNAMODB_ENDPOINT`).
//!
//! Without that variable these tests fail, unless `EDDY_SKIP_MOTO=1` says
//! to skip them. Every test makes its own table (a unique name), so tests
//! run in parallel without resetting the server. moto's known differences
//! from DynamoDB are handled here, never in the library:
//!
//! - a write that changes nothing still emits a MODIFY record: the feed
//!   adapter drops MODIFY records whose old and new images are equal (which
//!   DynamoDB never emits);
//! - TTL never expires items: no test waits for expiry on moto;
//! - items over 405 000 bytes are refused (DynamoDB's limit is 409 600);
//! - every stream has the same shard id and sequence numbers start at the
//!   same value for each table: each test reads only its own table's stream.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use eddy_dynamo::{
    ChangeFeed, ChangeRecord, Delete, DynamoOptions, DynamoStreams, DynamoTable, Item, Put, Query,
    QueryPage, RequestStats, Table, TableError, TableSchema, TransactWriteItem, UpdateItem,
};

/// The moto endpoint, or `None` when skipping was asked for explicitly.
pub fn endpoint() -> Option<String> {
    match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        Ok(url) if !url.trim().is_empty() => {
            eprintln!("backend: dynamodb (moto at {url})");
            Some(url)
        }
        _ if std::env::var("EDDY_SKIP_MOTO").as_deref() == Ok("1") => {
            eprintln!("backend: dynamodb SKIPPED (EDDY_SKIP_MOTO=1)");
            None
        }
        _ => panic!(
            "EDDY_DYNAMODB_ENDPOINT is not set, so the DynamoDB backend cannot be tested: \
             run `eval \"$(scripts/moto.sh start)\"` first, or set EDDY_SKIP_MOTO=1 to skip it explicitly"
        ),
    }
}

/// Options for moto: its endpoint, a region and test credentials.
pub fn options(endpoint: &str) -> DynamoOptions {
    DynamoOptions::from_env()
        .endpoint(endpoint)
        .region("us-east-1")
        .credentials("testing", "testing")
}

/// A table name no other test uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// A DynamoDB table on moto with its stream as the change feed.
pub struct MotoTable {
    pub table: DynamoTable,
    pub streams: DynamoStreams,
}

impl MotoTable {
    /// Creates a fresh table with `schema`'s layout under a unique name.
    pub async fn create(schema: TableSchema) -> Option<Arc<MotoTable>> {
        let endpoint = endpoint()?;
        let mut schema = schema;
        schema.name = unique(&schema.name);
        let options = options(&endpoint);
        let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await.unwrap());
        eddy_dynamo::create_table(&client, &schema).await.unwrap();
        let table = DynamoTable::connect(&options, schema).await.unwrap();
        let streams = DynamoStreams::connect(&options, &table).await.unwrap();
        let streams = streams.with_checkpoints(Arc::new(table.clone()));
        Some(Arc::new(MotoTable { table, streams }))
    }
}

/// A fresh DynamoDB table on moto as a [`TestTable`](crate::common::TestTable).
pub async fn test_table(schema: TableSchema) -> Option<crate::common::TestTable> {
    let moto = MotoTable::create(schema).await?;
    Some(crate::common::TestTable::new(
        moto.clone(),
        moto,
        "dynamodb",
    ))
}

/// Whether a record is one of moto's no-op MODIFY records.
fn moto_noop(record: &ChangeRecord) -> bool {
    record.event_name == "MODIFY"
        && eddy_dynamo::items_equal(&record.change.old_image, &record.change.new_image)
}

#[async_trait]
impl Table for MotoTable {
    fn schema(&self) -> &TableSchema {
        self.table.schema()
    }
    fn request_stats(&self) -> RequestStats {
        self.table.request_stats()
    }
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        self.table.query(query).await
    }
    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        self.table.transact_write_items(items).await
    }
    async fn put_item(&self, put: Put) -> Result<(), TableError> {
        self.table.put_item(put).await
    }
    async fn update_item(&self, update: UpdateItem) -> Result<Item, TableError> {
        self.table.update_item(update).await
    }
    async fn delete_item(&self, delete: Delete) -> Result<(), TableError> {
        self.table.delete_item(delete).await
    }
    async fn batch_get_item(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.table.batch_get_item(keys).await
    }
}

#[async_trait]
impl ChangeFeed for MotoTable {
    async fn read_changes(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError> {
        let mut records = self.streams.read_changes(after, usize::MAX).await?;
        records.retain(|r| !moto_noop(r));
        records.truncate(limit);
        Ok(records)
    }
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError> {
        self.streams.load_checkpoint(consumer).await
    }
    async fn save_checkpoint(&self, consumer: &str, sequence: &str) -> Result<(), TableError> {
        self.streams.save_checkpoint(consumer, sequence).await
    }
}

/// Makes a moto table for a contract case, or returns from the test when
/// skipping was asked for.
macro_rules! moto_table {
    ($schema:expr) => {
        match $crate::moto::MotoTable::create($schema).await {
            Some(table) => table,
            None => return,
        }
    };
}

mod contract {
    crate::contract_tests!(
        moto_table!(crate::contract::schema()),
        put_get_round_trips_every_type,
        conditional_put_fails_and_returns_the_item,
        condition_tree_is_evaluated,
        update_sets_removes_and_adds,
        conditional_delete,
        transaction_is_all_or_nothing_with_reasons,
        transaction_holds_at_most_100_items,
        transaction_refuses_two_operations_on_one_item,
        keys_are_validated,
        index_membership_is_sparse,
        query_sort_conditions_direction_and_paging,
        batch_and_transactional_get,
        change_feed_records_real_changes_in_order,
    );

    /// moto refuses items over 405 000 bytes (DynamoDB: 409 600), so the
    /// largest item stored here is a little smaller; anything over 400 KB
    /// is still refused by the library before it is sent.
    #[tokio::test]
    async fn items_over_400_kb_are_refused() {
        let table = moto_table!(crate::contract::schema());
        crate::contract::items_over_the_limit_are_refused(&*table, 400_000).await;
    }
}
