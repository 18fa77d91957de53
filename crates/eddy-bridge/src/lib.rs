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
//! );
//! // Hand `&notices` to `Outbox::drain_pending` (or `process_batch_delivering`)
//! // as its `Deliver`.
//! # let _ = notices;
//! # Ok::<(), eddy_streams::StreamError>(())
//! ```
#![deny(missing_docs)]

mod delivery;
mod producer;
mod route;
mod run;

pub use delivery::{Delivered, StreamDelivery};
pub use producer::{id as producer_id, position as producer_position};
pub use route::{row_path, Route, RouteFn};
pub use run::run_until;

/// Why an effect was not delivered. It stays at its row's head in the
/// outbox, which tries again later.
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
}

impl BridgeError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            BridgeError::Route(_) => "bridge/route",
            BridgeError::Encode(_) => "bridge/encode",
            BridgeError::Version { .. } => "bridge/version",
            BridgeError::Store { source, .. } => source.code(),
        }
    }
}
