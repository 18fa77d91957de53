//! The integration tests of eddy-dynamo, one binary with a module per area.

mod contract;
mod embedded;
