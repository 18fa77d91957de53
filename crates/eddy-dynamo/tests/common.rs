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

pub type SummaryProjection = eddy_dynamo::Projection<OrderEvent, OrderSummary, serde_json::Value>;

/// Folds orders into summaries. A line with quantity 0 is refused and
/// accepted as terminal; a line before the order is placed fails the row.
pub fn summary_projection(table: &EmbeddedTable, revision: bool) -> SummaryProjection {
    let builder = eddy_dynamo::Projection::builder("summaries", summaries(table), orders(table))
        .key(|id, _| {
            id.get("orderId")
                .map(|o| serde_json::json!({ "orderId": o }))
        })
        .initial(|key| OrderSummary {
            order_id: key["orderId"].as_str().unwrap_or_default().to_owned(),
            customer: String::new(),
            lines: 0,
            total_cents: 0,
            cancelled: false,
        })
        .evolve(|mut row, event| {
            match &event.event {
                OrderEvent::Placed { customer } => row.customer = customer.clone(),
                OrderEvent::LineAdded { qty: 0, .. } => {
                    return Err(eddy_dynamo::EvolveError::new("a line needs a quantity"))
                }
                OrderEvent::LineAdded { .. } if row.customer.is_empty() => {
                    return Err(eddy_dynamo::EvolveError::new(
                        "line before the order was placed",
                    ))
                }
                OrderEvent::LineAdded { qty, cents, .. } => {
                    row.lines += 1;
                    row.total_cents += u64::from(*qty) * cents;
                }
                OrderEvent::Cancelled => row.cancelled = true,
            }
            Ok(row)
        })
        .terminal(|e| e.0.contains("quantity"))
        .checkpoint("version");
    let builder = if revision {
        builder.revision("revision")
    } else {
        builder
    };
    builder.build().unwrap()
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
