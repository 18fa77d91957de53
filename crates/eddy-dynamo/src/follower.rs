//! Following a change feed with a durable checkpoint: the embedded
//! equivalent of a Lambda trigger on DynamoDB Streams.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::{process, BatchProjection, BatchResult};
use crate::change_feed::ChangeFeed;
use crate::error::TableError;
use crate::feed_position::FeedPosition;
use crate::outbox::Deliver;

/// Reads a change feed in batches, runs
/// [`process_batch`](crate::process_batch) on each (delivering outbox
/// effects with [`deliver`](Follower::deliver)), and
/// stores how far it got under its name.
///
/// The checkpoint moves to the last record before the first failed one, so
/// a failed record and everything after it are read again on the next poll,
/// as the partial batch response makes Lambda do.
#[derive(Clone)]
pub struct Follower<F> {
    feed: F,
    name: String,
    batch_size: usize,
    deliver: Option<Arc<dyn Deliver>>,
}

impl<F> std::fmt::Debug for Follower<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("name", &self.name)
            .field("batch_size", &self.batch_size)
            .field("delivers", &self.deliver.is_some())
            .finish_non_exhaustive()
    }
}

impl<F: ChangeFeed> Follower<F> {
    /// A follower named `name` (the key of its checkpoint) reading batches
    /// of up to 100 records.
    pub fn new(feed: F, name: impl Into<String>) -> Self {
        Self {
            feed,
            name: name.into(),
            batch_size: 100,
            deliver: None,
        }
    }

    /// Delivers each written row's outbox effects right after its write,
    /// as [`process_batch_delivering`](crate::process_batch_delivering)
    /// does.
    pub fn deliver(mut self, deliver: impl Deliver + 'static) -> Self {
        self.deliver = Some(Arc::new(deliver));
        self
    }

    /// Sets the most records per batch (at least 1).
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// The position after the last record done, if any.
    pub async fn checkpoint(&self) -> Result<Option<FeedPosition>, TableError> {
        self.feed.load_checkpoint(&self.name).await
    }

    /// Processes the next batch, if there is one, and moves the checkpoint.
    pub async fn poll_once(
        &self,
        projections: &[&dyn BatchProjection],
    ) -> Result<Option<BatchResult>, TableError> {
        let after = self.feed.load_checkpoint(&self.name).await?;
        let read = self
            .feed
            .read_changes(after.as_ref(), self.batch_size)
            .await?;
        if read.is_empty() {
            return Ok(None);
        }
        let result = process(read.records(), projections, self.deliver.as_deref()).await;
        let done = match result.first_failure() {
            None => read.last_position(),
            Some(0) => None,
            Some(first) => read.position_after(first - 1),
        };
        if let Some(position) = done {
            self.feed.save_checkpoint(&self.name, position).await?;
        }
        Ok(Some(result))
    }

    /// Polls until the feed has nothing new (or a batch fails), and returns
    /// how many records were processed.
    pub async fn catch_up(
        &self,
        projections: &[&dyn BatchProjection],
    ) -> Result<usize, TableError> {
        let mut processed = 0;
        while let Some(result) = self.poll_once(projections).await? {
            let failed = result.first_failure();
            processed += failed.unwrap_or(result.records);
            if failed.is_some() {
                break;
            }
        }
        Ok(processed)
    }

    /// Polls every `interval` until `shutdown` resolves. Storage failures
    /// are logged and retried on the next tick.
    pub async fn run(
        &self,
        projections: &[&dyn BatchProjection],
        interval: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            loop {
                match self.poll_once(projections).await {
                    Ok(Some(result)) if result.first_failure().is_none() => continue,
                    Ok(Some(result)) => {
                        if let Some(f) = result.failures.first() {
                            tracing::warn!(follower = %self.name, sequence = %f.sequence_number, code = %f.code, "record failed; retrying later");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(follower = %self.name, error = %e, "polling the change feed failed")
                    }
                }
                break;
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}
