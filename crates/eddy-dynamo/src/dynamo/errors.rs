//! Mapping SDK failures to [`TableError`]s.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

use crate::error::{BoxError, CancellationReason, TableError, ValidationError};

/// Maps a failure the operation has no specific variant for, keeping it
/// as the source: an endpoint that cannot be reached or a transient service
/// failure is `Unavailable`; what this crate does not know is `Internal`.
pub(crate) fn map_sdk<E, R>(table: &str, err: SdkError<E, R>) -> TableError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or_default().to_owned();
            let message = e.message().unwrap_or_default().to_owned();
            map_code(table, &code, message, err.into())
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => TableError::unavailable(
            "DynamoDB could not be reached (is the endpoint reachable and are credentials set?)",
            err,
        ),
        SdkError::ResponseError(_) => {
            TableError::unavailable("DynamoDB's answer could not be read", err)
        }
        _ => TableError::internal_from("a DynamoDB request could not be sent", err),
    }
}

/// Maps a service error code and message; `source` is the failure itself.
pub(crate) fn map_code(table: &str, code: &str, message: String, source: BoxError) -> TableError {
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
        "InternalServerError" | "ServiceUnavailable" | "InternalFailure" | "RequestTimeout" => {
            TableError::Unavailable {
                message: format!("DynamoDB failed transiently ({code}: {message})"),
                source: Some(source),
            }
        }
        _ => TableError::Internal {
            message: format!("DynamoDB answered {code}: {message}"),
            source: Some(source),
        },
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
