//! The crate's error: failures of the entity, event store and projection
//! layers, each with a stable code. Table failures are [`TableError`]s.

pub use crate::table_error::{
    BoxError, CancellationReason, TableError, TableErrorKind, ValidationError,
};

/// A failure of the entity, event store or projection layers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The table failed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// Another writer appended to the stream first; read again and retry.
    #[error("stream {stream} is no longer at version {expected}; read it again and retry")]
    VersionConflict {
        /// The stream (name and id).
        stream: String,
        /// The version the append expected.
        expected: u64,
    },
    /// An event's type is not one of the stream's event types.
    #[error("stream {stream} has no event type {event_type}")]
    UnknownEventType {
        /// The stream name.
        stream: String,
        /// The unknown type.
        event_type: String,
    },
    /// An event's data does not decode into its type.
    #[error("event {event_type} of stream {stream} does not decode: {message}")]
    EventDecode {
        /// The stream name.
        stream: String,
        /// The event type.
        event_type: String,
        /// The decoder's message.
        message: String,
    },
    /// A value could not be encoded into an item.
    #[error("a value could not be encoded into an item: {0}")]
    Encode(String),
    /// A stored item does not decode into the entity's model.
    #[error("an item of entity {entity} does not decode: {message}")]
    ItemDecode {
        /// The entity type.
        entity: String,
        /// The decoder's message.
        message: String,
    },
    /// A key could not be composed from the given attributes.
    #[error("key of {entity} needs attribute {attribute}: {reason}")]
    KeyCompose {
        /// The entity type or stream name.
        entity: String,
        /// The attribute that is missing or unusable.
        attribute: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A change-feed record is not a well-formed event item.
    #[error("{0}")]
    RecordDecode(String),
    /// A row is fed by one stream instance and an event of another arrived.
    #[error("row {row} belongs to stream instance {owner}, not {instance}")]
    ProjectionSourceConflict {
        /// The row key.
        row: String,
        /// The instance that owns the row.
        owner: String,
        /// The instance whose event arrived.
        instance: String,
    },
    /// `evolve` failed and `terminal` did not accept the failure; the
    /// failure is the source, as `evolve` returned it.
    #[error("evolve failed on event {version} of stream instance {instance}")]
    Evolve {
        /// The stream instance.
        instance: String,
        /// The event's version.
        version: u64,
        /// The failure.
        #[source]
        source: BoxError,
    },
    /// Gap fill read fewer events than the versions it needed (an
    /// eventually consistent read, a trimmed stream, the wrong table). The
    /// instance's checkpoint did not move; the record is delivered again.
    #[error("stream instance {instance} needs versions {from} to {to} to fill a gap, but the event store returned {missing:?} missing; nothing was written, the record will be retried")]
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
        "{counter} is at its largest value ({}) and cannot be incremented",
        u64::MAX
    )]
    CounterOverflow {
        /// Which counter (a stream's version, a row's revision).
        counter: String,
    },
    /// Too many lost races on one row or stream; try again later.
    #[error("gave up on {target} after {attempts} attempts lost to concurrent writers")]
    WriteContention {
        /// The row or stream.
        target: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Invalid arguments to an operation.
    #[error("{0}")]
    InvalidArgument(String),
    /// A change record that must carry its item's new image (an INSERT or
    /// MODIFY) has none: the table's stream, or the trigger feeding it,
    /// is not `NEW_IMAGE` or `NEW_AND_OLD_IMAGES`. Not retryable: the
    /// record will never carry one.
    #[error("change record {record} ({event}) carries no new image (stream view type {view}): projections need NEW_IMAGE or NEW_AND_OLD_IMAGES; give the table a stream with NEW_AND_OLD_IMAGES (eddy dynamo create-table checks it) and replay from the table")]
    MissingNewImage {
        /// The record's sequence number (its event id when it has none).
        record: String,
        /// Its event name (`INSERT`, `MODIFY`).
        event: String,
        /// The stream view type the record names, if any.
        view: String,
    },
    /// A row write cannot fit one of DynamoDB's limits, however it is
    /// split (a write splits between events, never inside one): nothing of
    /// it was written. Not retryable.
    #[error("row {row} cannot be written: {what} takes {size} bytes, over DynamoDB's limit of {limit}, and no split of the write fits it")]
    LimitExceeded {
        /// The row key.
        row: String,
        /// What is too large.
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The limit: `400 KB per item`, `4 MB per transaction`.
        limit: &'static str,
    },
    /// A stream instance of a row waited for another instance of the same
    /// row that failed in the same write: with removal declared, a row's
    /// instances apply in fold order, and never a removal beside a failed
    /// instance (the retry decides both). Retryable when the failure it
    /// waits for is.
    #[error("stream instance {instance} waits for {failed}, which failed in the same row write ({cause}): a projection with removal applies a row's instances in fold order only")]
    Deferred {
        /// The instance that waited.
        instance: String,
        /// The instance that failed.
        failed: String,
        /// The stable code of its failure.
        cause: &'static str,
        /// Whether its failure was retryable.
        retryable: bool,
    },
    /// Every stream instance of a row failed, so nothing was written; each
    /// instance's outcome holds its own failure.
    #[error("every stream instance of row {row} failed ({count}); the first: {first}")]
    InstancesFailed {
        /// The row key.
        row: String,
        /// How many instances failed.
        count: usize,
        /// The first failure, with its causes.
        first: String,
        /// Whether the first failure was retryable.
        retryable: bool,
    },
    /// One event of a row produces more outbox effects than a transaction
    /// holds beside the row (99): an event's effects are never split, so
    /// nothing was written. Not retryable.
    #[error("row {row}: {count} outbox effects in one write, and a transaction holds at most 99 beside the row; a projection splits its writes between events, never inside one, so this event's effects cannot be written: produce fewer per event")]
    TooManyEffects {
        /// The row key.
        row: String,
        /// The effects the write would commit.
        count: usize,
    },
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
            Error::TooManyEffects { .. } => "TooManyEffects",
            Error::Deferred { .. } => "Deferred",
            Error::MissingNewImage { .. } => "MissingNewImage",
            Error::LimitExceeded { .. } => "LimitExceeded",
            Error::InstancesFailed { .. } => "InstancesFailed",
        }
    }
}

impl Error {
    /// Whether the same call may succeed later: a lost race or a transient
    /// table failure. Decided per variant, exhaustively.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Table(e) => e.is_retryable(),
            Error::Deferred { retryable, .. } | Error::InstancesFailed { retryable, .. } => {
                *retryable
            }
            Error::VersionConflict { .. }
            | Error::WriteContention { .. }
            | Error::HistoryIncomplete { .. } => true,
            Error::UnknownEventType { .. }
            | Error::EventDecode { .. }
            | Error::Encode(_)
            | Error::ItemDecode { .. }
            | Error::KeyCompose { .. }
            | Error::RecordDecode(_)
            | Error::ProjectionSourceConflict { .. }
            | Error::Evolve { .. }
            | Error::CounterOverflow { .. }
            | Error::InvalidArgument(_)
            | Error::MissingNewImage { .. }
            | Error::LimitExceeded { .. }
            | Error::TooManyEffects { .. } => false,
        }
    }
}

impl From<ValidationError> for Error {
    fn from(e: ValidationError) -> Self {
        Error::Table(TableError::Validation(e))
    }
}
