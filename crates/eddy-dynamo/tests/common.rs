//! Shared fixtures: an order stream and an order-summary read model.

use std::sync::Arc;

use eddy_dynamo::{
    make_stream, AppSchema, EmbeddedTable, Entity, EventStream, KeyComposite, TableSchema,
};
use serde::{Deserialize, Serialize};

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

pub fn table() -> EmbeddedTable {
    EmbeddedTable::memory(TableSchema::single_table("shop").with_index(
        "gsi1",
        "gsi1pk",
        Some("gsi1sk"),
    ))
}

pub fn orders(table: &EmbeddedTable) -> EventStream<OrderEvent> {
    make_stream(Arc::new(table.clone()), app(), "Order", &["orderId"]).unwrap()
}

pub fn summaries(table: &EmbeddedTable) -> Entity<OrderSummary> {
    Entity::new(
        Arc::new(table.clone()),
        app(),
        "OrderSummary",
        KeyComposite::new(&["orderId"], &[]),
    )
    .with_index("gsi1", KeyComposite::new(&["customer"], &["orderId"]))
}
