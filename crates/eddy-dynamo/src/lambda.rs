//! The Lambda adapter: a DynamoDB Streams event in, the partial batch
//! response out.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;

use crate::batch::{process_batch, process_batch_delivering, BatchProjection, BatchResult};
use crate::outbox::Deliver;

/// Handles one DynamoDB Streams event as Lambda delivers it. Configure the
/// event source mapping with `ReportBatchItemFailures` so the response's
/// first failed sequence number is where Lambda retries from.
pub async fn handle_stream_event(
    event: Event,
    projections: &[&dyn BatchProjection],
) -> DynamoDbEventResponse {
    respond(process_batch(&event.records, projections).await)
}

/// [`handle_stream_event`], delivering each written row's outbox effects
/// in order right after its write (see
/// [`process_batch_delivering`]). An effect whose delivery failed stays
/// pending and is logged; it never fails its record.
pub async fn handle_stream_event_delivering(
    event: Event,
    projections: &[&dyn BatchProjection],
    deliver: &dyn Deliver,
) -> DynamoDbEventResponse {
    let result = process_batch_delivering(&event.records, projections, deliver).await;
    for row in &result.rows {
        if let Some(stuck) = row.undelivered() {
            tracing::warn!(projection = %row.projection, stream = %stuck.effect.stream_id, version = stuck.effect.version, error = %stuck.error, "effect not delivered: it stays pending");
        }
        if let Some(Err(e)) = &row.delivery {
            tracing::warn!(projection = %row.projection, error = %e, "outbox drain failed: effects stay pending");
        }
    }
    respond(result)
}

fn respond(result: BatchResult) -> DynamoDbEventResponse {
    for failure in &result.failures {
        tracing::warn!(sequence = %failure.sequence_number, code = %failure.code, message = %failure.message, "record not applied");
    }
    result.response
}

pub use aws_lambda_events::dynamodb::Event as StreamEvent;
pub use aws_lambda_events::streams::DynamoDbEventResponse as StreamEventResponse;
