//! The integration tests of eddy-dynamo, one binary with a module per area.

mod batch;
mod common;
mod contract;
#[cfg(feature = "aws")]
mod dynamo_faults;
mod embedded;
mod entity;
mod fault_props;
mod faults;
mod feed_positions;
mod follower;
/// The freight scenario, shared with the example of `eddy-dynamo-cli`.
#[path = "../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod freight;
#[cfg(all(feature = "aws", feature = "lambda"))]
mod lambda_function;
mod legacy;
mod limits;
/// A long catch-up of one row, shared with `benches/catch_up.rs`.
mod long_catch_up;
#[cfg(feature = "aws")]
mod moto;
mod multi;
mod multi_props;
mod outbox;
mod projection;
mod props;
mod removal;
mod repair;
mod series;
#[cfg(feature = "aws")]
mod shards;
mod stream;
mod tables;
mod tombstone;
