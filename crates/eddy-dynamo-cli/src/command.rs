//! The clap command group.

use clap::{Args, Subcommand};

/// Commands that repair and inspect a projection's rows. Mount it with
/// `#[command(subcommand)]` (or `#[command(flatten)]` in an application's
/// own subcommand enum) and execute it with [`run`](crate::run).
#[derive(Debug, Clone, Subcommand)]
pub enum ProjectionCommand {
    /// Re-derive rows from named stream instances, from `initial`, with
    /// every checkpoint written from scratch.
    Rebuild(RebuildArgs),
    /// Bring every instance a row's checkpoints know up to its head.
    CatchUp(CatchUpArgs),
    /// Show rows' checkpoints per source instance, their pending outbox
    /// effects and oldest claim; without --key, every row with pending
    /// effects (through the outbox index).
    Status(StatusArgs),
    /// Deliver the pending outbox effects of the given rows, in order.
    Drain(DrainArgs),
    /// Deliver the pending outbox effects of every row that has some,
    /// found through the outbox index.
    DrainPending(DrainPendingArgs),
}

/// The rows a command works on.
#[derive(Debug, Clone, Args)]
pub struct RowsArgs {
    /// The projection, by name.
    #[arg(long)]
    pub projection: String,
    /// A row key as JSON (its key composites), e.g. `{"shipmentId":"sh-1"}`.
    /// Repeat for several rows.
    #[arg(long = "key", value_name = "JSON")]
    pub keys: Vec<String>,
    /// A file with one row key (JSON) per line.
    #[arg(long, value_name = "PATH")]
    pub keys_file: Option<std::path::PathBuf>,
}

/// `rebuild`.
#[derive(Debug, Clone, Args)]
pub struct RebuildArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
    /// An instance to rebuild from: `<source>=<stream id>`, the stream id
    /// in its text form (`orderId=o-1`). Repeat for several. Without any,
    /// the projection's `sources_of` finds them.
    #[arg(long = "instance", value_name = "SOURCE=STREAM_ID")]
    pub instances: Vec<String>,
}

/// `catch-up`.
#[derive(Debug, Clone, Args)]
pub struct CatchUpArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
}

/// `status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The rows (none: every row with pending effects).
    #[command(flatten)]
    pub rows: RowsArgs,
}

/// `drain`.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
}

/// `drain-pending`.
#[derive(Debug, Clone, Args)]
pub struct DrainPendingArgs {
    /// The projection, by name.
    #[arg(long)]
    pub projection: String,
}
