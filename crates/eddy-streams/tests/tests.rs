//! Integration tests of `eddy-streams`: one binary, one module per area.

mod contract;
mod crash;
mod declare;
mod errors;
#[cfg(feature = "postgres")]
mod postgres;
mod properties;
mod sqlite;
