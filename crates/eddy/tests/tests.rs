//! Integration tests of the `eddy` binary, run as a user runs it: one test
//! binary, one module per command.

mod crash;
mod dynamo_cli;
mod dynamodb;
#[cfg(feature = "postgres")]
mod postgres;
mod serve_cli;
mod shared_subscriptions;
mod status_cli;
mod streams_cli;
