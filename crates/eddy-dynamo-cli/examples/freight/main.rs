//! The freight example: orders, scans and weighings folded into shipment
//! summaries through `process_batch`, on the embedded table (memory or a
//! SQLite file) or on DynamoDB, with the projection command group mounted.
//!
//! Each applied scan leaves a notice in the summaries' outbox; the
//! example's consumer stores delivered notices as items of the table
//! (`notices#<shipment>`), or with `--notices-to URL` appends them, through
//! eddy-bridge, exactly once, to the durable stream `freight/notices` of
//! the `eddy serve` at URL, where any client tails them live:
//!
//! ```text
//! eddy serve &
//! curl -N 'http://127.0.0.1:4437/freight/notices?offset=-1&live=sse' &
//! cargo run -p eddy-dynamo-cli --example freight -- demo --batch 1 \
//!     --notices-to http://127.0.0.1:4437
//! ```
//!
//! ```text
//! cargo run -p eddy-dynamo-cli --example freight -- --table-file /tmp/freight.db demo
//! cargo run -p eddy-dynamo-cli --example freight -- --table-file /tmp/freight.db \
//!     status --projection shipments --key '{"shipmentId":"sh-1"}'
//! cargo run -p eddy-dynamo-cli --example freight -- --table-file /tmp/freight.db \
//!     drain-pending --projection shipments
//! cargo run -p eddy-dynamo-cli --features aws --example freight -- \
//!     --dynamodb-endpoint http://127.0.0.1:8000 demo --batch 1
//! cargo run -p eddy-dynamo-cli --features aws --example freight -- \
//!     --dynamodb-endpoint http://127.0.0.1:8000 verify --batch 1
//! ```

#[cfg(any(test, feature = "aws"))]
mod expect;
mod model;
mod scenario;
#[cfg(feature = "aws")]
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use eddy_dynamo::{ChangeFeed, Deliver, EmbeddedTable, Table};
use eddy_dynamo_cli::{ProjectionCommand, RowRepair};

/// The freight example.
#[derive(Debug, Parser)]
struct Cli {
    /// The embedded table's SQLite file (default: a table in memory).
    #[arg(long, global = true, value_name = "PATH")]
    table_file: Option<PathBuf>,
    /// Use the DynamoDB table at this endpoint (moto, DynamoDB local, or
    /// AWS) instead of the embedded table.
    #[cfg(feature = "aws")]
    #[arg(long, global = true, value_name = "URL")]
    dynamodb_endpoint: Option<String>,
    /// The table's name.
    #[arg(long, global = true, default_value = "freight")]
    table_name: String,
    /// Deliver the notices into the stream `freight/notices` of the
    /// Durable Streams server at this URL (`eddy serve`) instead of the
    /// table.
    #[arg(long, global = true, value_name = "URL")]
    notices_to: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Append the freight scenario and fold it through process_batch;
    /// prints the final rows as JSON lines.
    Demo {
        /// Records per batch.
        #[arg(long, default_value_t = 100)]
        batch: usize,
    },
    /// Check the table after `demo` through the AWS SDK directly (GetItem
    /// and Query, not eddy's reader): the final rows with their
    /// checkpoints, the tombstone, the delivered notices and an empty
    /// outbox. Exits with a failure, listing every difference, when
    /// anything differs.
    #[cfg(feature = "aws")]
    Verify {
        /// The batch size `demo` folded with.
        #[arg(long, default_value_t = 100)]
        batch: usize,
    },
    #[command(flatten)]
    Projection(ProjectionCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, with every cause (the AWS SDK's own Display is
            // only "service error").
            let mut line = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                line.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("error: {}", line.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "aws")]
    if let Command::Verify { batch } = &cli.command {
        let Some(endpoint) = &cli.dynamodb_endpoint else {
            return Err("verify reads DynamoDB: give --dynamodb-endpoint".into());
        };
        return verify::verify(endpoint, &cli.table_name, *batch).await;
    }
    let (table, feed) = open(&cli).await?;
    let freight = model::Freight::new(table.clone())?;
    let outbox = freight.outbox()?;
    let shipments = freight.projection(Some(Arc::new(outbox)))?;
    let deliver: Box<dyn Deliver> = match &cli.notices_to {
        Some(url) => Box::new(notices_to(url)?),
        None => Box::new(scenario::notice_writer(table.clone())),
    };
    let deliver = &*deliver;
    match &cli.command {
        Command::Demo { batch } => {
            scenario::append(&freight).await?;
            scenario::fold(feed.as_ref(), &shipments, deliver, *batch).await?;
            for line in scenario::report(&freight, table.as_ref()).await? {
                println!("{line}");
            }
        }
        #[cfg(feature = "aws")]
        Command::Verify { .. } => {}
        Command::Projection(command) => {
            let mounted: [&dyn RowRepair; 1] = [&shipments];
            eddy_dynamo_cli::run(command, &mounted, Some(deliver), &mut std::io::stdout()).await?;
        }
    }
    Ok(())
}

/// The notices' consumer that appends them to `freight/notices` on the
/// Durable Streams server at `url`, each shipment row an idempotent
/// producer.
fn notices_to(url: &str) -> Result<eddy_bridge::StreamDelivery, Box<dyn std::error::Error>> {
    let server = Arc::new(eddy_server::RemoteStorage::new(url)?);
    let stream = eddy_streams::StreamPath::new("freight/notices")?;
    let route = eddy_bridge::Route::Projection(stream);
    Ok(eddy_bridge::StreamDelivery::new(
        server,
        route,
        "shipments",
    )?)
}

/// The table and its change feed.
async fn open(
    cli: &Cli,
) -> Result<(Arc<dyn Table>, Arc<dyn ChangeFeed>), Box<dyn std::error::Error>> {
    let schema = model::schema(&cli.table_name);
    #[cfg(feature = "aws")]
    if let Some(endpoint) = &cli.dynamodb_endpoint {
        let options = eddy_dynamo::DynamoOptions::from_env().endpoint(endpoint.clone());
        let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await?);
        eddy_dynamo::create_table(&client, &schema).await?;
        let table = eddy_dynamo::DynamoTable::connect(&options, schema).await?;
        let streams = eddy_dynamo::DynamoStreams::connect(&options, &table).await?;
        return Ok((Arc::new(table), Arc::new(streams)));
    }
    let table = match &cli.table_file {
        Some(path) => EmbeddedTable::open_sqlite(path, schema)?,
        None => EmbeddedTable::memory(schema),
    };
    Ok((Arc::new(table.clone()), Arc::new(table)))
}
