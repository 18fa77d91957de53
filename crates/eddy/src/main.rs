//! The `eddy` command line: the composition root. It parses arguments
//! (clap), sets up tracing and signal handling, opens stores, and calls the
//! library crates.
use std::time::Duration;

use clap::{Parser, Subcommand};

mod allocator;
mod config;
#[cfg(feature = "aws")]
mod dynamo;
mod logging;
mod progress;
mod serve;
mod status;
mod store;
mod streams;
mod sweeper;

/// mimalloc: the server allocates and frees many small buffers per request
/// (header maps, response heads, futures), where glibc's allocator spends
/// its time merging free chunks.
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

#[derive(Parser)]
#[command(
    name = "eddy",
    version,
    about = "Eddy: durable streams and projections"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Durable Streams HTTP protocol over the stream store.
    // Boxed: serve's many options would make every command as large.
    Serve(Box<serve::ServeArgs>),
    /// Stream tools: create, append, read, tail, close, delete, ls, export, import.
    Streams(streams::StreamsArgs),
    /// How far behind each projection binding is, and what is stuck.
    Status(status::StatusArgs),
    /// Amazon DynamoDB tools: create-table (feature `aws`).
    #[cfg(feature = "aws")]
    Dynamo(dynamo::DynamoArgs),
}

/// How long the process waits, once a command is done, for tasks that
/// are still running (a request stuck in a blocking call) before it exits.
const EXIT_GRACE: Duration = Duration::from_secs(2);

fn main() -> std::process::ExitCode {
    let outcome = config::parse::<Cli>().and_then(|cli| {
        let command = cli.command;
        let runtime = tokio::runtime::Runtime::new()?;
        let outcome = runtime.block_on(run(command));
        runtime.shutdown_timeout(EXIT_GRACE);
        outcome
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line: the error and its causes.
            eprintln!("eddy: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(*args).await,
        Command::Streams(args) => streams::run(args).await,
        Command::Status(args) => status::run(args).await,
        #[cfg(feature = "aws")]
        Command::Dynamo(args) => dynamo::run(args).await,
    }
}
