//! Errors, each with a stable code.

use crate::item::Item;

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
    /// for the items that were fine.
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

/// A failure of a [`Table`](crate::Table) operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The condition of a single write did not hold; nothing was written.
    #[error("ConditionalCheckFailed: the condition of the write did not hold")]
    ConditionalCheckFailed {
        /// The item as it was (absent when there was none).
        item: Option<Box<Item>>,
    },
    /// A transaction was cancelled; nothing was written. One reason per item,
    /// in request order.
    #[error("TransactionCanceled: {} of {} conditions failed", .reasons.iter().filter(|r| r.is_condition_failure()).count(), .reasons.len())]
    TransactionCanceled {
        /// One reason per item of the transaction, in request order.
        reasons: Vec<CancellationReason>,
    },
    /// The request is invalid; nothing was changed.
    #[error("ValidationException: {0}")]
    Validation(ValidationError),
    /// The table does not exist (DynamoDB's `ResourceNotFoundException`).
    #[error("ResourceNotFoundException: table {table} does not exist at this endpoint and region ({message}); create it with `eddy dynamo create-table --table {table}` or check AWS_REGION / AWS_ENDPOINT_URL")]
    TableNotFound {
        /// The table name.
        table: String,
        /// The service's message.
        message: String,
    },
    /// The table exists but is not laid out as this library needs (key
    /// schema, index, stream specification).
    #[error("table/misconfigured: {message}")]
    Misconfigured {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Concurrent transactions kept conflicting on the same items
    /// (DynamoDB's `TransactionConflict`); retries with backoff ran out.
    /// Nothing was written; retrying later is safe.
    #[error("TransactionConflict: {message}; retried with backoff and still in conflict with concurrent transactions on the same items: retry later")]
    TransactionConflict {
        /// The service's message.
        message: String,
    },
    /// Requests were throttled and the SDK's retries with backoff ran out.
    #[error("ThrottlingException: {message}; requests were retried with backoff and still throttled: raise the table's capacity (or use on-demand) or slow down")]
    Throttled {
        /// The service's message.
        message: String,
    },
    /// Change records needed are no longer available (trimmed from the
    /// stream after 24 hours).
    #[error("history-unavailable: {message}")]
    HistoryUnavailable {
        /// What is missing and what to do.
        message: String,
    },
    /// The storage underneath failed; the write may or may not have happened
    /// only if the failure came after the commit was sent.
    #[error("storage-failure: {message}")]
    Storage {
        /// What failed.
        message: String,
    },
}

// Not `#[from]`: that would make the validation error the source too, and
// `{:#}` would print its message twice.
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
            TableError::Validation(_) => "ValidationException",
            TableError::TableNotFound { .. } => "ResourceNotFoundException",
            TableError::Misconfigured { .. } => "table/misconfigured",
            TableError::TransactionConflict { .. } => "TransactionConflict",
            TableError::Throttled { .. } => "ThrottlingException",
            TableError::HistoryUnavailable { .. } => "history-unavailable",
            TableError::Storage { .. } => "storage-failure",
        }
    }

    /// A storage failure with this message.
    pub fn storage(message: impl std::fmt::Display) -> Self {
        TableError::Storage {
            message: message.to_string(),
        }
    }

    /// Whether this is a condition failure, of a single write or of any item
    /// of a transaction.
    pub fn is_condition_failure(&self) -> bool {
        match self {
            TableError::ConditionalCheckFailed { .. } => true,
            TableError::TransactionCanceled { reasons } => {
                reasons.iter().any(CancellationReason::is_condition_failure)
            }
            _ => false,
        }
    }
}

/// A failure of the entity, event store or projection layers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The table failed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// Another writer appended to the stream first; read again and retry.
    #[error("VersionConflict: stream {stream} is no longer at version {expected}; read it again and retry")]
    VersionConflict {
        /// The stream (name and id).
        stream: String,
        /// The version the append expected.
        expected: u64,
    },
    /// An event's type is not one of the stream's event types.
    #[error("UnknownEventType: stream {stream} has no event type {event_type}")]
    UnknownEventType {
        /// The stream name.
        stream: String,
        /// The unknown type.
        event_type: String,
    },
    /// An event's data does not decode into its type.
    #[error("EventDecodeError: event {event_type} of stream {stream} does not decode: {message}")]
    EventDecode {
        /// The stream name.
        stream: String,
        /// The event type.
        event_type: String,
        /// The decoder's message.
        message: String,
    },
    /// A value could not be encoded into an item.
    #[error("EncodeError: {0}")]
    Encode(String),
    /// A stored item does not decode into the entity's model.
    #[error("ItemDecodeError: an item of entity {entity} does not decode: {message}")]
    ItemDecode {
        /// The entity type.
        entity: String,
        /// The decoder's message.
        message: String,
    },
    /// A key could not be composed from the given attributes.
    #[error("KeyComposeError: key of {entity} needs attribute {attribute}: {reason}")]
    KeyCompose {
        /// The entity type or stream name.
        entity: String,
        /// The attribute that is missing or unusable.
        attribute: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A change-feed record is not a well-formed event item.
    #[error("RecordDecodeError: {0}")]
    RecordDecode(String),
    /// A row is fed by one stream instance and an event of another arrived.
    #[error(
        "ProjectionSourceConflict: row {row} belongs to stream instance {owner}, not {instance}"
    )]
    ProjectionSourceConflict {
        /// The row key.
        row: String,
        /// The instance that owns the row.
        owner: String,
        /// The instance whose event arrived.
        instance: String,
    },
    /// `evolve` failed and `terminal` did not accept the failure.
    #[error("EvolveFailed: event {version} of {instance}: {message}")]
    Evolve {
        /// The stream instance.
        instance: String,
        /// The event's version.
        version: u64,
        /// The failure's message.
        message: String,
    },
    /// Gap fill read fewer events than the versions it needed (an
    /// eventually consistent read, a trimmed stream, the wrong table). The
    /// instance's checkpoint did not move; the record is delivered again.
    #[error("history-incomplete: stream instance {instance} needs versions {from} to {to} to fill a gap, but the event store returned {missing:?} missing; nothing was written, the record will be retried")]
    HistoryIncomplete {
        /// The stream instance.
        instance: String,
        /// The first version needed.
        from: u64,
        /// The last version needed.
        to: u64,
        /// The versions that were not returned.
        missing: Vec<u64>,
    },
    /// A version, revision or sequence number is at `u64::MAX` and cannot
    /// move further.
    #[error(
        "CounterOverflow: {counter} is at its largest value ({}) and cannot be incremented",
        u64::MAX
    )]
    CounterOverflow {
        /// Which counter (a stream's version, a row's revision).
        counter: String,
    },
    /// Too many lost races on one row or stream; try again later.
    #[error(
        "WriteContention: gave up on {target} after {attempts} attempts lost to concurrent writers"
    )]
    WriteContention {
        /// The row or stream.
        target: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Invalid arguments to an operation.
    #[error("InvalidArgument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Table(e) => e.code(),
            Error::VersionConflict { .. } => "VersionConflict",
            Error::UnknownEventType { .. } => "UnknownEventType",
            Error::EventDecode { .. } => "EventDecodeError",
            Error::Encode(_) => "EncodeError",
            Error::ItemDecode { .. } => "ItemDecodeError",
            Error::KeyCompose { .. } => "KeyComposeError",
            Error::RecordDecode(_) => "RecordDecodeError",
            Error::ProjectionSourceConflict { .. } => "ProjectionSourceConflict",
            Error::Evolve { .. } => "EvolveFailed",
            Error::HistoryIncomplete { .. } => "history-incomplete",
            Error::CounterOverflow { .. } => "CounterOverflow",
            Error::WriteContention { .. } => "WriteContention",
            Error::InvalidArgument(_) => "InvalidArgument",
        }
    }
}

impl From<ValidationError> for Error {
    fn from(e: ValidationError) -> Self {
        Error::Table(TableError::Validation(e))
    }
}
