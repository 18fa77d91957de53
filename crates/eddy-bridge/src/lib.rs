//! The bridge between Eddy's two systems: a DynamoDB projection's outbox
//! delivered into durable streams, exactly once.
//!
//! A projection of `eddy-dynamo` commits its effects in the same
//! transaction as its rows, into an outbox that delivers them in order
//! per row, at least once. [`StreamDelivery`] is that outbox's consumer:
//! it appends each effect to a durable stream of any
//! `eddy_streams::Storage` (SQLite, PostgreSQL, DynamoDB, or a remote
//! `eddy serve`), chosen per row, per projection, or by a function
//! ([`Route`]), as an idempotent producer whose identity comes from the
//! row and the event's stream instance, and whose position from the
//! event's version and the effect's place among its effects: the
//! outbox's own identity of an effect, `(stream id, version, index)`. A redelivery after any crash appends nothing twice, and each
//! row's effects sit in the stream in outbox order, so a read model's
//! changes can be served live to browsers over the Durable Streams
//! protocol.
//!
//! # Failures
//!
//! A failure that retrying can fix (the store is unavailable) leaves the
//! effect at its row's head; the next drain tries it again. One that it
//! cannot ([`BridgeError::is_permanent`]: the target is closed, deleted,
//! of another content type, too large, forbidden, its path invalid, its
//! producer cap reached, …) has a bounded, visible outcome, chosen per
//! delivery ([`OnPermanent`]):
//!
//! - *park* (the default): the outbox records the failure on the effect
//!   and parks its row; no drain tries it again until an operator retries
//!   or skips it (`eddy-dynamo-cli`'s `parked`, `retry` and `skip`), and
//!   the row shows as parked in `pending_rows`, the metrics, and
//!   `eddy status` on the target store (after each `drain_pending` pass
//!   the delivery publishes the parked rows there, as the report
//!   `bridge/<projection>`, when they changed);
//! - *dead letter* ([`StreamDelivery::dead_letter`]): the effect and its
//!   failure are appended, once, to a dead-letter stream, and the row goes
//!   on.
//!
//! A stream that was deleted is a permanent failure (`stream/gone`), not
//! created again, unless [`StreamDelivery::recreate_deleted`] says so.
//!
//! Neither library knows the other; this crate depends on both.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use eddy_bridge::{Route, StreamDelivery};
//! use eddy_streams::{MemoryStorage, StreamPath};
//!
//! let store = Arc::new(MemoryStorage::new());
//! let notices = StreamDelivery::new(
//!     store,
//!     Route::Projection(StreamPath::new("freight/notices")?),
//!     "shipments",
//! )?
//! // Effects no retry can deliver go here, and their rows go on.
//! .dead_letter(StreamPath::new("freight/dead-letters")?);
//! // Hand `&notices` to `Outbox::drain_pending` (or `process_batch_delivering`)
//! // as its `Deliver`.
//! # let _ = notices;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod dead_letter;
mod delivery;
mod producer;
mod route;
mod run;
mod status;

pub use delivery::{Delivered, OnPermanent, StreamDelivery};
pub use producer::{id as producer_id, position as producer_position};
pub use route::{row_path, Route, RouteFn};
pub use run::run_until;

/// Why an effect was not delivered. It stays at its row's head in the
/// outbox: tried again later, or parked when it
/// [is permanent](Self::is_permanent).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The route found no stream for the effect.
    #[error("no stream for the effect: {0}")]
    Route(#[source] eddy_dynamo::BoxError),
    /// The effect did not encode into a message.
    #[error("the effect does not encode: {0}")]
    Encode(#[source] eddy_dynamo::BoxError),
    /// The event's version is too large to number its effects as a
    /// producer's epochs (above `u64::MAX / 100`).
    #[error("event version {version} is too large to number its effects")]
    Version {
        /// The event's version.
        version: u64,
    },
    /// The store refused the append or the create.
    #[error("appending to stream `{path}`: {source}")]
    Store {
        /// The stream.
        path: String,
        /// The store's error.
        #[source]
        source: eddy_streams::StreamError,
    },
    /// The dead-letter stream refused the effect's record.
    #[error("appending to the dead-letter stream `{path}`: {source}")]
    DeadLetter {
        /// The dead-letter stream.
        path: String,
        /// The store's error.
        #[source]
        source: eddy_streams::StreamError,
    },
    /// A skip asked to move an effect to a dead-letter stream, and the
    /// delivery names none.
    #[error("this delivery has no dead-letter stream: give one with dead_letter or skip_to")]
    NoDeadLetter,
    /// The projection name is not 1 to 64 ASCII letters, digits, `-`, `_`
    /// or `.`.
    #[error("projection name {name:?} is not 1 to 64 ASCII letters, digits, '-', '_' or '.'")]
    Name {
        /// The name given.
        name: String,
    },
}

impl BridgeError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            BridgeError::Route(_) => "bridge/route",
            BridgeError::Encode(_) => "bridge/encode",
            BridgeError::Version { .. } => "bridge/version",
            BridgeError::Store { source, .. } | BridgeError::DeadLetter { source, .. } => {
                source.code()
            }
            BridgeError::NoDeadLetter => "bridge/no-dead-letter",
            BridgeError::Name { .. } => "bridge/name",
        }
    }

    /// Whether retrying cannot fix it: every failure but a store's that
    /// its kind calls retryable (unavailable). A route or an encoder that
    /// fails, a version too large, a closed, deleted or soft-deleted
    /// target, a content type mismatch, an invalid path, a message too
    /// large, a refused authorization, a producer or stream cap reached:
    /// the same effect fails the same way every time.
    pub fn is_permanent(&self) -> bool {
        match self {
            BridgeError::Route(_)
            | BridgeError::Encode(_)
            | BridgeError::Version { .. }
            | BridgeError::NoDeadLetter
            | BridgeError::Name { .. } => true,
            BridgeError::Store { source, .. } | BridgeError::DeadLetter { source, .. } => {
                !source.is_retryable()
            }
        }
    }
}
