//! A Lambda function on `lambda_runtime` that folds DynamoDB Streams
//! batches into order summaries and answers with the partial batch
//! response. Build with `--features aws,lambda`; deployment is described
//! in the repository README ("Deploying the Lambda function").
//!
//! The events and the read model live in the same DynamoDB table, named by
//! `EDDY_TABLE`; everything else comes from the standard AWS environment
//! (`AWS_REGION`, the credential chain, `AWS_ENDPOINT_URL` for a local
//! server). Nothing is kept on the function's disk: a cold start reads the
//! rows' checkpoints from DynamoDB and fills any gap from the event store,
//! and a gap it cannot fill fails its record so Lambda delivers it again.

use std::sync::Arc;

use eddy_dynamo::{
    handle_stream_event, make_stream, AppSchema, BatchProjection, DynamoOptions, DynamoTable,
    Entity, KeyComposite, Projection, StreamEvent, TableSchema,
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
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .without_time() // Lambda stamps every log line.
        .init();
    let name = std::env::var("EDDY_TABLE")
        .map_err(|_| "EDDY_TABLE must name the DynamoDB table of the events and read model")?;
    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(
        DynamoTable::connect(&DynamoOptions::from_env(), TableSchema::single_table(name)).await?,
    );
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
