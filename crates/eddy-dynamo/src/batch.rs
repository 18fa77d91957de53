//! Processing a batch of change-feed records: decode each once, route it to
//! every projection of its stream, and answer with Lambda's partial batch
//! response.

use async_trait::async_trait;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::change_feed::ChangeRecord;
use crate::event_item::EventItem;
use crate::projection::{Projection, RecordFailure, RowOutcome, RowReport};

/// A projection as batch processing sees it: the stream it reads, and a way
/// to apply stored events. Every [`Projection`] is one.
#[async_trait]
pub trait BatchProjection: Send + Sync {
    /// The name of the stream it reads.
    fn stream_name(&self) -> &str;

    /// Applies stored events (with their positions in the batch) and reports
    /// the rows and the positions that failed.
    async fn apply_events(
        &self,
        events: Vec<(usize, EventItem)>,
    ) -> (Vec<RowReport>, Vec<RecordFailure>);
}

#[async_trait]
impl<E, M, K> BatchProjection for Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    fn stream_name(&self) -> &str {
        self.stream().name()
    }

    async fn apply_events(
        &self,
        events: Vec<(usize, EventItem)>,
    ) -> (Vec<RowReport>, Vec<RecordFailure>) {
        let (outcomes, failures) = self.apply_items(events).await;
        (outcomes.into_iter().map(to_report).collect(), failures)
    }
}

fn to_report<M: Serialize>(o: RowOutcome<M>) -> RowReport {
    RowOutcome {
        state: o.state.and_then(|s| serde_json::to_value(s).ok()),
        projection: o.projection,
        key: o.key,
        instance: o.instance,
        applied: o.applied,
        already_applied: o.already_applied,
        rejected: o.rejected,
        checkpoint: o.checkpoint,
        revision: o.revision,
        written: o.written,
        failure: o.failure,
    }
}

/// A record of the batch that was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRecord {
    /// Its position in the batch.
    pub index: usize,
    /// Its sequence number (its event id when it has none).
    pub sequence_number: String,
    /// The stable error code.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

/// What a batch did.
#[derive(Debug)]
pub struct BatchResult {
    /// How many records the batch held.
    pub records: usize,
    /// One outcome per row and projection touched.
    pub rows: Vec<RowReport>,
    /// The records that were not applied, in batch order.
    pub failures: Vec<FailedRecord>,
    /// How many records were not events (read-model rows, outbox items,
    /// removals) and were ignored.
    pub ignored: usize,
    /// The partial batch response for Lambda: the first failed record's
    /// sequence number, so the event source mapping retries from there.
    pub response: DynamoDbEventResponse,
}

impl BatchResult {
    /// The position of the first record not done, or `None` when all are.
    pub fn first_failure(&self) -> Option<usize> {
        self.failures.first().map(|f| f.index)
    }
}

/// Processes change-feed records, in order, for the given projections.
///
/// Each record is decoded once; an INSERT of an event item is routed to
/// every projection of its stream. A record that is not an event is
/// ignored. A record that cannot be decoded, or whose row failed, is
/// reported; the response names the first such record, and everything
/// after it will be delivered again (the projections recognise what they
/// already applied).
pub async fn process_batch(
    records: &[ChangeRecord],
    projections: &[&dyn BatchProjection],
) -> BatchResult {
    let mut ignored = 0;
    let mut failures: Vec<RecordFailure> = Vec::new();
    let mut events: Vec<(usize, EventItem)> = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if record.event_name != "INSERT" {
            ignored += 1;
            continue;
        }
        match EventItem::from_item(&record.change.new_image) {
            Ok(Some(event)) => events.push((index, event)),
            Ok(None) => ignored += 1,
            Err(e) => failures.push(RecordFailure {
                index,
                code: e.code().into(),
                message: e.to_string(),
            }),
        }
    }
    let mut rows = Vec::new();
    for projection in projections {
        let mine: Vec<(usize, EventItem)> = events
            .iter()
            .filter(|(_, e)| e.stream_name == projection.stream_name())
            .cloned()
            .collect();
        if mine.is_empty() {
            continue;
        }
        let (mut reports, mut failed) = projection.apply_events(mine).await;
        rows.append(&mut reports);
        failures.append(&mut failed);
    }
    failures.sort_by_key(|f| f.index);
    failures.dedup_by_key(|f| f.index);
    let failures: Vec<FailedRecord> = failures
        .into_iter()
        .map(|f| {
            let record = &records[f.index];
            FailedRecord {
                index: f.index,
                sequence_number: record
                    .change
                    .sequence_number
                    .clone()
                    .unwrap_or_else(|| record.event_id.clone()),
                code: f.code,
                message: f.message,
            }
        })
        .collect();
    let mut response = DynamoDbEventResponse::default();
    if let Some(first) = failures.first() {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(first.sequence_number.clone());
        response.batch_item_failures.push(failure);
    }
    BatchResult {
        records: records.len(),
        rows,
        failures,
        ignored,
        response,
    }
}
