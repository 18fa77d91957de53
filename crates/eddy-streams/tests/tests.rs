//! Integration tests of `eddy-streams`: one binary, one module per area.

mod contract;
mod crash;
mod declare;
mod errors;
mod properties;
mod sqlite;
