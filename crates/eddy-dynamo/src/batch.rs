//! Processing a batch of change-feed records: decode each once, route it to
//! every projection of its stream, and answer with Lambda's partial batch
//! response.

use async_trait::async_trait;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::change_feed::ChangeRecord;
use crate::event_item::{EventItem, ImageCache, StreamIdentity};
use crate::outbox::Deliver;
use crate::projection::{MultiProjection, Projection, RecordFailure, RowOutcome, RowReport};

/// A projection as batch processing sees it: which streams it reads, and a
/// way to apply stored events. Every [`Projection`] is one.
#[async_trait]
pub trait BatchProjection: Send + Sync {
    /// Whether it reads this stream (app, schema version and name).
    fn reads(&self, stream: &StreamIdentity) -> bool;

    /// Applies stored events (with their positions in the batch) and reports
    /// the rows and the positions that failed. With `deliver`, each written
    /// row's outbox effects are delivered right after its write.
    async fn apply_events(
        &self,
        events: Vec<(usize, EventItem)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowReport>, Vec<RecordFailure>);
}

#[async_trait]
impl<E, M, K> BatchProjection for Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    fn reads(&self, stream: &StreamIdentity) -> bool {
        Projection::reads(self, stream)
    }

    async fn apply_events(
        &self,
        events: Vec<(usize, EventItem)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowReport>, Vec<RecordFailure>) {
        let (outcomes, failures) = self.apply_items(events, deliver).await;
        (outcomes.into_iter().map(to_report).collect(), failures)
    }
}

#[async_trait]
impl<M, K> BatchProjection for MultiProjection<M, K>
where
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    fn reads(&self, stream: &StreamIdentity) -> bool {
        MultiProjection::reads(self, stream)
    }

    async fn apply_events(
        &self,
        events: Vec<(usize, EventItem)>,
        deliver: Option<&dyn Deliver>,
    ) -> (Vec<RowReport>, Vec<RecordFailure>) {
        let (outcomes, failures) = self.apply_items(events, deliver).await;
        (outcomes.into_iter().map(to_report).collect(), failures)
    }
}

fn to_report<M: Serialize>(outcome: RowOutcome<M>) -> RowReport {
    outcome.map_state(|state| serde_json::to_value(state).ok())
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

/// Why a record of the batch was left alone. Ignored records are done: they
/// are never reported as failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    /// Not the insert of an event item (a read-model row, an outbox item, a
    /// modification or a removal, each with its new image where it has
    /// one).
    NotAnEvent,
    /// An event of a stream none of the projections reads: another stream,
    /// another application, or another schema version of this one.
    NoProjection {
        /// The event's stream.
        stream: StreamIdentity,
    },
}

/// A record of the batch that was ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredRecord {
    /// Its position in the batch.
    pub index: usize,
    /// Why.
    pub reason: IgnoreReason,
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
    /// The records no projection had to apply, in batch order.
    pub ignored: Vec<IgnoredRecord>,
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
/// every projection that reads its stream: the same application, schema
/// version and stream name. Other records are ignored, and the result says
/// why; an INSERT or MODIFY record without its new image (a stream that
/// keeps keys or old images only) fails with `MissingNewImage`, since it
/// may be an event no projection can read. A record that cannot be decoded, or whose row failed, is reported;
/// the response names the first such record, and everything after it will
/// be delivered again (the projections recognise what they already applied).
pub async fn process_batch(
    records: &[ChangeRecord],
    projections: &[&dyn BatchProjection],
) -> BatchResult {
    process(records, projections, None).await
}

/// [`process_batch`], delivering each written row's outbox effects in order
/// right after its write (claim → deliver → delete, as
/// [`Outbox::drain`](crate::Outbox::drain)): effects left pending by an
/// earlier failed delivery go first. A failed delivery leaves the effect at
/// the head of its row and is reported in the row's
/// [`delivery`](crate::RowOutcome::delivery); it never fails the record,
/// whose effects are committed. Rows of projections without an outbox are
/// processed as by `process_batch`.
pub async fn process_batch_delivering(
    records: &[ChangeRecord],
    projections: &[&dyn BatchProjection],
    deliver: &dyn Deliver,
) -> BatchResult {
    process(records, projections, Some(deliver)).await
}

/// The failure of an INSERT or MODIFY record without its new image (a
/// `KEYS_ONLY` or `OLD_IMAGE` stream): never "not an event", which would
/// drop every event of such a stream without a word.
fn missing_new_image(record: &ChangeRecord) -> crate::error::Error {
    crate::error::Error::MissingNewImage {
        record: record
            .change
            .sequence_number
            .clone()
            .unwrap_or_else(|| record.event_id.clone()),
        event: record.event_name.clone(),
        view: match &record.change.stream_view_type {
            Some(view) => view.to_string(),
            None => "not given".to_owned(),
        },
    }
}

/// [`process_batch`], or [`process_batch_delivering`] with a `deliver`.
pub(crate) async fn process(
    records: &[ChangeRecord],
    projections: &[&dyn BatchProjection],
    deliver: Option<&dyn Deliver>,
) -> BatchResult {
    let mut ignored = Vec::new();
    let mut failures: Vec<RecordFailure> = Vec::new();
    let mut routed: Vec<Vec<(usize, EventItem)>> = vec![Vec::new(); projections.len()];
    let mut cache = ImageCache::default();
    for (index, record) in records.iter().enumerate() {
        let event = match record.event_name.as_str() {
            "INSERT" | "MODIFY" if record.change.new_image.is_empty() => {
                Err(missing_new_image(record))
            }
            "INSERT" => {
                EventItem::from_image(&record.change.new_image, &record.change.keys, &mut cache)
            }
            _ => Ok(None),
        };
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) => {
                ignored.push(IgnoredRecord {
                    index,
                    reason: IgnoreReason::NotAnEvent,
                });
                continue;
            }
            Err(e) => {
                failures.push(RecordFailure::new(index, &e));
                continue;
            }
        };
        let readers: Vec<usize> = (0..projections.len())
            .filter(|&p| projections[p].reads(&event.stream))
            .collect();
        if readers.is_empty() {
            ignored.push(IgnoredRecord {
                index,
                reason: IgnoreReason::NoProjection {
                    stream: event.stream,
                },
            });
            continue;
        }
        let (last, others) = readers.split_last().unwrap_or((&0, &[]));
        for p in others {
            routed[*p].push((index, event.clone()));
        }
        routed[*last].push((index, event));
    }
    let mut rows = Vec::new();
    for (projection, mine) in projections.iter().zip(routed) {
        if mine.is_empty() {
            continue;
        }
        let (mut reports, mut failed) = projection.apply_events(mine, deliver).await;
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
    let ignored_count = ignored.len();
    crate::metrics::batch(
        records.len() - failures.len() - ignored_count,
        failures.len(),
        ignored_count,
    );
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
