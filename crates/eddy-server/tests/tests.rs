//! Integration tests of `eddy-server`: one binary, one module per area.

mod crash;
mod operations;
mod parsers;
mod remote_contract;
mod router;
