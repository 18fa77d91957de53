//! The change feed: DynamoDB Streams records, in commit order.

use async_trait::async_trait;

use crate::error::TableError;

pub use aws_lambda_events::dynamodb::EventRecord as ChangeRecord;

/// An ordered feed of change records with named, durable checkpoints.
///
/// Records have the shape DynamoDB Streams delivers to Lambda; sequence
/// numbers are decimal strings that increase in commit order.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// Up to `limit` records after the sequence number `after` (from the
    /// start when `None`), oldest first.
    async fn read_changes(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError>;

    /// The last sequence number a named consumer has finished, if any.
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError>;

    /// Records that a named consumer has finished everything up to `sequence`.
    async fn save_checkpoint(&self, consumer: &str, sequence: &str) -> Result<(), TableError>;
}
