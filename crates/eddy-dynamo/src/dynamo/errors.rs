//! Mapping SDK failures to [`TableError`]s.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::error::{CancellationReason, TableError, ValidationError};

/// Maps a failure the operation has no specific variant for.
pub(crate) fn map_sdk<E, R>(table: &str, err: SdkError<E, R>) -> TableError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    if let SdkError::ServiceError(service) = &err {
        let e = service.err();
        let message = e.message().unwrap_or_default().to_owned();
        return map_code(table, e.code().unwrap_or_default(), message);
    }
    TableError::storage(format!(
        "DynamoDB request failed (is the endpoint reachable and are credentials set?): {}",
        DisplayErrorContext(&err)
    ))
}

/// Maps a service error code and message.
pub(crate) fn map_code(table: &str, code: &str, message: String) -> TableError {
    match code {
        "ResourceNotFoundException" => TableError::TableNotFound {
            table: table.to_owned(),
            message,
        },
        "ValidationException" => TableError::Validation(ValidationError::Rejected(message)),
        "TransactionConflictException" => TableError::TransactionConflict { message },
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded" => TableError::Throttled { message },
        "TrimmedDataAccessException" => TableError::HistoryUnavailable {
            message: format!(
                "{message}; the records were trimmed from the stream (kept 24 hours): rebuild the projections from the table"
            ),
        },
        _ => TableError::storage(format!("{code}: {message}")),
    }
}

/// The error of a cancelled transaction, from its reasons: a failed
/// condition decides (the caller must read again); otherwise a validation
/// failure, a conflict with other transactions or throttling, each of which
/// changed nothing.
pub(crate) fn cancelled(reasons: Vec<CancellationReason>, message: String) -> TableError {
    let any = |code: &str| reasons.iter().any(|r| r.code == code);
    if reasons.iter().any(CancellationReason::is_condition_failure) {
        TableError::TransactionCanceled { reasons }
    } else if any("ValidationError") {
        ValidationError::Rejected(message).into()
    } else if any("TransactionConflict") {
        TableError::TransactionConflict { message }
    } else if any("ThrottlingError") || any("ProvisionedThroughputExceeded") {
        TableError::Throttled { message }
    } else {
        TableError::TransactionCanceled { reasons }
    }
}
