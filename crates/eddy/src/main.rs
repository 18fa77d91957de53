//! The `eddy` command line.
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "eddy", version, about = "Eddy: durable streams and projections")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Durable Streams HTTP protocol over the stream store.
    Serve(eddy_server::ServeArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => eddy_server::serve(args).await,
    }
}
