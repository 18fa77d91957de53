//! Durable append-only streams.
//!
//! `eddy-streams` is the stream store both Eddy systems stand on. A stream is
//! addressed by a [`StreamPath`] (`facts/ws-42`), holds messages of one
//! content type, and hands out [`Offset`]s that sort in append order. The
//! [`Storage`] trait is the seam; [`MemoryStorage`], [`SqliteStorage`] and
//! (feature `postgres`) `PgStorage` implement it with the same rules:
//!
//! - JSON streams store one JSON value per message; appending an array
//!   appends its elements ([`Payload`]).
//! - Appends are atomic and may carry an idempotent producer position, an
//!   expected tail, a `Stream-Seq`, and a close ([`Append`]). A producer's
//!   state is kept for the store's producer expiry
//!   ([`DEFAULT_PRODUCER_EXPIRY`], seven days, as Kafka's
//!   `producer.id.expiration.ms`) after its last accepted write: retries
//!   within it are deduplicated; after it the producer starts afresh. A
//!   stream keeps at most [`DEFAULT_MAX_PRODUCERS_PER_STREAM`] producers
//!   within that window.
//! - Deleted streams are [`Gone`](StreamError::Gone), never-created ones
//!   [`NotFound`](StreamError::NotFound). A stream created again at a path
//!   is a new incarnation: the old stream's offsets are
//!   [`StaleOffset`](StreamError::StaleOffset) on it, never its data.
//! - A stream may keep only part of its history: a [`Retention`] policy
//!   drops its oldest messages, and a [`Compaction`] policy (state streams)
//!   drops the changes later ones supersede, keeping the latest of every
//!   row and the recent history in full. Offsets never change.
//! - [`Storage::wait`] waits for changes without losing wake-ups, and
//!   [`Storage::committed`] reports every commit of the process.
//! - [`Storage::documents`] gives the store's shared [`Documents`]: small
//!   versioned values beside the streams, written by compare-and-set, that
//!   every process on the store sees (the server keeps its subscriptions
//!   there).
//!
//! A backend outside this crate implements the record-level seam of
//! [`backend`] and leaves every rule to the store's one engine.
//!
//! Typed declarations ([`JsonStream`], [`StateStream`]) bind a route
//! template such as `facts/:workspaceId` to serde types. State streams use
//! the wire form of the Durable Streams state protocol, and read what the
//! `@durable-streams/state` package writes (`scripts/state` checks both
//! ways).
//!
//! # Features
//!
//! | feature | adds |
//! | --- | --- |
//! | `postgres` | `PgStorage`: the store in a PostgreSQL database that many processes share, with live wake-ups across them (`LISTEN`/`NOTIFY`), and `PgTransaction`, stream calls and the application's own SQL (through the re-exported `sqlx`) committed together. See `DESIGN-postgres.md`. |
//!
//! # Host transactions
//!
//! A projection host that commits a unit's rows, outputs and checkpoint
//! atomically opens a transaction on the store: `PgStorage::begin` gives a
//! `PgTransaction` whose stream calls keep every rule of the store and
//! whose `sql()` is sqlx's own `Transaction` for the application's
//! statements; both commit or roll back together, and readers in every
//! process wake at the commit.
//!
//! ```
//! use eddy_streams::{Append, MemoryStorage, Payload, ReadFrom, Storage, StreamConfig, StreamPath};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStorage::new();
//! let path = StreamPath::new("orders")?;
//! store.create(&path, StreamConfig::json(), Payload::empty()).await?;
//! let appended = store.append(&path, Append::body(r#"[{"id":1},{"id":2}]"#)).await?;
//! // The first part is the stream's incarnation, the second its position.
//! assert_eq!(appended.next_offset.position(), 2);
//!
//! let chunk = store.read(&path, ReadFrom::Beginning, 1 << 20).await?;
//! assert_eq!(chunk.messages, vec![r#"{"id":1}"#, r#"{"id":2}"#]);
//! assert!(chunk.up_to_date);
//! # Ok::<(), eddy_streams::StreamError>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

mod append;
pub mod backend;
mod backup;
mod cache;
mod clock;
mod compaction;
mod config;
mod documents;
mod engine;
mod error;
mod fork;
mod incarnation;
mod json_stream;
mod limits;
mod listing;
mod marks;
mod memory;
mod metrics;
mod notify;
mod offset;
mod path;
mod payload;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
mod record_form;
mod reports;
mod retention;
mod route;
mod rules;
mod snapshot;
mod sqlite;
mod state;
mod storage;
mod touches;

pub use crate::metrics::describe_metrics;
pub use append::{
    Append, Appended, ProducerPosition, DEFAULT_MAX_PRODUCERS_PER_STREAM, DEFAULT_PRODUCER_EXPIRY,
};
pub use backup::{
    export, import, BackupError, BackupProgress, BackupSummary, BACKUP_FORMAT, BACKUP_VERSION,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use compaction::{Compaction, CompactionError, DroppedDeletes};
pub use config::{
    is_json, media_type, same_media_type, Expiry, StreamConfig, StreamInfo, JSON, OCTET_STREAM,
};
pub use documents::{
    check_document, next_version, Document, Documents, MemoryDocuments, MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_KEY_BYTES,
};
pub use error::{Cause, ErrorKind, Result, StreamError};
pub use fork::Fork;
pub use incarnation::SWEEP_GRACE;
pub use json_stream::{JsonStream, TypedChunk};
pub use limits::{
    Limits, DEFAULT_MAX_APPEND_MESSAGES, DEFAULT_MAX_FORK_BYTES, FORK_MESSAGE_COST,
    MAX_STORED_VALUE_BYTES,
};
pub use listing::{ListPage, PathPage, MAX_LIST_PAGE};
pub use marks::{MarkOwner, Marker, MarkerGuard, WakeMark, WakeMarks};
pub use memory::MemoryStorage;
pub use notify::{Committed, Notifier, Watcher};
pub use offset::{Offset, OffsetText, ReadFrom};
pub use path::{StreamPath, MAX_PATH_LEN};
pub use payload::{Payload, DEFAULT_MAX_APPEND_BYTES};
#[cfg(feature = "postgres")]
pub use postgres::{PgOptions, PgStorage, PgTransaction, DEFAULT_SCHEMA};
pub use reports::{reports, Report, ReportItem, MAX_REPORT_ITEMS, REPORTS_PREFIX};
pub use retention::{Retention, RetentionError};
pub use route::Route;
pub use snapshot::{SnapshotProducer, StreamSnapshot};
pub use sqlite::{
    Durability, SqliteOptions, SqliteStorage, SqliteTransaction, DATABASE_FILE, DEFAULT_CACHE_BYTES,
};
pub use state::{
    Change, Collection, Control, ControlMessage, Materialized, Operation, Skipped, StateMessage,
    StateStream, Undecodable,
};
pub use storage::{Created, ReadChunk, Storage, Wait};

/// The rusqlite crate this build uses: the type of
/// [`SqliteTransaction::sql`], and what application SQL on the same
/// database should use.
pub use rusqlite;

/// The sqlx crate this build uses: the type of [`PgTransaction::sql`], and
/// what application SQL on the same connections should use.
#[cfg(feature = "postgres")]
pub use sqlx;
