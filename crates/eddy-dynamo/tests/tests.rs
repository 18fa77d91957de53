//! The integration tests of eddy-dynamo, one binary with a module per area.

mod common;
mod contract;
mod embedded;
mod entity;
mod projection;
mod stream;
