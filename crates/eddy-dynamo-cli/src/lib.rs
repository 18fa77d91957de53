//! A reusable command group for DynamoDB projections.
//!
//! Projections are the application's code, so the command line that
//! repairs and inspects them cannot be a fixed binary: an application
//! mounts [`ProjectionCommand`] (a clap subcommand group) in its own
//! command line, hands it its projections as [`RowRepair`]s, and runs it
//! with [`run`], passing the `deliver` that hands outbox effects to their
//! consumer. The group has `rebuild`, `catch-up`, `status` (checkpoints,
//! pending effects and the oldest claim of rows, or every row with pending
//! effects), `drain` and `drain-pending`, and for rows parked by a
//! delivery that failed for good `parked` (list them with their errors),
//! `retry` (unpark) and `skip` (move the parked effect to a dead-letter
//! stream, or drop it, printing what was taken out), with a progress bar (indicatif)
//! when it works through many rows or effects and a one-line error
//! ([`CliError`]) when something fails.
//!
//! - `command.rs`: the clap group and its arguments.
//! - `repair.rs`: [`RowRepair`], what a projection offers the group
//!   (implemented for every [`MultiProjection`](eddy_dynamo::MultiProjection)
//!   and single-source [`Projection`](eddy_dynamo::Projection) whose key
//!   deserializes from JSON).
//! - `run.rs`: [`run`], which executes a command and prints its report.
//!
//! # Example
//!
//! ```
//! use clap::Parser;
//! use eddy_dynamo_cli::ProjectionCommand;
//!
//! #[derive(Parser)]
//! struct App {
//!     #[command(subcommand)]
//!     command: ProjectionCommand,
//! }
//!
//! let app = App::parse_from([
//!     "app", "catch-up", "--projection", "shipments", "--key", r#"{"shipmentId":"sh-1"}"#,
//! ]);
//! assert!(matches!(app.command, ProjectionCommand::CatchUp(_)));
//! ```
#![deny(missing_docs)]

mod command;
mod error;
mod repair;
mod run;

pub use command::{
    CatchUpArgs, DrainArgs, DrainPendingArgs, ParkedArgs, ProjectionCommand, RebuildArgs,
    RetryArgs, RowsArgs, SkipArgs, StatusArgs,
};
pub use error::CliError;
pub use repair::{RowRepair, RowReport};
pub use run::run;
