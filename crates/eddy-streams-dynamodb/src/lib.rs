//! The stream store on one DynamoDB table.
//!
//! [`DynamoBackend`] stores the records of `eddy-streams` as items of one
//! table; [`DynamoStorage`] (eddy-streams' `RecordStorage` over it) is a
//! whole [`Storage`](eddy_streams::Storage): every rule comes from the
//! store's one engine, this crate only stores and loads. Any number of
//! processes share the table with no state of their own: each call is
//! one `TransactWriteItems` conditioned on the records it read, so
//! writers in different processes take turns by optimistic concurrency,
//! and readers wake at other processes' commits by polling the records of
//! the streams they wait on.
//!
//! The table is any eddy-dynamo `Table` with a
//! string partition and sort key: Amazon DynamoDB (feature `aws`,
//! `connect`), or eddy-dynamo's embedded table (for tests, or one
//! process). Items of other kinds in the same table are left alone. The
//! item layout, the commit protocol and its crash cases are in the
//! crate's `DESIGN.md`.
//!
//! # Features
//!
//! | feature | adds |
//! | --- | --- |
//! | `aws` | `connect`: the store on Amazon DynamoDB through `aws-sdk-dynamodb` |
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use eddy_dynamo::{EmbeddedTable, TableSchema};
//! use eddy_streams::{Append, Payload, ReadFrom, Storage, StreamConfig, StreamPath};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), eddy_streams::StreamError> {
//! let table = EmbeddedTable::memory(TableSchema::single_table("streams"));
//! let store = eddy_streams_dynamodb::open(Arc::new(table), eddy_streams_dynamodb::options())?;
//! let path = StreamPath::new("orders")?;
//! store.create(&path, StreamConfig::json(), Payload::empty()).await?;
//! store.append(&path, Append::body(r#"[{"id":1},{"id":2}]"#)).await?;
//! let chunk = store.read(&path, ReadFrom::Beginning, 1 << 20).await?;
//! assert_eq!(chunk.messages, vec![r#"{"id":1}"#, r#"{"id":2}"#]);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod backend;
mod commit;
mod compact;
mod documents;
mod errors;
mod keys;
mod old_tombstones;
mod pack;
mod path_item;
mod query;
mod retention;
mod staging;
mod steps;
mod sweep;
mod unit;
mod walk;

use std::sync::Arc;

use eddy_dynamo::{Table, TableSchema};
use eddy_streams::backend::{RecordOptions, RecordStorage};
use eddy_streams::StreamError;

pub use backend::{DynamoBackend, DEFAULT_PACK_BYTES};
pub use unit::{DynamoUnit, Savepoint, StreamKey};

/// The stream store on a DynamoDB table.
pub type DynamoStorage = RecordStorage<DynamoBackend>;

/// The largest append the store accepts by default: one transaction holds
/// at most 4 MB, the append's messages and its records together.
pub const DEFAULT_MAX_APPEND_BYTES: usize = 3 * 1024 * 1024;

/// The default options of a DynamoDB store: eddy-streams' defaults, with
/// appends of at most [`DEFAULT_MAX_APPEND_BYTES`].
pub fn options() -> RecordOptions {
    RecordOptions {
        max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
        ..RecordOptions::default()
    }
}

/// The layout of a table for streams alone: eddy-dynamo's single table
/// (string keys `pk` and `sk`), no index needed.
pub fn layout(name: impl Into<String>) -> TableSchema {
    TableSchema::single_table(name)
}

/// The store on `table`. Appends larger than one transaction can hold
/// are refused whatever `options` allow.
pub fn open(
    table: Arc<dyn Table>,
    mut options: RecordOptions,
) -> Result<DynamoStorage, StreamError> {
    options.max_append_bytes = options.max_append_bytes.min(DEFAULT_MAX_APPEND_BYTES);
    Ok(RecordStorage::new(DynamoBackend::new(table)?, options))
}

/// The store on the DynamoDB table `table`, reached as `connection` says
/// (the standard AWS environment, `AWS_ENDPOINT_URL` included, for what
/// it leaves unset). The table must exist with the single-table key
/// (`eddy dynamo create-table --table NAME`). Removals that a crash
/// interrupted are finished in the background.
#[cfg(feature = "aws")]
pub async fn connect(
    connection: &eddy_dynamo::DynamoOptions,
    table: &str,
    options: RecordOptions,
) -> Result<DynamoStorage, StreamError> {
    let failed = |e| errors::table_error("opening the table", e);
    let schema = layout(table);
    let dynamo = eddy_dynamo::DynamoTable::connect(connection, schema.clone())
        .await
        .map_err(failed)?;
    eddy_dynamo::verify_table(dynamo.client(), &schema, false)
        .await
        .map_err(failed)?;
    let store = open(Arc::new(dynamo), options)?;
    let backend = store.backend().clone();
    tokio::spawn(async move {
        if let Err(error) = backend.purge_pending().await {
            tracing::warn!(%error, "finishing interrupted removals");
        }
    });
    Ok(store)
}

/// Creates the DynamoDB table `table` for streams ([`layout`]: on-demand
/// capacity, with the stream and TTL eddy-dynamo's tables get), unless it
/// exists with that key; what `eddy dynamo create-table --table NAME`
/// does.
#[cfg(feature = "aws")]
pub async fn create_table(
    connection: &eddy_dynamo::DynamoOptions,
    table: &str,
) -> Result<(), StreamError> {
    let failed = |e| errors::table_error("creating the table", e);
    let config = connection.sdk_config().await.map_err(failed)?;
    let client = aws_sdk_dynamodb::Client::new(&config);
    eddy_dynamo::create_table(&client, &layout(table).with_ttl("ttl"))
        .await
        .map_err(failed)?;
    Ok(())
}
