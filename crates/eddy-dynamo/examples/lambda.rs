//! A Lambda function on `lambda_runtime` that folds DynamoDB Streams
//! batches into order summaries and answers with the partial batch
//! response. Build with `--features lambda`.
//!
//! Until the DynamoDB backend lands, the read model is an embedded SQLite
//! table at `EDDY_TABLE_PATH` (default `/tmp/eddy-shop.db`); with it, only
//! the table construction changes.

use std::sync::Arc;

use eddy_dynamo::{
    handle_stream_event, make_stream, AppSchema, BatchProjection, EmbeddedTable, Entity,
    KeyComposite, Projection, StreamEvent, TableSchema,
};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum OrderEvent {
    Placed { customer: String },
    LineAdded { sku: String, qty: u32, cents: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderSummary {
    order_id: String,
    customer: String,
    total_cents: u64,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let path = std::env::var("EDDY_TABLE_PATH").unwrap_or_else(|_| "/tmp/eddy-shop.db".into());
    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(EmbeddedTable::open_sqlite(
        path,
        TableSchema::single_table("shop"),
    )?);
    let app = AppSchema::new("shop", 1);
    let orders = make_stream::<OrderEvent>(Arc::clone(&table), app.clone(), "Order", &["orderId"])?;
    let summaries = Entity::new(
        table,
        app,
        "OrderSummary",
        KeyComposite::new(&["orderId"], &[]),
    );
    let projection = Arc::new(
        Projection::builder("order-summaries", summaries, orders)
            // The row key: the value of its one composite, `orderId`.
            .key(|id, _| id.get("orderId").map(str::to_owned))
            .initial(|order_id: &String| OrderSummary {
                order_id: order_id.clone(),
                customer: String::new(),
                total_cents: 0,
            })
            .evolve(|mut row, event| {
                match &event.event {
                    OrderEvent::Placed { customer } => row.customer = customer.clone(),
                    OrderEvent::LineAdded { qty, cents, .. } => {
                        row.total_cents += u64::from(*qty) * cents
                    }
                }
                Ok(row)
            })
            .checkpoint("version")
            .build()?,
    );
    lambda_runtime::run(service_fn(move |event: LambdaEvent<StreamEvent>| {
        let projection = Arc::clone(&projection);
        async move {
            let projections: [&dyn BatchProjection; 1] = [projection.as_ref()];
            Ok::<_, Error>(handle_stream_event(event.payload, &projections).await)
        }
    }))
    .await
}
