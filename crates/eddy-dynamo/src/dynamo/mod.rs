//! The Amazon DynamoDB backend (feature `aws`): [`DynamoTable`], table
//! provisioning, and the DynamoDB Streams change feed.

mod convert;
mod errors;
mod expr;
mod follower;
mod options;
mod provision;
mod streams;
mod table;

pub use follower::{ShardCheckpoint, StreamsFollower};
pub use options::DynamoOptions;
pub use provision::{create_table, verify_table, Provisioned};
pub use streams::{DynamoStreams, ShardInfo, ShardRead};
pub use table::DynamoTable;
