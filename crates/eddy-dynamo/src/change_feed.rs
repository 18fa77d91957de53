//! The change feed: DynamoDB Streams records, in commit order, each with
//! the position after it.

use async_trait::async_trait;

use crate::error::TableError;
use crate::feed_position::FeedPosition;

pub use aws_lambda_events::dynamodb::EventRecord as ChangeRecord;

/// Records read from a change feed, each with the position after it: what
/// a consumer saves once it is done with the record, and passes back to
/// [`ChangeFeed::read_changes`] to go on.
#[derive(Debug, Clone, Default)]
pub struct FeedRead {
    records: Vec<ChangeRecord>,
    /// `positions[i]` is the position after `records[i]`.
    positions: Vec<FeedPosition>,
}

impl FeedRead {
    /// Adds a record and the position after it (for feeds that wrap
    /// another one).
    pub fn push(&mut self, record: ChangeRecord, position: FeedPosition) {
        self.records.push(record);
        self.positions.push(position);
    }

    /// The records, in the feed's order.
    pub fn records(&self) -> &[ChangeRecord] {
        &self.records
    }

    /// The records, without their positions.
    pub fn into_records(self) -> Vec<ChangeRecord> {
        self.records
    }

    /// The position after the record at `index`.
    pub fn position_after(&self, index: usize) -> Option<&FeedPosition> {
        self.positions.get(index)
    }

    /// The position after the last record: where the next read starts.
    pub fn last_position(&self) -> Option<&FeedPosition> {
        self.positions.last()
    }

    /// How many records were read.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Replaces the position after the last record (a feed that learns,
    /// after it, that the reader is further on).
    #[cfg_attr(not(feature = "aws"), allow(dead_code))]
    pub(crate) fn move_last_position(&mut self, position: FeedPosition) {
        if let Some(last) = self.positions.last_mut() {
            *last = position;
        }
    }
}

impl IntoIterator for FeedRead {
    type Item = (ChangeRecord, FeedPosition);
    type IntoIter =
        std::iter::Zip<std::vec::IntoIter<ChangeRecord>, std::vec::IntoIter<FeedPosition>>;

    /// Each record with the position after it.
    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter().zip(self.positions)
    }
}

/// An ordered feed of change records with named, durable checkpoints.
///
/// Records have the shape DynamoDB Streams delivers to Lambda. Positions
/// are [`FeedPosition`]s the feed hands out with its records (never a
/// record's sequence number): the embedded table's log is one order;
/// `DynamoStreams`' records are ordered within a shard only, so its
/// positions name one mark per shard. A feed refuses another kind of
/// feed's position (`feed-position/other-feed`).
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// Up to `limit` records after `after` (from the oldest kept when
    /// `None`), oldest first, each with the position after it.
    async fn read_changes(
        &self,
        after: Option<&FeedPosition>,
        limit: usize,
    ) -> Result<FeedRead, TableError>;

    /// The position after the last record a named consumer has finished,
    /// if any.
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<FeedPosition>, TableError>;

    /// Records that a named consumer has finished everything up to
    /// `position`.
    async fn save_checkpoint(
        &self,
        consumer: &str,
        position: &FeedPosition,
    ) -> Result<(), TableError>;
}
