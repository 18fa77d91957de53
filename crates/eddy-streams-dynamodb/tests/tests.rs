//! Integration tests of `eddy-streams-dynamodb`: one binary, one module
//! per area. Every suite runs on eddy-dynamo's embedded table and, with
//! the `aws` feature, on moto (`EDDY_DYNAMODB_ENDPOINT`).

mod cascades;
mod common;
mod compaction;
mod contract;
mod item_limits;
mod listing;
mod lost_replies;
mod producer_expiry;
mod producer_sweeps;
mod readiness;
mod restores;
mod retention;
mod snapshots;
mod stores;
mod sweeps;
