//! The change feed: DynamoDB Streams records, in commit order.

use async_trait::async_trait;

use crate::error::TableError;

pub use aws_lambda_events::dynamodb::EventRecord as ChangeRecord;

/// Records read from a change feed, each with the position after it: what
/// a consumer saves once it is done with the record, and passes back as
/// `after` to go on.
#[derive(Debug, Clone, Default)]
pub struct FeedRead {
    /// The records, in the feed's order.
    pub records: Vec<ChangeRecord>,
    /// `positions[i]` is the position after `records[i]`.
    pub positions: Vec<String>,
}

/// An ordered feed of change records with named, durable checkpoints.
///
/// Records have the shape DynamoDB Streams delivers to Lambda. A position
/// is the feed's own text: for the embedded table a record's sequence
/// number (decimal strings that increase in commit order); for
/// `DynamoStreams`, whose records are ordered within a shard only, one
/// position per shard.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// Up to `limit` records after the position `after` (from the start
    /// when `None`), oldest first.
    async fn read_changes(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError>;

    /// [`read_changes`](Self::read_changes), with the position after each
    /// record. By default a record's position is its sequence number.
    async fn read_positioned(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<FeedRead, TableError> {
        let records = self.read_changes(after.clone(), limit).await?;
        let mut last = after.unwrap_or_default();
        let positions = records
            .iter()
            .map(|r| {
                if let Some(sequence) = &r.change.sequence_number {
                    last.clone_from(sequence);
                }
                last.clone()
            })
            .collect();
        Ok(FeedRead { records, positions })
    }

    /// The position of the last record a named consumer has finished, if
    /// any.
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError>;

    /// Records that a named consumer has finished everything up to
    /// `position`.
    async fn save_checkpoint(&self, consumer: &str, position: &str) -> Result<(), TableError>;
}
