//! The `eddy` command line.
use clap::{Parser, Subcommand};

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
    Serve(eddy_server::ServeArgs),
    /// Stream tools on the embedded store: create, append, read, tail, close, delete, ls.
    Streams(streams::StreamsArgs),
    /// Amazon DynamoDB tools: create-table (feature `aws`).
    #[cfg(feature = "aws")]
    Dynamo(eddy_dynamo::cli::DynamoArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve(args) => eddy_server::serve(args).await,
        Command::Streams(args) => streams::run(args).await,
        #[cfg(feature = "aws")]
        Command::Dynamo(args) => eddy_dynamo::cli::run(args).await.map_err(Into::into),
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
