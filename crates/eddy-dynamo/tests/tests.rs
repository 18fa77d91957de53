//! The integration tests of eddy-dynamo, one binary with a module per area.

mod batch;
mod common;
mod contract;
#[cfg(feature = "aws")]
mod dynamo_faults;
mod embedded;
mod entity;
mod follower;
#[cfg(all(feature = "aws", feature = "lambda"))]
mod lambda_function;
#[cfg(feature = "aws")]
mod moto;
mod outbox;
mod projection;
mod props;
mod stream;
mod tables;
mod tombstone;
