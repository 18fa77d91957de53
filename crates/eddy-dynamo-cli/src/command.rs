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
    /// List the parked rows (their head effect failed permanently) with
    /// their errors.
    Parked(ParkedArgs),
    /// Unpark rows: their head effect is tried again (at once, when the
    /// application mounts a deliver).
    Retry(RetryArgs),
    /// Take a parked row's head effect out of the outbox, so the row goes
    /// on: moved to the dead-letter stream (--dead-letter) or dropped
    /// (--drop); prints what it took out.
    Skip(SkipArgs),
}

/// `parked`.
#[derive(Debug, Clone, Args)]
pub struct ParkedArgs {
    /// The projection, by name.
    #[arg(long)]
    pub projection: String,
}

/// `retry`.
#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
}

/// `skip`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("to").required(true).args(["dead_letter", "drop"]))]
pub struct SkipArgs {
    /// The rows.
    #[command(flatten)]
    pub rows: RowsArgs,
    /// Move each parked effect to the deliver's dead-letter stream first.
    #[arg(long)]
    pub dead_letter: bool,
    /// Drop each parked effect: it is lost (printed in full).
    #[arg(long)]
    pub drop: bool,
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
