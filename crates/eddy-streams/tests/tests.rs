//! Integration tests of `eddy-streams`: one binary, one module per area.

mod backup;
mod cache;
mod compaction;
mod contract;
mod crash;
mod declare;
mod errors;
mod live;
#[cfg(feature = "postgres")]
mod postgres;
mod properties;
mod retention_space;
mod sqlite;
mod state_wire;
