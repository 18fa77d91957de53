//! Failures of [`Table`](crate::Table) operations: each has a stable code,
//! a kind that decides whether to retry, and its cause as the error source.

use crate::feed_position::PositionError;
use crate::item::Item;

/// A cause kept as an error's source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A request the table refuses before looking at any item (DynamoDB's
/// `ValidationException`). Nothing is changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The item is larger than 400 KB.
    #[error(
        "item of {size} bytes exceeds the 400 KB item size limit; store large values elsewhere"
    )]
    ItemTooLarge {
        /// The item's size in bytes.
        size: usize,
    },
    /// A transaction holds more than 100 items.
    #[error("a transaction holds at most 100 items, got {count}; split the work")]
    TooManyItems {
        /// The number of items given.
        count: usize,
    },
    /// A transaction's items total more than 4 MB.
    #[error("a transaction's items total {size} bytes, over DynamoDB's 4 MB limit (4 194 304 bytes); split the work")]
    TransactionTooLarge {
        /// The items' total size in bytes.
        size: usize,
    },
    /// A transaction holds no item.
    #[error("a transaction needs at least one item")]
    EmptyTransaction,
    /// Two operations in one transaction target the same item.
    #[error("two operations in one transaction target the same item; merge them")]
    DuplicateItem,
    /// A key or key attribute is missing, of the wrong type or empty.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The named index does not exist.
    #[error("the table has no index named {0}")]
    UnknownIndex(String),
    /// An update cannot be applied (a non-number added to, a bad number).
    #[error("invalid update: {0}")]
    InvalidUpdate(String),
    /// A query is malformed (bad limit, paging key, sort condition).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// DynamoDB refused the request for a reason checked only by the
    /// service (its message says which).
    #[error("DynamoDB refused the request: {0}")]
    Rejected(String),
}

/// Why one item of a cancelled transaction failed.
#[derive(Debug, Clone, PartialEq)]
pub struct CancellationReason {
    /// `ConditionalCheckFailed` for the item whose condition failed, `None`
    /// for the items that were fine, or DynamoDB's other codes.
    pub code: String,
    /// The item as it was, for an item whose condition failed.
    pub item: Option<Item>,
}

impl CancellationReason {
    /// Whether this item's condition failed.
    pub fn is_condition_failure(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// What kind of failure a [`TableError`] is. Whether a caller may retry is
/// decided from it, and only from it ([`TableErrorKind::is_retryable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableErrorKind {
    /// A condition did not hold: nothing was written. Read again and decide
    /// again; the same request fails the same way.
    ConditionFailed,
    /// Concurrent transactions on the same items: nothing was written,
    /// retry later.
    Conflict,
    /// The table's capacity was exceeded: retry later, slower.
    Throttled,
    /// The storage could not be reached or answered with a transient
    /// failure: retry later.
    Unavailable,
    /// The request is malformed: fix it.
    Invalid,
    /// An item or request is over a size limit: make it smaller.
    TooLarge,
    /// The table does not exist.
    NotFound,
    /// The table is not laid out as needed (key schema, index, stream).
    Misconfigured,
    /// The change records asked for were trimmed from the feed.
    HistoryUnavailable,
    /// The storage failed in a way retrying does not fix (corrupt data, an
    /// answer this crate does not understand, a poisoned table).
    Internal,
}

impl TableErrorKind {
    /// Whether the same request may succeed later.
    pub fn is_retryable(self) -> bool {
        match self {
            TableErrorKind::Conflict | TableErrorKind::Throttled | TableErrorKind::Unavailable => {
                true
            }
            TableErrorKind::ConditionFailed
            | TableErrorKind::Invalid
            | TableErrorKind::TooLarge
            | TableErrorKind::NotFound
            | TableErrorKind::Misconfigured
            | TableErrorKind::HistoryUnavailable
            | TableErrorKind::Internal => false,
        }
    }
}

/// A failure of a [`Table`](crate::Table) operation. Its stable code is
/// [`TableError::code`], its kind [`TableError::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The condition of a single write did not hold; nothing was written.
    #[error("the condition of the write did not hold; nothing was written")]
    ConditionalCheckFailed {
        /// The item as it was (absent when there was none).
        item: Option<Box<Item>>,
    },
    /// A transaction was cancelled; nothing was written. One reason per item,
    /// in request order.
    #[error("the transaction was cancelled ({} of {} conditions failed); nothing was written", .reasons.iter().filter(|r| r.is_condition_failure()).count(), .reasons.len())]
    TransactionCanceled {
        /// One reason per item of the transaction, in request order.
        reasons: Vec<CancellationReason>,
    },
    /// Concurrent transactions kept conflicting on the same items
    /// (DynamoDB's `TransactionConflict`); retries with backoff ran out.
    /// Nothing was written; retrying later is safe.
    #[error("{message}; retried with backoff and still in conflict with concurrent transactions on the same items: retry later")]
    TransactionConflict {
        /// The service's message.
        message: String,
    },
    /// The request is invalid; nothing was changed.
    #[error("{0}")]
    Validation(ValidationError),
    /// The table does not exist (DynamoDB's `ResourceNotFoundException`).
    #[error("table {table} does not exist at this endpoint and region ({message}); create it with `eddy dynamo create-table --table {table}` or check AWS_REGION / AWS_ENDPOINT_URL")]
    TableNotFound {
        /// The table name.
        table: String,
        /// The service's message.
        message: String,
    },
    /// The table exists but is not laid out as this library needs (key
    /// schema, index, stream specification).
    #[error("{message}")]
    Misconfigured {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Requests were throttled and retries with backoff ran out.
    #[error("{message}; requests were retried with backoff and still throttled: raise the table's capacity (or use on-demand) or slow down")]
    Throttled {
        /// The service's message.
        message: String,
    },
    /// Change records needed are no longer available (trimmed from the
    /// feed after its retention window).
    #[error("{message}")]
    HistoryUnavailable {
        /// What is missing and what to do.
        message: String,
    },
    /// The storage could not be reached, or failed transiently. A write may
    /// have happened only if the failure came after the commit was sent.
    #[error("{message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        source: Option<BoxError>,
    },
    /// A change-feed position that cannot be read, or not by this feed;
    /// nothing was read or saved.
    #[error(transparent)]
    Position(#[from] PositionError),
    /// The storage failed in a way retrying does not fix.
    #[error("{message}")]
    Internal {
        /// What failed.
        message: String,
        /// The cause.
        #[source]
        source: Option<BoxError>,
    },
}

// Not `#[from]`: that would make the validation error the source too, and
// a printed chain would repeat its message.
impl From<ValidationError> for TableError {
    fn from(e: ValidationError) -> Self {
        TableError::Validation(e)
    }
}

impl TableError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            TableError::ConditionalCheckFailed { .. } => "ConditionalCheckFailed",
            TableError::TransactionCanceled { .. } => "TransactionCanceled",
            TableError::TransactionConflict { .. } => "TransactionConflict",
            TableError::Validation(_) => "ValidationException",
            TableError::TableNotFound { .. } => "ResourceNotFoundException",
            TableError::Misconfigured { .. } => "table/misconfigured",
            TableError::Throttled { .. } => "ThrottlingException",
            TableError::HistoryUnavailable { .. } => "history-unavailable",
            TableError::Unavailable { .. } => "storage-unavailable",
            TableError::Position(e) => e.code(),
            TableError::Internal { .. } => "storage-failure",
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> TableErrorKind {
        match self {
            TableError::ConditionalCheckFailed { .. } => TableErrorKind::ConditionFailed,
            TableError::TransactionCanceled { reasons } => cancellation_kind(reasons),
            TableError::TransactionConflict { .. } => TableErrorKind::Conflict,
            TableError::Validation(
                ValidationError::ItemTooLarge { .. } | ValidationError::TransactionTooLarge { .. },
            ) => TableErrorKind::TooLarge,
            TableError::Validation(_) => TableErrorKind::Invalid,
            TableError::TableNotFound { .. } => TableErrorKind::NotFound,
            TableError::Misconfigured { .. } => TableErrorKind::Misconfigured,
            TableError::Throttled { .. } => TableErrorKind::Throttled,
            TableError::HistoryUnavailable { .. } => TableErrorKind::HistoryUnavailable,
            TableError::Unavailable { .. } => TableErrorKind::Unavailable,
            TableError::Position(_) => TableErrorKind::Invalid,
            TableError::Internal { .. } => TableErrorKind::Internal,
        }
    }

    /// Whether the same request may succeed later (decided by the kind).
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }

    /// A failure retrying does not fix, without a further cause.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        TableError::Internal {
            message: message.to_string(),
            source: None,
        }
    }

    /// A failure retrying does not fix, caused by `source`.
    pub fn internal_from(message: impl std::fmt::Display, source: impl Into<BoxError>) -> Self {
        TableError::Internal {
            message: message.to_string(),
            source: Some(source.into()),
        }
    }

    /// A transient failure caused by `source`.
    pub fn unavailable(message: impl std::fmt::Display, source: impl Into<BoxError>) -> Self {
        TableError::Unavailable {
            message: message.to_string(),
            source: Some(source.into()),
        }
    }

    /// Whether this is a condition failure, of a single write or of any item
    /// of a transaction.
    pub fn is_condition_failure(&self) -> bool {
        self.kind() == TableErrorKind::ConditionFailed
    }
}

/// The kind of a cancelled transaction, from its reasons (DynamoDB's codes).
fn cancellation_kind(reasons: &[CancellationReason]) -> TableErrorKind {
    let any = |code: &str| reasons.iter().any(|r| r.code == code);
    if any("ConditionalCheckFailed") {
        TableErrorKind::ConditionFailed
    } else if any("ValidationError") {
        TableErrorKind::Invalid
    } else if any("ItemCollectionSizeLimitExceeded") {
        TableErrorKind::TooLarge
    } else if any("TransactionConflict") {
        TableErrorKind::Conflict
    } else if any("ThrottlingError") || any("ProvisionedThroughputExceeded") {
        TableErrorKind::Throttled
    } else {
        TableErrorKind::Internal
    }
}

/// An error and its sources, `: `-separated: what a report that keeps only
/// text should keep. A source whose text the error before it already
/// ends with (a wrapper that prints its source) is not repeated.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}
