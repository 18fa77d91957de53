//! Shared fixtures: an order stream and an order-summary read model, over
//! a [`TestTable`] of any backend, and [`backend_tests!`], which runs one
//! test body on every backend.

use std::sync::Arc;

use async_trait::async_trait;
use eddy_dynamo::{
    make_stream, AppSchema, ChangeFeed, EmbeddedTable, Entity, EventStream, FeedPosition,
    KeyComposite, Table, TableError, TableSchema,
};
use serde::{Deserialize, Serialize};

/// A table and its change feed, on any backend.
#[derive(Clone)]
pub struct TestTable {
    pub table: Arc<dyn Table>,
    pub feed: Arc<dyn ChangeFeed>,
    /// Which backend: `memory`, `sqlite` or `dynamodb`.
    pub backend: &'static str,
    /// The directory of a SQLite table, removed with the last clone.
    _dir: Option<Arc<tempfile::TempDir>>,
}

impl TestTable {
    pub fn new(table: Arc<dyn Table>, feed: Arc<dyn ChangeFeed>, backend: &'static str) -> Self {
        eprintln!("backend: {backend}");
        Self {
            table,
            feed,
            backend,
            _dir: None,
        }
    }

    /// Keeps `dir` (a SQLite file's directory) until the last clone drops.
    pub fn keeping(mut self, dir: tempfile::TempDir) -> Self {
        self._dir = Some(Arc::new(dir));
        self
    }

    /// The same backend with another table in front of it (a fault
    /// wrapper); the change feed stays the backend's.
    pub fn wrapped(&self, table: Arc<dyn Table>) -> Self {
        Self {
            table,
            ..self.clone()
        }
    }
}

impl From<EmbeddedTable> for TestTable {
    fn from(t: EmbeddedTable) -> Self {
        Self::new(Arc::new(t.clone()), Arc::new(t), "embedded")
    }
}

/// Runs each named `async fn case(t: TestTable)` of the enclosing module
/// as a test on the memory table, the SQLite table and, with the `aws`
/// feature, on DynamoDB (moto); the module path of each test names its
/// backend.
#[macro_export]
macro_rules! backend_tests {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::common::table()).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::common::sqlite_table()).await;
                }
            )*
        }
        #[cfg(feature = "aws")]
        mod dynamodb {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(t) = $crate::moto::test_table($crate::common::schema()).await else {
                        return;
                    };
                    super::$case(t).await;
                }
            )*
        }
    };
}

/// Implements [`Table`](eddy_dynamo::Table) for a wrapper type by
/// forwarding every method to its `table` field.
#[macro_export]
macro_rules! forward_table {
    ($wrapper:ty) => {
        #[async_trait::async_trait]
        impl eddy_dynamo::Table for $wrapper {
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
                self.table.query(query).await
            }
            async fn transact_write_items(
                &self,
                items: Vec<eddy_dynamo::TransactWriteItem>,
            ) -> Result<(), eddy_dynamo::TableError> {
                self.table.transact_write_items(items).await
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
                self.table.batch_get_item(keys).await
            }
            async fn scan(
                &self,
                scan: eddy_dynamo::Scan,
            ) -> Result<eddy_dynamo::QueryPage, eddy_dynamo::TableError> {
                self.table.scan(scan).await
            }
        }
    };
}

forward_table!(TestTable);

#[async_trait]
impl ChangeFeed for TestTable {
    async fn read_changes(
        &self,
        after: Option<&FeedPosition>,
        limit: usize,
    ) -> Result<eddy_dynamo::FeedRead, TableError> {
        self.feed.read_changes(after, limit).await
    }
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<FeedPosition>, TableError> {
        self.feed.load_checkpoint(consumer).await
    }
    async fn save_checkpoint(
        &self,
        consumer: &str,
        position: &FeedPosition,
    ) -> Result<(), TableError> {
        self.feed.save_checkpoint(consumer, position).await
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OrderEvent {
    Placed { customer: String },
    LineAdded { sku: String, qty: u32, cents: u64 },
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderSummary {
    pub order_id: String,
    pub customer: String,
    pub lines: u32,
    pub total_cents: u64,
    pub cancelled: bool,
}

pub fn app() -> AppSchema {
    AppSchema::new("shop", 1)
}

pub fn schema() -> TableSchema {
    TableSchema::single_table("shop").with_index("gsi1", "gsi1pk", Some("gsi1sk"))
}

/// A fresh memory table.
pub fn table() -> TestTable {
    let t = EmbeddedTable::memory(schema());
    TestTable::new(Arc::new(t.clone()), Arc::new(t), "memory")
}

/// A fresh SQLite table in a temporary directory.
pub fn sqlite_table() -> TestTable {
    let dir = tempfile::tempdir().unwrap();
    let t = EmbeddedTable::open_sqlite(dir.path().join("shop.db"), schema()).unwrap();
    TestTable {
        _dir: Some(Arc::new(dir)),
        ..TestTable::new(Arc::new(t.clone()), Arc::new(t), "sqlite")
    }
}

pub fn orders(table: &TestTable) -> EventStream<OrderEvent> {
    make_stream(table.table.clone(), app(), "Order", &["orderId"]).unwrap()
}

pub fn summaries(table: &TestTable) -> Entity<OrderSummary> {
    Entity::new(
        table.table.clone(),
        app(),
        "OrderSummary",
        KeyComposite::new(&["orderId"], &[]),
    )
    .with_index("gsi1", KeyComposite::new(&["customer"], &["orderId"]))
}

/// The key of an order summary row: its key composite, typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryKey {
    pub order_id: String,
}

/// The summary row key of an order.
pub fn key(order_id: &str) -> SummaryKey {
    SummaryKey {
        order_id: order_id.to_owned(),
    }
}

/// Why an order event does not fold.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("a line needs a quantity")]
    NoQuantity,
    #[error("line before the order was placed")]
    NotPlaced,
}

pub type SummaryProjection = eddy_dynamo::Projection<OrderEvent, OrderSummary, SummaryKey>;

/// The one instance of a single-source row's outcome.
pub trait Only {
    fn only(&self) -> &eddy_dynamo::InstanceOutcome;
}

impl<M> Only for eddy_dynamo::RowOutcome<M> {
    fn only(&self) -> &eddy_dynamo::InstanceOutcome {
        assert_eq!(self.instances.len(), 1, "one instance feeds this row");
        &self.instances[0]
    }
}

/// The summary of an order before its first event.
pub fn empty_summary(key: &SummaryKey) -> OrderSummary {
    OrderSummary {
        order_id: key.order_id.clone(),
        customer: String::new(),
        lines: 0,
        total_cents: 0,
        cancelled: false,
    }
}

/// Folds orders into summaries. A line with quantity 0 is refused and
/// accepted as terminal; a line before the order is placed fails the row.
pub fn summary_projection(table: &TestTable, revision: bool) -> SummaryProjection {
    let builder = eddy_dynamo::Projection::builder("summaries", summaries(table), orders(table))
        .key(|id, _| id.get("orderId").map(key))
        .initial(empty_summary)
        .evolve(|mut row, event| {
            match &event.event {
                OrderEvent::Placed { customer } => row.customer = customer.clone(),
                OrderEvent::LineAdded { qty: 0, .. } => return Err(OrderError::NoQuantity.into()),
                OrderEvent::LineAdded { .. } if row.customer.is_empty() => {
                    return Err(OrderError::NotPlaced.into())
                }
                OrderEvent::LineAdded { qty, cents, .. } => {
                    row.lines += 1;
                    row.total_cents += u64::from(*qty) * cents;
                }
                OrderEvent::Cancelled => row.cancelled = true,
            }
            Ok(row)
        })
        .terminal(|e: &OrderError| matches!(e, OrderError::NoQuantity))
        .checkpoint("version");
    let builder = if revision {
        builder.revision("revision")
    } else {
        builder
    };
    builder.build().unwrap()
}

/// The summary row of `order_id`, which must exist.
pub async fn summary_of(table: &TestTable, order_id: &str) -> OrderSummary {
    summaries(table).get(&key(order_id)).await.unwrap().unwrap()
}

/// Appends to order `order_id`: placed by ann, one line of 10 cents.
pub async fn place_order(table: &TestTable, order_id: &str) {
    let stream = orders(table);
    let id = stream.id([("orderId", order_id)]).unwrap();
    stream
        .append(&id, &[placed("ann"), line(1, 10)], 0)
        .await
        .unwrap();
}

pub fn placed(customer: &str) -> OrderEvent {
    OrderEvent::Placed {
        customer: customer.into(),
    }
}

pub fn line(qty: u32, cents: u64) -> OrderEvent {
    OrderEvent::LineAdded {
        sku: "sku".into(),
        qty,
        cents,
    }
}
