//! The integration tests of eddy-dynamo, one binary with a module per area.

mod batch;
mod common;
mod contract;
mod embedded;
mod entity;
mod follower;
#[cfg(feature = "aws")]
mod moto;
mod projection;
mod props;
mod stream;
