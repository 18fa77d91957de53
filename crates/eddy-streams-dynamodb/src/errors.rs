//! Table errors as stream store errors, decided by their kind.

use eddy_dynamo::{TableError, TableErrorKind};
use eddy_streams::StreamError;

/// The stream store's error for a table error met while `doing`.
pub(crate) fn table_error(doing: &str, error: TableError) -> StreamError {
    let message = format!("DynamoDB failed {doing}");
    match error.kind() {
        TableErrorKind::Conflict
        | TableErrorKind::Throttled
        | TableErrorKind::Unavailable
        | TableErrorKind::ConditionFailed => StreamError::unavailable_from(message, error),
        TableErrorKind::Invalid
        | TableErrorKind::TooLarge
        | TableErrorKind::NotFound
        | TableErrorKind::Misconfigured
        | TableErrorKind::HistoryUnavailable
        | TableErrorKind::Internal => StreamError::internal_from(message, error),
    }
}
