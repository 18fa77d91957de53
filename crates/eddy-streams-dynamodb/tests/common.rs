//! The tables the tests run on: the embedded table (memory), and with
//! the `aws` feature a fresh table on moto.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use eddy_dynamo::{EmbeddedTable, Table};

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

/// A fresh embedded table in memory.
pub fn embedded() -> Arc<dyn Table> {
    Arc::new(EmbeddedTable::memory(eddy_streams_dynamodb::layout(
        unique("streams"),
    )))
}

/// A fresh table on moto, or `None` when `EDDY_SKIP_MOTO=1` says to skip
/// moto (without it, a missing `EDDY_DYNAMODB_ENDPOINT` fails the test).
#[cfg(feature = "aws")]
pub async fn moto() -> Option<Arc<dyn Table>> {
    let endpoint = match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if std::env::var("EDDY_SKIP_MOTO").as_deref() == Ok("1") => return None,
        _ => panic!(
            "EDDY_DYNAMODB_ENDPOINT is not set: run `eval \"$(scripts/moto.sh start)\"` first, \
             or set EDDY_SKIP_MOTO=1 to skip the moto tests explicitly"
        ),
    };
    let schema = eddy_streams_dynamodb::layout(unique("streams"));
    let options = moto_options(&endpoint);
    eddy_streams_dynamodb::create_table(&options, &schema.name)
        .await
        .expect("create the table on moto");
    let table = eddy_dynamo::DynamoTable::connect(&options, schema)
        .await
        .expect("connect to moto");
    Some(Arc::new(table))
}

/// Options for moto: its endpoint, a region and test credentials.
#[cfg(feature = "aws")]
pub fn moto_options(endpoint: &str) -> eddy_dynamo::DynamoOptions {
    eddy_dynamo::DynamoOptions::from_env()
        .endpoint(endpoint)
        .region("us-east-1")
        .credentials("testing", "testing")
}

/// The store on `table`, reading the time from `clock`, with the default
/// options otherwise.
pub fn clocked_store(
    table: &Arc<dyn Table>,
    clock: &Arc<eddy_streams::ManualClock>,
) -> eddy_streams_dynamodb::DynamoStorage {
    let options = eddy_streams::backend::RecordOptions {
        clock: clock.clone(),
        ..eddy_streams_dynamodb::options()
    };
    eddy_streams_dynamodb::open(Arc::clone(table), options).expect("open")
}

/// A multi-threaded runtime for one test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// What a test changes of a table's answers: each hook gets the real
/// table and, by default, forwards to it.
#[async_trait::async_trait]
pub trait Hooks: Send + Sync {
    async fn query(
        &self,
        table: &dyn Table,
        query: eddy_dynamo::Query,
    ) -> Result<eddy_dynamo::QueryPage, eddy_dynamo::TableError> {
        table.query(query).await
    }

    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), eddy_dynamo::TableError> {
        table.transact_write_items(items).await
    }

    async fn batch_get_item(
        &self,
        table: &dyn Table,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<eddy_dynamo::Item>, eddy_dynamo::TableError> {
        table.batch_get_item(keys).await
    }
}

/// A table whose queries, transactions and batch reads go through `hooks`
/// (fault injection, counting, interleaving), and every other call
/// straight to `table`.
pub struct Hooked<H> {
    pub table: Arc<dyn Table>,
    pub hooks: H,
}

impl<H: Hooks> Hooked<H> {
    pub fn new(table: Arc<dyn Table>, hooks: H) -> Arc<Self> {
        Arc::new(Hooked { table, hooks })
    }
}

#[async_trait::async_trait]
impl<H: Hooks> Table for Hooked<H> {
    fn schema(&self) -> &eddy_dynamo::TableSchema {
        self.table.schema()
    }
    fn request_stats(&self) -> eddy_dynamo::RequestStats {
        self.table.request_stats()
    }
    fn rows_at_once(&self) -> usize {
        self.table.rows_at_once()
    }
    async fn get_item(
        &self,
        key: eddy_dynamo::Item,
    ) -> Result<Option<eddy_dynamo::Item>, eddy_dynamo::TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(
        &self,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<Option<eddy_dynamo::Item>>, eddy_dynamo::TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(
        &self,
        query: eddy_dynamo::Query,
    ) -> Result<eddy_dynamo::QueryPage, eddy_dynamo::TableError> {
        self.hooks.query(&*self.table, query).await
    }
    async fn transact_write_items(
        &self,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), eddy_dynamo::TableError> {
        self.hooks.transact_write_items(&*self.table, items).await
    }
    async fn transact_write_tables(
        &self,
        items: Vec<eddy_dynamo::TableWrite>,
    ) -> Result<(), eddy_dynamo::TableError> {
        self.table.transact_write_tables(items).await
    }
    async fn put_item(&self, put: eddy_dynamo::Put) -> Result<(), eddy_dynamo::TableError> {
        self.table.put_item(put).await
    }
    async fn update_item(
        &self,
        update: eddy_dynamo::UpdateItem,
    ) -> Result<eddy_dynamo::Item, eddy_dynamo::TableError> {
        self.table.update_item(update).await
    }
    async fn delete_item(
        &self,
        delete: eddy_dynamo::Delete,
    ) -> Result<(), eddy_dynamo::TableError> {
        self.table.delete_item(delete).await
    }
    async fn batch_get_item(
        &self,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<eddy_dynamo::Item>, eddy_dynamo::TableError> {
        self.hooks.batch_get_item(&*self.table, keys).await
    }
    async fn scan(
        &self,
        scan: eddy_dynamo::Scan,
    ) -> Result<eddy_dynamo::QueryPage, eddy_dynamo::TableError> {
        self.table.scan(scan).await
    }
}

/// How many items the partition `pk` holds.
pub async fn items(table: &dyn Table, pk: &str) -> usize {
    let mut query = eddy_dynamo::Query::partition(eddy_dynamo::AttributeValue::S(pk.into()));
    let mut count = 0;
    loop {
        let page = table.query(query.clone()).await.expect("query");
        count += page.items.len();
        match page.last_evaluated_key {
            Some(last) => query = query.start_after(Some(last)),
            None => return count,
        }
    }
}

/// The key of the item `(pk, sk)` of the streams' table.
pub fn key(pk: &str, sk: &str) -> eddy_dynamo::Item {
    eddy_dynamo::Item::from([
        ("pk".to_owned(), eddy_dynamo::AttributeValue::S(pk.into())),
        ("sk".to_owned(), eddy_dynamo::AttributeValue::S(sk.into())),
    ])
}
