//! The Lambda adapter: a DynamoDB Streams event in, the partial batch
//! response out.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;

use crate::batch::{process_batch, BatchProjection};

/// Handles one DynamoDB Streams event as Lambda delivers it. Configure the
/// event source mapping with `ReportBatchItemFailures` so the response's
/// first failed sequence number is where Lambda retries from.
pub async fn handle_stream_event(
    event: Event,
    projections: &[&dyn BatchProjection],
) -> DynamoDbEventResponse {
    let result = process_batch(&event.records, projections).await;
    for failure in &result.failures {
        tracing::warn!(sequence = %failure.sequence_number, code = %failure.code, message = %failure.message, "record not applied");
    }
    result.response
}

pub use aws_lambda_events::dynamodb::Event as StreamEvent;
pub use aws_lambda_events::streams::DynamoDbEventResponse as StreamEventResponse;
