//! The change feed from DynamoDB Streams (`aws-sdk-dynamodbstreams`):
//! shards in lineage order and records in the Lambda shape. The follower
//! that feeds them to [`process_batch`](crate::process_batch) is in
//! `follower.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use aws_lambda_events::dynamodb::{StreamViewType, UserIdentity};
use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsError;
use aws_sdk_dynamodbstreams::primitives::Blob;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as Sdk, Record, ShardIteratorType, StreamViewType as StreamViewTypeSdk,
};
use aws_sdk_dynamodbstreams::Client;
use chrono::DateTime;

use super::errors::map_sdk;
use super::options::DynamoOptions;
use crate::change_feed::{ChangeFeed, ChangeRecord, FeedRead};
use crate::error::TableError;
use crate::feed_position::{at_or_below, FeedPosition};
use crate::item::{AttributeValue, Item};
use crate::request::Put;
use crate::table::Table;

/// Empty `GetRecords` pages in a row after which an open shard is taken to
/// have nothing new (DynamoDB may answer empty pages before the data).
const EMPTY_PAGES: u32 = 4;
/// Times an expired shard iterator is replaced before giving up.
const ITERATOR_RENEWALS: u32 = 3;

/// One shard of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard id.
    pub id: String,
    /// The shard it was split from, if any.
    pub parent: Option<String>,
    /// Whether the shard is closed (no new records will arrive).
    pub closed: bool,
}

/// Records read from one shard.
#[derive(Debug, Clone, Default)]
pub struct ShardRead {
    /// The records, oldest first.
    pub records: Vec<ChangeRecord>,
    /// The shard is closed and every record of it has been read.
    pub exhausted: bool,
}

/// The stream of one table, read with `aws-sdk-dynamodbstreams`.
///
/// As a [`ChangeFeed`] it reads the shards in lineage order (parents before
/// children) and keeps a position per shard (records are ordered within a
/// shard only); checkpoints live as items of a checkpoint [`Table`]. It
/// lists the shards and reads each open one on every call, so it suits
/// tests and tools; a service follows with a
/// [`StreamsFollower`](super::StreamsFollower), which reads only the shards
/// with something new and keeps one checkpoint item per shard.
#[derive(Clone)]
pub struct DynamoStreams {
    client: Client,
    pub(super) stream_arn: String,
    table: String,
    checkpoints: Option<Arc<dyn Table>>,
}

impl std::fmt::Debug for DynamoStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoStreams")
            .field("stream_arn", &self.stream_arn)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DynamoStreams {
    /// A reader of the stream with this ARN, of the table with this name.
    pub fn new(client: Client, stream_arn: impl Into<String>, table: impl Into<String>) -> Self {
        Self {
            client,
            stream_arn: stream_arn.into(),
            table: table.into(),
            checkpoints: None,
        }
    }

    /// Connects to the stream of `table`'s table, which must exist with a
    /// `NEW_AND_OLD_IMAGES` stream ([`TableError::Misconfigured`] otherwise).
    pub async fn connect(
        options: &DynamoOptions,
        table: &crate::dynamo::DynamoTable,
    ) -> Result<Self, TableError> {
        let config = options.sdk_config().await?;
        let arn = super::provision::verify_table(table.client(), table.schema(), true)
            .await?
            .ok_or_else(|| TableError::Misconfigured {
                message: format!(
                    "table {} reports no stream ARN; enable its stream with NEW_AND_OLD_IMAGES",
                    table.schema().name
                ),
            })?;
        Ok(Self::new(
            Client::new(&config),
            arn,
            table.schema().name.clone(),
        ))
    }

    /// Stores [`ChangeFeed`] checkpoints as items of this table (string
    /// partition and sort keys). It must be another table than the one
    /// followed: checkpoints written into the followed table would feed the
    /// stream its own checkpoints, one more record per checkpoint, forever.
    pub fn with_checkpoints(mut self, table: Arc<dyn Table>) -> Result<Self, TableError> {
        self.check_checkpoint_table(table.as_ref())?;
        self.checkpoints = Some(table);
        Ok(self)
    }

    pub(super) fn check_checkpoint_table(&self, table: &dyn Table) -> Result<(), TableError> {
        if table.schema().name == self.table {
            return Err(TableError::Misconfigured {
                message: format!(
                    "checkpoints of the stream of {} cannot be stored in {0} itself: each checkpoint write would add a record to the stream it follows; use another table (e.g. `eddy dynamo create-table --table {0}-checkpoints`)",
                    self.table
                ),
            });
        }
        Ok(())
    }

    /// The stream ARN.
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// Every shard, parents before children (a shard whose parent is gone
    /// from the stream counts as a root).
    pub async fn shards(&self) -> Result<Vec<ShardInfo>, TableError> {
        let mut all = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| map_sdk(&self.table, e))?;
            let Some(description) = out.stream_description else {
                break;
            };
            self.check_view(description.stream_view_type())?;
            for shard in description.shards() {
                let Some(id) = shard.shard_id() else { continue };
                all.push(ShardInfo {
                    id: id.to_owned(),
                    parent: shard.parent_shard_id().map(str::to_owned),
                    closed: shard
                        .sequence_number_range()
                        .and_then(|r| r.ending_sequence_number())
                        .is_some(),
                });
            }
            match description.last_evaluated_shard_id() {
                Some(last) => start = Some(last.to_owned()),
                None => break,
            }
        }
        Ok(lineage_order(all))
    }

    /// Refuses a stream whose records carry no new image (`KEYS_ONLY`,
    /// `OLD_IMAGE`): every event record would be unreadable.
    fn check_view(&self, view: Option<&StreamViewTypeSdk>) -> Result<(), TableError> {
        match view {
            Some(StreamViewTypeSdk::NewImage | StreamViewTypeSdk::NewAndOldImages) | None => Ok(()),
            Some(other) => Err(TableError::Misconfigured {
                message: format!(
                    "the stream of table {} has view type {}: projections need NEW_IMAGE or NEW_AND_OLD_IMAGES; disable the stream and enable it again with NEW_AND_OLD_IMAGES (its records so far carry keys only: rebuild from the table)",
                    self.table,
                    other.as_str()
                ),
            }),
        }
    }

    /// Up to `limit` records of one shard after the sequence number `after`
    /// (from the oldest retained when `None`). An expired iterator is
    /// renewed from the last record read.
    pub async fn read_shard(
        &self,
        shard: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ShardRead, TableError> {
        self.read_shard_above(shard, after, None, limit).await
    }

    /// [`read_shard`](Self::read_shard), skipping the records numbered at
    /// or below `floor` before the limit counts: a consumer with more than
    /// `limit` records below its floor still reaches the ones above it.
    async fn read_shard_above(
        &self,
        shard: &str,
        after: Option<&str>,
        floor: Option<&str>,
        limit: usize,
    ) -> Result<ShardRead, TableError> {
        let mut position = after.map(str::to_owned);
        let mut iterator = Some(self.iterator(shard, position.as_deref()).await?);
        let mut read = ShardRead::default();
        let (mut empty, mut renewals) = (0, 0);
        while let Some(current) = iterator.take() {
            if read.records.len() >= limit {
                iterator = Some(current);
                break;
            }
            let want = i32::try_from((limit - read.records.len()).min(1000)).unwrap_or(1000);
            let result = self
                .client
                .get_records()
                .shard_iterator(current)
                .limit(want)
                .send()
                .await;
            let out = match result {
                Ok(out) => out,
                Err(e)
                    if matches!(
                        e.as_service_error(),
                        Some(GetRecordsError::ExpiredIteratorException(_))
                    ) =>
                {
                    renewals += 1;
                    if renewals > ITERATOR_RENEWALS {
                        return Err(TableError::internal(format!(
                            "shard iterators of {shard} kept expiring; each must be used within 15 minutes"
                        )));
                    }
                    iterator = Some(self.iterator(shard, position.as_deref()).await?);
                    continue;
                }
                Err(e) => return Err(map_sdk(&self.table, e)),
            };
            let records = out.records.unwrap_or_default();
            if records.is_empty() {
                empty += 1;
            } else {
                empty = 0;
            }
            for record in records {
                let record = to_change_record(record, &self.stream_arn)?;
                position = record.change.sequence_number.clone();
                let older = position
                    .as_deref()
                    .zip(floor)
                    .is_some_and(|(s, f)| at_or_below(s, f));
                if !older {
                    read.records.push(record);
                }
            }
            iterator = out.next_shard_iterator;
            if empty >= EMPTY_PAGES || (empty > 0 && !read.records.is_empty()) {
                break;
            }
        }
        read.exhausted = iterator.is_none();
        Ok(read)
    }

    async fn iterator(&self, shard: &str, after: Option<&str>) -> Result<String, TableError> {
        let kind = match after {
            None => ShardIteratorType::TrimHorizon,
            Some(_) => ShardIteratorType::AfterSequenceNumber,
        };
        let out = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(after.map(str::to_owned))
            .send()
            .await
            .map_err(|e| map_sdk(&self.table, e))?;
        out.shard_iterator.ok_or_else(|| {
            TableError::internal(format!(
                "GetShardIterator gave no iterator for shard {shard}"
            ))
        })
    }

    fn checkpoint_table(&self) -> Result<&Arc<dyn Table>, TableError> {
        self.checkpoints
            .as_ref()
            .ok_or_else(|| TableError::Misconfigured {
                message:
                    "this DynamoDB Streams feed has no checkpoint table: call with_checkpoints"
                        .into(),
            })
    }
}

/// Orders shards so every parent comes before its children.
fn lineage_order(shards: Vec<ShardInfo>) -> Vec<ShardInfo> {
    let ids: HashSet<String> = shards.iter().map(|s| s.id.clone()).collect();
    let mut children: HashMap<Option<String>, Vec<ShardInfo>> = HashMap::new();
    for shard in shards {
        let parent = shard.parent.clone().filter(|p| ids.contains(p));
        children.entry(parent).or_default().push(shard);
    }
    let mut ordered = Vec::new();
    let mut queue: Vec<ShardInfo> = children.remove(&None).unwrap_or_default();
    while !queue.is_empty() {
        let mut next = Vec::new();
        for shard in queue {
            next.extend(children.remove(&Some(shard.id.clone())).unwrap_or_default());
            ordered.push(shard);
        }
        queue = next;
    }
    ordered
}

#[async_trait]
impl ChangeFeed for DynamoStreams {
    /// Reads shard by shard, parents before children: each shard from its
    /// own mark in `after`, a child only once its parent is done (or
    /// trimmed). A record's position is the reader's mark in every shard
    /// as of that record. Sequence numbers are compared within a shard
    /// only; an upgraded older position's floor applies to the shards
    /// without a mark, before the limit counts.
    async fn read_changes(
        &self,
        after: Option<&FeedPosition>,
        limit: usize,
    ) -> Result<FeedRead, TableError> {
        let mut position = after
            .map(FeedPosition::shard_positions)
            .transpose()?
            .unwrap_or_default();
        let shards = self.shards().await?;
        position.keep_only(shards.iter().map(|s| s.id.as_str()));
        let listed: HashSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        let mut out = FeedRead::default();
        for shard in &shards {
            if out.len() >= limit {
                break;
            }
            if position.done(&shard.id) {
                continue;
            }
            let parent = shard.parent.as_deref().filter(|p| listed.contains(p));
            if parent.is_some_and(|p| !position.done(p)) {
                continue; // parents before children
            }
            let (start, floor) = position.start(&shard.id);
            let (start, floor) = (start.map(str::to_owned), floor.map(str::to_owned));
            let read = self
                .read_shard_above(
                    &shard.id,
                    start.as_deref(),
                    floor.as_deref(),
                    limit - out.len(),
                )
                .await?;
            for record in read.records {
                let Some(sequence) = record.change.sequence_number.clone() else {
                    continue;
                };
                position.advance(&shard.id, &sequence);
                out.push(record, FeedPosition::streams(position.clone()));
            }
            if read.exhausted && shard.closed {
                position.finish(&shard.id);
                out.move_last_position(FeedPosition::streams(position.clone()));
            }
        }
        Ok(out)
    }

    /// The consumer's position; a checkpoint an older eddy saved (a
    /// sequence number) is upgraded to a floor.
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<FeedPosition>, TableError> {
        let key = checkpoint_key(
            self.checkpoint_table()?.as_ref(),
            consumer,
            &self.stream_arn,
            "*",
        )?;
        let item = self.checkpoint_table()?.get_item(key).await?;
        let saved = item.and_then(|i| crate::item::get_str(&i, "sequence").map(str::to_owned));
        Ok(saved.as_deref().map(FeedPosition::upgrade).transpose()?)
    }

    async fn save_checkpoint(
        &self,
        consumer: &str,
        position: &FeedPosition,
    ) -> Result<(), TableError> {
        let position = FeedPosition::streams(position.shard_positions()?);
        let table = self.checkpoint_table()?;
        let mut item = checkpoint_key(table.as_ref(), consumer, &self.stream_arn, "*")?;
        item.insert("sequence".into(), AttributeValue::S(position.to_string()));
        table.put_item(Put::new(item)).await
    }
}

/// The key of a checkpoint item: partition `$eddy#streams#<consumer>`,
/// sort `<stream ARN>#<shard>` (`*` for the whole stream). The ARN keeps
/// the checkpoints of two tables (or of a re-enabled stream) apart.
pub(super) fn checkpoint_key(
    table: &dyn Table,
    consumer: &str,
    stream_arn: &str,
    shard: &str,
) -> Result<Item, TableError> {
    let key = &table.schema().key;
    let Some(sort) = &key.sort else {
        return Err(TableError::Misconfigured {
            message: "the checkpoint table needs a string sort key".into(),
        });
    };
    Ok(Item::from([
        (
            key.partition.name.clone(),
            AttributeValue::S(format!("$eddy#streams#{consumer}")),
        ),
        (
            sort.name.clone(),
            AttributeValue::S(format!("{stream_arn}#{shard}")),
        ),
    ]))
}

/// A DynamoDB Streams record in the shape Lambda delivers.
fn to_change_record(record: Record, stream_arn: &str) -> Result<ChangeRecord, TableError> {
    let mut out = ChangeRecord::default();
    out.aws_region = record.aws_region.unwrap_or_default();
    out.event_id = record.event_id.unwrap_or_default();
    out.event_name = record
        .event_name
        .map(|n| n.as_str().to_owned())
        .unwrap_or_default();
    out.event_source = record.event_source;
    out.event_version = record.event_version;
    out.event_source_arn = Some(stream_arn.to_owned());
    if let Some(identity) = record.user_identity {
        let mut user = UserIdentity::default();
        user.type_ = identity.r#type.unwrap_or_default();
        user.principal_id = identity.principal_id.unwrap_or_default();
        out.user_identity = Some(user);
    }
    if let Some(change) = record.dynamodb {
        if let Some(at) = change.approximate_creation_date_time {
            if let Some(time) = DateTime::from_timestamp(at.secs(), 0) {
                out.change.approximate_creation_date_time = time;
            }
        }
        out.change.keys = from_item(change.keys)?.into();
        out.change.new_image = from_item(change.new_image)?.into();
        out.change.old_image = from_item(change.old_image)?.into();
        out.change.sequence_number = change.sequence_number;
        out.change.size_bytes = change.size_bytes.unwrap_or_default();
        out.change.stream_view_type = change.stream_view_type.and_then(|view| match view {
            StreamViewTypeSdk::NewImage => Some(StreamViewType::NewImage),
            StreamViewTypeSdk::OldImage => Some(StreamViewType::OldImage),
            StreamViewTypeSdk::NewAndOldImages => Some(StreamViewType::NewAndOldImages),
            StreamViewTypeSdk::KeysOnly => Some(StreamViewType::KeysOnly),
            _ => None,
        });
    }
    Ok(out)
}

fn from_item(item: Option<HashMap<String, Sdk>>) -> Result<Item, TableError> {
    item.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| Ok((k, from_value(v)?)))
        .collect()
}

fn from_value(value: Sdk) -> Result<AttributeValue, TableError> {
    Ok(match value {
        Sdk::S(s) => AttributeValue::S(s),
        Sdk::N(n) => AttributeValue::N(n),
        Sdk::B(b) => AttributeValue::B(b.into_inner()),
        Sdk::Bool(b) => AttributeValue::Bool(b),
        Sdk::Null(b) => AttributeValue::Null(b),
        Sdk::M(m) => AttributeValue::M(from_item(Some(m))?),
        Sdk::L(l) => AttributeValue::L(l.into_iter().map(from_value).collect::<Result<_, _>>()?),
        Sdk::Ss(s) => AttributeValue::Ss(s),
        Sdk::Ns(s) => AttributeValue::Ns(s),
        Sdk::Bs(s) => AttributeValue::Bs(s.into_iter().map(Blob::into_inner).collect()),
        other => {
            return Err(TableError::internal(format!(
                "DynamoDB Streams returned an attribute value of an unknown type: {other:?}; upgrade eddy"
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>) -> ShardInfo {
        ShardInfo {
            id: id.into(),
            parent: parent.map(Into::into),
            closed: false,
        }
    }

    #[test]
    fn parents_come_before_children() {
        let ordered = lineage_order(vec![
            shard("c2", Some("b")),
            shard("b", Some("a")),
            shard("c1", Some("b")),
            shard("a", Some("trimmed")),
            shard("x", None),
        ]);
        let ids: Vec<&str> = ordered.iter().map(|s| s.id.as_str()).collect();
        let pos = |id| ids.iter().position(|i| *i == id).unwrap();
        assert!(pos("a") < pos("b") && pos("b") < pos("c1") && pos("b") < pos("c2"));
        assert_eq!(ids.len(), 5);
    }
}
