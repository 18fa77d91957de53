//! Eddy's DynamoDB layer: an event store on a single DynamoDB table, the
//! embedded table that stands in for DynamoDB, and projections folded from
//! the table's change feed into read-model rows.
//!
//! # Map
//!
//! - **Item model**: [`AttributeValue`] (serde_dynamo's, the type Lambda
//!   events carry), [`Item`], [`item_size`] (DynamoDB's count), the 400 KB
//!   [`MAX_ITEM_SIZE`] and the 4 MB [`MAX_TRANSACTION_SIZE`].
//! - **The [`Table`] trait**: `GetItem`, `TransactGetItems`, `Query`,
//!   `TransactWriteItems`, and defaulted `PutItem` / `UpdateItem` /
//!   `DeleteItem` / `BatchGetItem`, with typed [`Condition`]s and
//!   [`Update`]s. Shaped after the DynamoDB API so `aws-sdk-dynamodb` can
//!   implement it as is. Its layout is a [`TableSchema`].
//! - **[`EmbeddedTable`]**: the same semantics in memory or in a SQLite file
//!   (conditions, 100-item transactions with cancellation reasons, the item
//!   size limit, sparse indexes, TTL sweeps), plus an ordered change feed
//!   ([`ChangeFeed`]) of [`ChangeRecord`]s: the DynamoDB Streams record type
//!   of `aws_lambda_events`, so one decoding path serves both. Every read
//!   ([`FeedRead`]) hands out each record with the [`FeedPosition`] after
//!   it, which a consumer saves (its text form) and passes back to go on;
//!   an older eddy's saved sequence number is read with
//!   [`FeedPosition::upgrade`].
//! - **Entities**: an [`AppSchema`] namespaces keys; an [`Entity`] stores a
//!   serde model under keys composed from named attributes ([`KeyComposite`]).
//! - **Event streams**: [`make_stream`] declares an [`EventStream`] over a
//!   serde enum; `append` writes each event as its own item in one
//!   transaction, failing with `VersionConflict` when another writer got
//!   there first; `handle` runs a command with retries.
//! - **Projections**: a [`Projection`] folds one stream into read-model rows,
//!   with a checkpoint per row (and optionally a revision) guarding every
//!   write; `evolve` returns a [`Step`] (next state, skip, remove) or a typed
//!   [`EvolveError`]. Rows are applied by one row core: per row one read,
//!   every contributing stream instance folded in a fixed order, one
//!   guarded write ([`RowOutcome`], [`InstanceOutcome`]). [`process_batch`]
//!   routes change-feed records to projections by application, schema
//!   version and stream ([`StreamIdentity`]) and builds Lambda's partial
//!   batch response; a [`Follower`] drives it from the embedded feed with a
//!   durable checkpoint, and [`handle_stream_event`] from a Lambda trigger.
//!
//! - **Tombstones and the outbox**: a removed row leaves a tombstone that
//!   every entity read treats as absent and `Entity::create` writes over;
//!   an [`Outbox`] commits a row's effects in the row's transaction
//!   ([`Outbox::commit_items`], in the row's partition or another table of
//!   its database: [`Table::transact_write_tables`]) and delivers them in
//!   order per row, at least once ([`Outbox::drain`],
//!   [`Outbox::drain_pending`]). A consumer that fails for good
//!   ([`DeliveryError::permanent`]) parks the row: the effect stays at its
//!   head, shown as parked ([`RowPending::is_parked`], [`Parked`]), until
//!   [`Outbox::unpark`] or [`Outbox::drop_parked`].
//! - **Amazon DynamoDB** (feature `aws`): `DynamoTable` implements
//!   [`Table`] with `aws-sdk-dynamodb` (requests validated as the embedded
//!   table validates them, expressions with placeholders only, the SDK's
//!   retries with backoff for throttling); `create_table` provisions the
//!   single table idempotently; `DynamoStreams` reads the table's DynamoDB
//!   Streams in the Lambda record shape and `StreamsFollower` feeds
//!   [`process_batch`] with a durable checkpoint per shard. (`eddy dynamo
//!   create-table`, its command line, lives in the `eddy` binary.)
//! - **Request accounting**: every backend counts its requests by kind
//!   ([`Table::request_stats`], [`RequestStats`]).
//!
//! Every error has a stable code ([`TableError::code`], [`Error::code`],
//! [`PositionError::code`]),
//! kept out of its message; a table error also has a [`TableErrorKind`]
//! that decides whether to retry, and keeps its cause as its source.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use eddy_dynamo::{make_stream, AppSchema, EmbeddedTable, TableSchema};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! enum Counter {
//!     Incremented { by: u32 },
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), eddy_dynamo::Error> {
//! let table = EmbeddedTable::memory(TableSchema::single_table("app"));
//! let stream = make_stream::<Counter>(Arc::new(table), AppSchema::new("app", 1), "Counter", &["id"])?;
//! let id = stream.id([("id", "c-1")])?;
//! stream.append(&id, &[Counter::Incremented { by: 2 }], 0).await?;
//! // A second writer that still expects version 0 loses.
//! let late = stream.append(&id, &[Counter::Incremented { by: 5 }], 0).await;
//! assert_eq!(late.unwrap_err().code(), "VersionConflict");
//! assert_eq!(stream.current_version(&id).await?, 1);
//! # Ok(())
//! # }
//! ```
//!
//! Reading the change feed in batches, saving the position each read hands
//! out:
//!
//! ```
//! use eddy_dynamo::{s, ChangeFeed, EmbeddedTable, FeedPosition, Item, Put, Table, TableSchema};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let table = EmbeddedTable::memory(TableSchema::single_table("app"));
//! for i in 0..5 {
//!     let item = Item::from([("pk".to_owned(), s(format!("k{i}"))), ("sk".to_owned(), s("x"))]);
//!     table.put_item(Put::new(item)).await?;
//! }
//! let mut saved: Option<String> = None; // what a consumer keeps between runs
//! let mut seen = 0;
//! loop {
//!     let after = saved.as_deref().map(str::parse::<FeedPosition>).transpose()?;
//!     let read = table.read_changes(after.as_ref(), 2).await?;
//!     let Some(position) = read.last_position() else { break };
//!     seen += read.len(); // … process read.records() …
//!     saved = Some(position.to_string());
//! }
//! assert_eq!(seen, 5);
//! assert_eq!(saved.as_deref(), Some(r#"{"feed":"embedded","after":5}"#));
//! # Ok(())
//! # }
//! ```
//!
//! # Removed rows and DynamoDB Streams' shards
//!
//! DynamoDB Streams orders records within a shard only, and each event
//! stream's partition lands in its own shard. A removal (a tombstone) can
//! therefore be delivered *before* an event of another source that
//! happened *before* it:
//!
//! ```text
//!                  when the events happened ───────────────────────▶
//! shard A (orders) │ ParcelAdded(sh-1) t1 ........ OrderCancelled(sh-1) t3
//! shard B (scale)  │            Weighed(sh-1, 5 kg) t2
//!
//! delivery ───────▶ batch of A: [ParcelAdded, OrderCancelled]   batch of B: [Weighed]
//! sh-1:             {parcels 2} ──▶ tombstone ─────────────────▶ ?
//!   the spec's rule ("a later event starts the row again"):      {parcels 0, kg 5}
//!   only orders restart (restarts_removed_rows):                 tombstone, weighing recorded
//! ```
//!
//! By the spec's rule the weighing, old news from the scale's shard,
//! brings the cancelled shipment back holding only its weight. A source
//! declared with [`SourceBuilder::restarts_removed_rows`] changes that: once
//! any source says so, only those sources' events start a removed row
//! again; an event of another source that would apply to a removed row
//! (its tombstone, or a removal earlier in the same write) is recorded in
//! the checkpoints, so it is never applied later, and reported in
//! [`InstanceOutcome::after_removal`]. Without it, the spec's behaviour
//! stands. (The same holds across batches of one shard split by a failure,
//! and within one write, where sources fold in declaration order.)
//!
//! # Features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `aws` | `DynamoTable`, `DynamoOptions`, `create_table` / `verify_table`, `DynamoStreams`, `StreamsFollower`, on `aws-sdk-dynamodb` and `aws-sdk-dynamodbstreams` |
//! | `lambda` | the `lambda` example binary on `lambda_runtime` |
//!
//! Without features the crate builds no AWS SDK (the SDK takes minutes to
//! compile); the embedded table needs none.
//!
//! # Where the Rust shape differs from the spec
//!
//! - Events are a serde enum in its default representation; the variant
//!   name is the event type, so an unknown type is told apart from bad data.
//! - `evolve` returns `Result<Step<M>, EvolveError>` (a plain `M` is a
//!   `Step::Next`); `EvolveError` wraps an error of any type, and
//!   `terminal` is declared for one type and matches by downcasting.
//! - A row key is a typed value `K` (a struct of the key composites, a
//!   tuple of their values, or one value), not a dynamic map.
//! - A single-source row remembers which stream instance feeds it
//!   (`__edd_src__`); a second instance is refused with
//!   `ProjectionSourceConflict` instead of corrupting the checkpoint.
//! - `process_batch` takes records in the Lambda shape only: the embedded
//!   feed produces that shape too, so no `source` option is needed.
//! - DynamoDB Streams records are converted to the Lambda shape as they are
//!   read, so the follower and Lambda share one decoding path.
//! - With removal declared, one instance's failure is not quite its own: it
//!   holds back the instances folded after it in its row (and all of them
//!   when a removal was folded before it), reported as `Deferred`, so the
//!   retry folds them in the spec's order. A removal does not commute with
//!   other sources' events, and a fault must not change what a row holds.
//! - Beyond the spec, a source may be declared the only kind that starts a
//!   removed row again (above); events of the other sources on a removed
//!   row are recorded and not applied.
//! - A row write DynamoDB's limits cannot hold (100 items, 4 MB, 400 KB an
//!   item) is made in parts, split between events; the spec's "at most 99
//!   effects per write" is a limit of each part, not of the row.
//! - `StreamsFollower` keeps its per-shard checkpoints as items of another
//!   table (refused in the followed table, whose stream would then carry
//!   its own checkpoints).
#![deny(missing_docs)]

mod accounting;
mod app_schema;
mod batch;
mod change_feed;
mod command;
mod condition;
#[cfg(feature = "aws")]
mod dynamo;
mod embedded;
mod entity;
mod error;
mod event_item;
mod event_stream;
mod feed_position;
mod follower;
mod item;
mod key_schema;
mod lambda;
mod metrics;
mod outbox;
mod projection;
mod query;
mod request;
mod table;
mod table_error;
mod tombstone;
mod update;
mod variants;

pub use accounting::RequestStats;
pub use app_schema::{AppSchema, ENTITY_ATTRIBUTE};
pub use batch::{
    process_batch, process_batch_delivering, BatchProjection, BatchResult, FailedRecord,
    IgnoreReason, IgnoredRecord,
};
pub use change_feed::{ChangeFeed, ChangeRecord, FeedRead};
pub use command::CommandError;
pub use condition::{AttributeType, Comparator, Condition};
#[cfg(feature = "aws")]
pub use dynamo::{
    create_table, verify_table, DynamoOptions, DynamoStreams, DynamoTable, Provisioned,
    ShardCheckpoint, ShardInfo, ShardRead, StreamsFollower,
};
pub use embedded::{EmbeddedTable, DEFAULT_FEED_RETENTION};
pub use entity::{Entity, KeyComposite};
pub use error::{BoxError, CancellationReason, Error, TableError, TableErrorKind, ValidationError};
pub use event_item::{EventItem, StreamId, StreamIdentity};
pub use event_stream::{make_stream, EventStream, StoredEvent, MAX_APPEND};
pub use feed_position::{FeedPosition, PositionError};
pub use follower::Follower;
pub use item::{
    compare_values, get_present, get_str, get_u64, item_size, items_equal, n, s, value_size,
    values_equal, AttributeValue, Item, ScalarType, MAX_ITEM_SIZE, MAX_TRANSACTION_SIZE,
};
pub use key_schema::{
    IndexDefinition, KeyAttribute, KeyDefinition, TableSchema, MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
};
pub use lambda::{
    handle_stream_event, handle_stream_event_delivering, StreamEvent, StreamEventResponse,
};
pub use metrics::describe_metrics;
pub use outbox::{
    Clock, Deliver, DeliveryError, DrainReport, Effect, LastFailure, Outbox, Parked, PendingClaim,
    PendingReport, RowPending, Undelivered, DEFAULT_CLAIM_FOR, MAX_EFFECTS_PER_WRITE,
    MAX_ERROR_BYTES,
};
pub use projection::{
    Checkpoints, EffectCommit, EffectEvent, EvolveError, InstanceOutcome, Mode, MultiProjection,
    MultiProjectionBuilder, PendingEffect, Projection, ProjectionBuilder, RebuildInstances,
    RecordFailure, Removal, Revision, RowOutcome, RowReport, SourceBuilder, SourceContext,
    SourceField, Step, SOURCE_ATTRIBUTE,
};
pub use query::{Query, QueryPage, Scan, SortCondition};
pub use request::{ConditionCheck, Delete, Put, TableWrite, TransactWriteItem, UpdateItem};
pub use table::Table;
pub use table_error::error_chain;
pub use tombstone::REVISION_NAME_ATTRIBUTE;
pub use update::{Update, UpdateAction};
