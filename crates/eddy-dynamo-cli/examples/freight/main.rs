//! The freight example: orders, scans and weighings folded into shipment
//! summaries through `process_batch`, on the embedded table (memory or a
//! SQLite file) or on DynamoDB, with the projection command group mounted.
//!
//! ```text
//! cargo run -p eddy-dynamo-cli --example freight -- --table-file /tmp/freight.db demo
//! cargo run -p eddy-dynamo-cli --example freight -- --table-file /tmp/freight.db \
//!     status --projection shipments --key '{"shipmentId":"sh-1"}'
//! cargo run -p eddy-dynamo-cli --features aws --example freight -- \
//!     --dynamodb-endpoint http://127.0.0.1:8000 demo
//! ```

mod model;
mod scenario;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use eddy_dynamo::{ChangeFeed, EmbeddedTable, Table, TableSchema};
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
    #[command(flatten)]
    Projection(ProjectionCommand),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let (table, feed) = open(&cli).await?;
    let freight = model::Freight::new(table)?;
    let shipments = freight.projection(None)?;
    match &cli.command {
        Command::Demo { batch } => {
            scenario::append(&freight).await?;
            scenario::fold(feed.as_ref(), &shipments, *batch).await?;
            for line in scenario::report(&freight).await? {
                println!("{line}");
            }
        }
        Command::Projection(command) => {
            let mounted: [&dyn RowRepair; 1] = [&shipments];
            eddy_dynamo_cli::run(command, &mounted, &mut std::io::stdout()).await?;
        }
    }
    Ok(())
}

/// The table and its change feed.
async fn open(
    cli: &Cli,
) -> Result<(Arc<dyn Table>, Arc<dyn ChangeFeed>), Box<dyn std::error::Error>> {
    let schema = TableSchema::single_table(cli.table_name.clone());
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
