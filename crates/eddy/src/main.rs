//! The `eddy` command line: the composition root. It parses arguments
//! (clap), sets up tracing and signal handling, opens stores, and calls the
//! library crates.
use clap::{Parser, Subcommand};

#[cfg(feature = "aws")]
mod dynamo;
mod serve;
mod streams;

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
    Serve(serve::ServeArgs),
    /// Stream tools on the embedded store: create, append, read, tail, close, delete, ls.
    Streams(streams::StreamsArgs),
    /// Amazon DynamoDB tools: create-table (feature `aws`).
    #[cfg(feature = "aws")]
    Dynamo(dynamo::DynamoArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve(args) => serve::run(args).await,
        Command::Streams(args) => streams::run(args).await,
        #[cfg(feature = "aws")]
        Command::Dynamo(args) => dynamo::run(args).await,
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One line: the error and its causes.
            eprintln!("eddy: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
