//! [`StreamsFollower`]: follows a table's DynamoDB Streams shard by shard
//! with a durable checkpoint per shard, feeding
//! [`process_batch`](crate::process_batch).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::streams::{checkpoint_key, DynamoStreams};
use crate::batch::{process, BatchProjection, BatchResult};
use crate::error::TableError;
use crate::item::AttributeValue;
use crate::outbox::Deliver;
use crate::request::UpdateItem;
use crate::table::Table;
use crate::update::Update;

/// Follows a table's DynamoDB Streams, shard by shard (parents before
/// children), running [`process_batch`](crate::process_batch) on each batch (delivering
/// outbox effects with [`deliver`](StreamsFollower::deliver)), with a durable
/// checkpoint per shard stored as items of a checkpoint table: the
/// equivalent of a Lambda trigger for a service that runs its own
/// projections.
///
/// A shard's checkpoint moves to the last record before the first failed
/// one, so a failed record and everything after it in that shard are read
/// again; a child shard is read only once its parent is exhausted.
#[derive(Clone)]
pub struct StreamsFollower {
    streams: DynamoStreams,
    checkpoints: Arc<dyn Table>,
    name: String,
    batch_size: usize,
    deliver: Option<Arc<dyn Deliver>>,
}

/// A shard's checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardCheckpoint {
    /// The last sequence number done.
    pub sequence: Option<String>,
    /// Every record of the (closed) shard is done.
    pub finished: bool,
}

impl StreamsFollower {
    /// A follower named `name` (the key of its checkpoints in
    /// `checkpoints`: another table than the followed one, with string
    /// partition and sort keys; [`TableError::Misconfigured`] otherwise).
    pub fn new(
        streams: DynamoStreams,
        checkpoints: Arc<dyn Table>,
        name: impl Into<String>,
    ) -> Result<Self, TableError> {
        streams.check_checkpoint_table(checkpoints.as_ref())?;
        Ok(Self {
            streams,
            checkpoints,
            name: name.into(),
            batch_size: 100,
            deliver: None,
        })
    }

    /// Delivers each written row's outbox effects right after its write,
    /// as [`process_batch_delivering`](crate::process_batch_delivering)
    /// does.
    pub fn deliver(mut self, deliver: impl Deliver + 'static) -> Self {
        self.deliver = Some(Arc::new(deliver));
        self
    }

    /// Sets the most records per batch (1 to 1000).
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.clamp(1, 1000);
        self
    }

    /// The checkpoint of one shard.
    pub async fn checkpoint(&self, shard: &str) -> Result<ShardCheckpoint, TableError> {
        let key = checkpoint_key(
            self.checkpoints.as_ref(),
            &self.name,
            &self.streams.stream_arn,
            shard,
        )?;
        let item = self.checkpoints.get_item(key).await?;
        Ok(match item {
            None => ShardCheckpoint::default(),
            Some(item) => ShardCheckpoint {
                sequence: crate::item::get_str(&item, "sequence").map(str::to_owned),
                finished: matches!(item.get("finished"), Some(AttributeValue::Bool(true))),
            },
        })
    }

    async fn save(
        &self,
        shard: &str,
        sequence: Option<&str>,
        finished: bool,
    ) -> Result<(), TableError> {
        let key = checkpoint_key(
            self.checkpoints.as_ref(),
            &self.name,
            &self.streams.stream_arn,
            shard,
        )?;
        let mut update = Update::new().set("finished", AttributeValue::Bool(finished));
        if let Some(sequence) = sequence {
            update = update.set("sequence", AttributeValue::S(sequence.to_owned()));
        }
        self.checkpoints
            .update_item(UpdateItem::new(key, update))
            .await?;
        Ok(())
    }

    /// Reads one batch from every shard whose parent is done, processes it,
    /// and moves the shards' checkpoints. Returns the batches processed
    /// (empty when nothing was new).
    pub async fn poll_once(
        &self,
        projections: &[&dyn BatchProjection],
    ) -> Result<Vec<BatchResult>, TableError> {
        let shards = self.streams.shards().await?;
        let mut finished: HashSet<String> = HashSet::new();
        let present: HashSet<String> = shards.iter().map(|s| s.id.clone()).collect();
        let mut results = Vec::new();
        for shard in &shards {
            let checkpoint = self.checkpoint(&shard.id).await?;
            if checkpoint.finished {
                finished.insert(shard.id.clone());
                continue;
            }
            if let Some(parent) = shard.parent.as_ref().filter(|p| present.contains(*p)) {
                if !finished.contains(parent) {
                    continue; // parents before children
                }
            }
            let read = self
                .streams
                .read_shard(&shard.id, checkpoint.sequence.as_deref(), self.batch_size)
                .await?;
            if read.records.is_empty() {
                if read.exhausted {
                    self.save(&shard.id, checkpoint.sequence.as_deref(), true)
                        .await?;
                    finished.insert(shard.id.clone());
                }
                continue;
            }
            let result = process(&read.records, projections, self.deliver.as_deref()).await;
            let done = match result.first_failure() {
                None => read.records.last(),
                Some(0) => None,
                Some(first) => read.records.get(first - 1),
            };
            let all_done = result.first_failure().is_none();
            if let Some(sequence) = done.and_then(|r| r.change.sequence_number.as_deref()) {
                self.save(&shard.id, Some(sequence), all_done && read.exhausted)
                    .await?;
            }
            if all_done && read.exhausted {
                finished.insert(shard.id.clone());
            }
            results.push(result);
        }
        Ok(results)
    }

    /// Polls until no shard has anything new (or a batch fails), and
    /// returns how many records were processed.
    pub async fn catch_up(
        &self,
        projections: &[&dyn BatchProjection],
    ) -> Result<usize, TableError> {
        let mut processed = 0;
        loop {
            let results = self.poll_once(projections).await?;
            if results.is_empty() {
                return Ok(processed);
            }
            let mut failed = false;
            for result in &results {
                processed += result.first_failure().unwrap_or(result.records);
                failed |= result.first_failure().is_some();
            }
            if failed {
                return Ok(processed);
            }
        }
    }

    /// Polls every `interval` until `shutdown` resolves. Failures are logged
    /// and retried on the next tick.
    pub async fn run(
        &self,
        projections: &[&dyn BatchProjection],
        interval: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.catch_up(projections).await {
                tracing::warn!(follower = %self.name, error = %e, "following DynamoDB Streams failed; retrying");
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}

impl std::fmt::Debug for StreamsFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsFollower")
            .field("streams", &self.streams)
            .field("name", &self.name)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}
