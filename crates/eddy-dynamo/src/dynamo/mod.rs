//! The Amazon DynamoDB backend (feature `aws`): [`DynamoTable`], table
//! provisioning, and the DynamoDB Streams change feed.

mod convert;
mod errors;
mod expr;
mod options;
mod provision;
mod streams;
mod table;

pub use options::DynamoOptions;
pub use provision::{create_table, verify_table, Provisioned};
pub use streams::{DynamoStreams, ShardCheckpoint, ShardInfo, ShardRead, StreamsFollower};
pub use table::DynamoTable;
