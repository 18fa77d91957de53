//! An order stream folded into an order-summary read model on the embedded
//! SQLite table, driven by one batch of its change feed. One order has a
//! line before it was placed: a poison event that fails its row, so the
//! partial batch response names its record.
//!
//! Run with `cargo run -p eddy-dynamo --example order_summary [path.db]`,
//! or on DynamoDB (a fresh table with a unique name, read back through
//! DynamoDB Streams) with `cargo run -p eddy-dynamo --features aws --example
//! order_summary -- --dynamodb-endpoint URL` (or `AWS_ENDPOINT_URL` set);
//! credentials and region come from the AWS environment.

use std::sync::Arc;

use eddy_dynamo::{
    make_stream, process_batch, AppSchema, BatchProjection, BatchResult, ChangeFeed, EmbeddedTable,
    Entity, KeyComposite, Projection, TableSchema,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum OrderEvent {
    Placed { customer: String },
    LineAdded { sku: String, qty: u32, cents: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderSummary {
    order_id: String,
    customer: String,
    lines: u32,
    total_cents: u64,
}

/// The key of a summary row: its key composite, typed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct SummaryKey {
    order_id: String,
}

impl SummaryKey {
    fn of(order_id: &str) -> Self {
        Self {
            order_id: order_id.to_owned(),
        }
    }
}

/// Why an event does not fold.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("a line arrived before the order was placed")]
    NotPlaced,
}

/// What the example prints.
struct Report {
    rows: Vec<OrderSummary>,
    batch: BatchResult,
    poison_sequence: Option<String>,
}

/// Where the example runs.
enum Target {
    /// The embedded table in this SQLite file.
    Sqlite(std::path::PathBuf),
    /// DynamoDB with these options.
    #[cfg(feature = "aws")]
    Dynamo(eddy_dynamo::DynamoOptions),
}

/// Opens the table and its change feed.
async fn open(
    target: &Target,
) -> anyhow::Result<(Arc<dyn eddy_dynamo::Table>, Arc<dyn ChangeFeed>)> {
    match target {
        Target::Sqlite(path) => {
            let table = EmbeddedTable::open_sqlite(path, TableSchema::single_table("shop"))?;
            Ok((Arc::new(table.clone()), Arc::new(table)))
        }
        #[cfg(feature = "aws")]
        Target::Dynamo(options) => {
            let name = format!("shop-example-{:08x}", fastrand::u32(..));
            let schema = TableSchema::single_table(name);
            let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await?);
            eddy_dynamo::create_table(&client, &schema).await?;
            let table = eddy_dynamo::DynamoTable::connect(options, schema).await?;
            let feed = eddy_dynamo::DynamoStreams::connect(options, &table).await?;
            println!(
                "table {} on DynamoDB",
                eddy_dynamo::Table::schema(&table).name
            );
            Ok((Arc::new(table), Arc::new(feed)))
        }
    }
}

async fn run(target: &Target) -> anyhow::Result<Report> {
    let (shared, table) = open(target).await?;
    let app = AppSchema::new("shop", 1);
    let orders =
        make_stream::<OrderEvent>(Arc::clone(&shared), app.clone(), "Order", &["orderId"])?;
    let summaries: Entity<OrderSummary> = Entity::new(
        shared,
        app,
        "OrderSummary",
        KeyComposite::new(&["orderId"], &[]),
    );

    let line = |sku: &str, qty, cents| OrderEvent::LineAdded {
        sku: sku.into(),
        qty,
        cents,
    };
    let o1 = orders.id([("orderId", "o-1")])?;
    let o2 = orders.id([("orderId", "o-2")])?;
    let o3 = orders.id([("orderId", "o-3")])?;
    orders
        .append(
            &o1,
            &[
                OrderEvent::Placed {
                    customer: "ann".into(),
                },
                line("tea", 2, 450),
            ],
            0,
        )
        .await?;
    orders.append(&o3, &[line("cup", 1, 900)], 0).await?; // poison: no order placed yet
    orders
        .append(
            &o2,
            &[
                OrderEvent::Placed {
                    customer: "bob".into(),
                },
                line("pot", 1, 2500),
            ],
            0,
        )
        .await?;
    orders.append(&o1, &[line("honey", 1, 700)], 2).await?;

    let projection = Projection::builder("order-summaries", summaries.clone(), orders)
        .key(|id, _| id.get("orderId").map(SummaryKey::of))
        .initial(|key: &SummaryKey| OrderSummary {
            order_id: key.order_id.clone(),
            customer: String::new(),
            lines: 0,
            total_cents: 0,
        })
        .evolve(|mut row, event| match &event.event {
            OrderEvent::Placed { customer } => {
                row.customer = customer.clone();
                Ok(row)
            }
            OrderEvent::LineAdded { .. } if row.customer.is_empty() => {
                Err(OrderError::NotPlaced.into())
            }
            OrderEvent::LineAdded { qty, cents, .. } => {
                row.lines += 1;
                row.total_cents += u64::from(*qty) * cents;
                Ok(row)
            }
        })
        .checkpoint("version")
        .build()?;

    let records = table.read_changes(None, 100).await?.into_records();
    let poison_sequence = records
        .get(2)
        .and_then(|r| r.change.sequence_number.clone());
    let batch = process_batch(&records, &[&projection as &dyn BatchProjection]).await;
    let mut rows = Vec::new();
    for order in ["o-1", "o-2", "o-3"] {
        rows.extend(summaries.get(&SummaryKey::of(order)).await?);
    }
    Ok(Report {
        rows,
        batch,
        poison_sequence,
    })
}

/// `--dynamodb-endpoint URL` or `AWS_ENDPOINT_URL`, if given.
#[cfg(feature = "aws")]
fn dynamodb_endpoint(args: &[String]) -> Option<String> {
    args.iter()
        .position(|a| a == "--dynamodb-endpoint")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sqlite = || {
        Target::Sqlite(
            args.first()
                .filter(|a| !a.starts_with("--"))
                .map_or_else(|| dir.path().join("shop.db"), Into::into),
        )
    };
    #[cfg(feature = "aws")]
    let target = match dynamodb_endpoint(&args) {
        Some(url) => Target::Dynamo(eddy_dynamo::DynamoOptions::from_env().endpoint(url)),
        None => sqlite(),
    };
    #[cfg(not(feature = "aws"))]
    let target = sqlite();
    let report = run(&target).await?;
    println!("read model:");
    for row in &report.rows {
        println!("  {}", serde_json::to_string(row)?);
    }
    for failure in &report.batch.failures {
        println!(
            "failed record {} ({}): {}",
            failure.sequence_number, failure.code, failure.message
        );
    }
    if let Some(poison) = &report.poison_sequence {
        println!("the poison event is record {poison}");
    }
    println!(
        "partial batch response: {}",
        serde_json::to_string(&report.batch.response)?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_example_folds_orders_and_reports_the_poison_record() {
        let dir = tempfile::tempdir().unwrap();
        let report = run(&Target::Sqlite(dir.path().join("shop.db")))
            .await
            .unwrap();
        check(report);
    }

    /// The same run on DynamoDB (moto, from `scripts/moto.sh start`).
    #[cfg(feature = "aws")]
    #[tokio::test]
    async fn the_example_runs_on_dynamodb() {
        let Ok(endpoint) = std::env::var("EDDY_DYNAMODB_ENDPOINT") else {
            assert_eq!(
                std::env::var("EDDY_SKIP_MOTO").as_deref(),
                Ok("1"),
                "EDDY_DYNAMODB_ENDPOINT is not set: run `eval \"$(scripts/moto.sh start)\"` or set EDDY_SKIP_MOTO=1"
            );
            eprintln!("backend: dynamodb SKIPPED (EDDY_SKIP_MOTO=1)");
            return;
        };
        eprintln!("backend: dynamodb (moto at {endpoint})");
        let options = eddy_dynamo::DynamoOptions::from_env()
            .endpoint(endpoint)
            .region("us-east-1")
            .credentials("testing", "testing");
        check(run(&Target::Dynamo(options)).await.unwrap());
    }

    fn check(report: Report) {
        let totals: Vec<(&str, u32, u64)> = report
            .rows
            .iter()
            .map(|r| (r.order_id.as_str(), r.lines, r.total_cents))
            .collect();
        assert_eq!(totals, [("o-1", 2, 1600), ("o-2", 1, 2500)]);
        let response = serde_json::to_value(&report.batch.response).unwrap();
        let poison = report.poison_sequence.unwrap();
        assert_eq!(
            response,
            serde_json::json!({ "batchItemFailures": [{ "itemIdentifier": poison }] })
        );
        assert_eq!(report.batch.failures[0].code, "EvolveFailed");
    }
}
