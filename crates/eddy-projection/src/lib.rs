//! Projections over Eddy streams.
//!
//! A projection reads one or more input streams and keeps something up to
//! date from them: a state value, output streams, or external effects.
//! This crate declares projections, binds them to parameters, runs them
//! with checkpoints on the same [`Storage`](eddy_streams::Storage), and
//! commits each unit of work with a chosen guarantee.
//!
//! # The pieces
//!
//! - [`Declare`] starts a declaration (id, parameters `P`). Each
//!   [`input`](Declare::input) and [`output`](Declare::output) returns a
//!   typed handle ([`Input<T>`], [`Output<T>`], [`StateOutput`] and its
//!   [`Collection<R>`]s). A constructor finishes it into a [`Projection`]
//!   (or, with [`Entries::at`], straight into a binding):
//!   [`fold`](Declare::fold), [`emit`](Declare::emit),
//!   [`map_accum`](Declare::map_accum) and
//!   [`process_each`](Declare::process_each) take one entry handler per
//!   input through [`Entries::on`]; [`process`](Declare::process) and
//!   [`map_accum_batch`](Declare::map_accum_batch) take one batch handler.
//! - [`Projection::at`] binds it to parameters ([`Bound`]);
//!   [`Projection::parse`] finds the parameters in an input path.
//! - [`Commit`] says how a unit becomes durable: [`Commit::checkpoint`],
//!   [`Commit::producer`], [`Commit::at_least_once`], each optionally
//!   [`with_compensation`](Commit::with_compensation).
//! - A [`Host`] (storage plus a [`CheckpointStore`]) runs bindings:
//!   [`Host::run`] returns a [`Progress`]; [`Host::follow`] is a pull-based
//!   stream of them; [`Host::read`], [`Host::current`] and
//!   [`Host::decide`] look at state without moving anything;
//!   [`Host::forget`] drops a binding's checkpoint on purpose.
//! - [`inspect()`] looks at every binding whose checkpoint lives in a
//!   store, from outside: its state, units, last commit, pinned unit and
//!   each input's lag behind its tail (what `eddy status` prints).
//! - [`wake`] declares a wake projection; [`Host::attach`] runs bindings
//!   when their inputs commit and reports each one's status. With
//!   [`AttachOptions::durable`] on SQLite or PostgreSQL each commit also
//!   writes a pending mark in its transaction, so a crash before the run
//!   loses nothing; [`wake_marks()`] lists the marks.
//!
//! # Example: revenue
//!
//! A `fold` of order amounts, run once on a memory store (the examples
//! directory has the other common cases: `fold_on_sqlite`, `emit_served`,
//! `rows_followed`):
//!
//! ```
//! use std::sync::Arc;
//! use eddy_projection::{Declare, Host, RunOptions};
//! use eddy_streams::{JsonStream, MemoryStorage};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let orders = JsonStream::<f64>::new("Shop/Orders", "orders")?;
//! let declare = Declare::new("revenue");
//! let input = declare.input("orders", &orders);
//! let revenue = declare.fold(0.0).on(input, |sum, order, _| sum + order.item).at(())?;
//!
//! let store = Arc::new(MemoryStorage::new());
//! orders.create(&*store, &()).await?;
//! orders.append(&*store, &(), &[12.5, 7.0]).await?;
//! let progress = Host::new(store).run(&revenue, RunOptions::default()).await?;
//! assert_eq!(progress.state, Some(19.5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Example: order totals
//!
//! An `emit` whose handler writes typed items to its output through the
//! output's handle, committed by its producer:
//!
//! ```
//! use std::sync::Arc;
//! use eddy_projection::{Commit, Declare, Host, RunOptions, Status};
//! use eddy_streams::{JsonStream, MemoryStorage, ReadFrom};
//!
//! #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
//! #[serde(rename_all = "camelCase")]
//! struct Order { order_id: String, amount: f64 }
//! #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
//! #[serde(rename_all = "camelCase")]
//! struct Total { order_id: String, total: f64 }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let orders = JsonStream::<Order>::new("Shop/Orders", "orders")?;
//! let order_totals = JsonStream::<Total>::new("Shop/OrderTotals", "order-totals")?;
//!
//! let declare = Declare::<()>::new("order-totals");
//! let input = declare.input("input", &orders);
//! let totals = declare.output("totals", &order_totals);
//! let bound = declare
//!     .emit(Commit::producer())
//!     .on(input, move |entry, _unit, emits| {
//!         let order = entry.item;
//!         emits.push(totals, Total { order_id: order.order_id.clone(), total: order.amount });
//!     })
//!     .at(())?;
//!
//! let storage = Arc::new(MemoryStorage::new());
//! orders.create(storage.as_ref(), &()).await?;
//! orders.append(storage.as_ref(), &(), &[
//!     Order { order_id: "a".into(), amount: 3.0 },
//!     Order { order_id: "b".into(), amount: 4.5 },
//! ]).await?;
//!
//! let host = Host::new(storage.clone());
//! let progress = host.run(&bound, RunOptions::default().with_limit(10)).await?;
//! assert_eq!((progress.units, progress.items, progress.status), (1, 2, Status::CaughtUp));
//!
//! let written = order_totals.read(storage.as_ref(), &(), ReadFrom::Beginning).await?;
//! assert_eq!(written.items[1], Total { order_id: "b".into(), total: 4.5 });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # How the spec maps to Rust
//!
//! - **Layers become values.** A [`Host`] holds the storage and the
//!   checkpoint store that the spec's host layers provide; the default
//!   retry schedule is a [`Retry`] on the host instead of a context
//!   reference.
//! - **Schemas become serde.** Parameters, items and state are serde
//!   types. The parameter names of a struct `P` are read from its serde
//!   field list, so the params-subset rule is checked when the declaration
//!   is built; route parameters take their values (and so their types)
//!   from `P` when bound. Map-like `P` are checked when bound.
//! - **Inputs and outputs are typed handles.** Inputs of different item
//!   types need no common type: a per-entry constructor takes one handler
//!   per input ([`Entries::on`]), typed by that input's handle, and a
//!   batch handler reads each input's slice by its handle
//!   ([`Batch::items`]). Handlers write outputs through [`Emits`] with
//!   their handles, so a wrong output or item type does not compile, and
//!   a state output's collections take only their row type.
//! - **The commit fit is a type.** [`Commit`] carries its strategy as a
//!   type: `fold` takes [`CheckpointCommit`] (its default) or
//!   [`AtLeastOnceCommit`]; `process` takes [`AtLeastOnceCommit`]; `emit`,
//!   `mapAccum` and `mapAccumBatch` take [`ProducerCommit`]. Any other pair
//!   does not compile. [`Commit::transaction`] is the commit of
//!   [`Declare::process_transaction`] (and
//!   [`process_prepared`](Declare::process_prepared)), whose
//!   [`TransactionProjection`] only a SQL host runs (`PgHost` with the
//!   feature `postgres`; [`SqliteHost`] for projections declared with
//!   [`Declare::process_sqlite`], whose handler gets a
//!   `rusqlite::Transaction`): a memory [`Host`] does not compile with it.
//!   A SQL host runs, follows and attaches them ([`SqliteHost::run`],
//!   [`SqliteHost::follow`], [`SqliteHost::attach`]) with the rules of the
//!   plain host's runners. A binding keeps its checkpoint in one home per
//!   store: the SQL host's table or the store's checkpoint streams,
//!   whichever ran it first (`checkpoint/elsewhere` for the other).
//! - **What stays a run-time check** (`load/invalid-options` when the
//!   constructor runs, unless noted): the id, at least one input, outputs
//!   only where the constructor writes them, unique names, distinct
//!   streams, the params-subset rule, a handler for every input, a
//!   collection the state stream declares, and a handle of another
//!   declaration (in a batch handler: the unit fails, nothing written).
//!   A row whose type or key the state stream refuses fails its unit with
//!   `pin/invalid-output` before anything of the unit is written.
//! - **Handlers return a value, or are async closures.** A synchronous
//!   handler returns the value itself, or a [`Step`] for fallible work.
//!   The `_async` variants ([`Entries::on_async`],
//!   [`Declare::process_async`], [`Declare::map_accum_batch_async`],
//!   [`Commit::with_compensation_async`], and the handlers of
//!   [`Declare::process_transaction`]) take async closures,
//!   `async move |state, entry, unit| { … }`, with no boxing or argument
//!   types to write ([`AsyncHandler`]); the future may borrow the entry,
//!   the unit, the batch and the outputs for the duration of the call.
//!   Each call runs a clone of the closure, so it may capture handles and
//!   `Arc`s by `move`.
//! - **No `mut`, one step to bind.** [`Declare`] records inputs and
//!   outputs through `&self`; [`Entries::at`] builds and binds at once
//!   (keep [`Entries::build`] for a [`Projection`] bound many times).
//! - **Outputs** are [`JsonStream`](eddy_streams::JsonStream)s or
//!   [`StateStream`](eddy_streams::StateStream)s. An output's owner is
//!   this projection's storage unless it is declared with
//!   [`Declare::foreign_output`].
//! - **`follow` is a `futures::Stream`** that runs a cycle per pull;
//!   dropping it stops the follower.
//! - **`limit` counts units**; `unit_size` (default 1000) bounds the items
//!   one input contributes to a unit, and `unit_bytes` (default 4 MiB) its
//!   bytes beyond the first item. A unit's output larger than one append
//!   ([`Host::with_append_limit`], the store's 8 MiB by default) is written
//!   in several appends of its producer, recorded in the unit's pin so that
//!   a replay sends the same ones.
//!
//! # Checkpoints
//!
//! A [`CheckpointStore`] moves each binding's checkpoint by compare-and-set
//! on a [`Token`], so a second writer fails with `checkpoint/conflict` and
//! nothing is overwritten. [`StreamCheckpoints`], the default, keeps it in
//! two slot streams under `__eddy/checkpoints/<id>/<version>/<params>/`
//! that take turns: a binding's checkpoint storage stays at most two slots
//! of [`SLOT_RECORDS`] messages, however many units it commits
//! (`ARCHITECTURE.md` has the protocol and its crash cases). Each save is
//! one append, so a checkpoint must fit the store's append limit (8 MiB by
//! default): a larger one fails with `checkpoint/too-large`, naming the
//! binding, and writes nothing. A checkpoint
//! deleted behind the engine's back fails with `checkpoint/vanished` rather
//! than being rebuilt; [`Host::forget`] forgets a binding on purpose.
//! `eddy serve` takes writes under [`RESERVED_PREFIX`] only with its admin
//! token: give that token to a remote projection worker.
//!
//! Producer ids are derived from the binding, the output and a generation
//! fixed when the checkpoint is first written; sequence numbers count the
//! appends to each output (one per unit that wrote to it, more when its
//! items were over the append limit). A binding that is forgotten (by
//! [`Host::forget`], or after the final unit of a gone input) releases its
//! producer on each output first ([`Storage::release_producer`](eddy_streams::Storage::release_producer)),
//! so a shared output such as a wake stream stays under the store's
//! producer cap however many bindings came and went. A binding kept after
//! its input is gone ([`Declare::with_keep_gone`]) keeps its producers until it
//! is forgotten; a remote store keeps them all (the protocol cannot
//! release one).
//!
//! # Inputs that keep part of their history
//!
//! A stream with a retention policy drops its oldest messages. A binding
//! whose unread messages were dropped (or a new binding of a stream whose
//! first messages were) fails with `history-unavailable`, naming the
//! earliest offset kept: folding what is left would give another result
//! than the full history, silently. An input declared with
//! [`Declare::accept_dropped_history`] goes on from the earliest message
//! kept instead, for handlers that do not need every message (a latest
//! value, a recent window). A pinned unit whose range was dropped cannot
//! be replayed: `range-unreproducible`, and the pin stays.
//!
//! ```
//! use eddy_projection::Declare;
//! use eddy_streams::JsonStream;
//!
//! let prices = JsonStream::<f64>::new("Prices", "prices")?;
//! let declare = Declare::<()>::new("last-price");
//! let input = declare.input("prices", &prices);
//! declare.accept_dropped_history(&input);
//! let last = declare.fold(0.0).on(input, |_, entry, _| *entry.item).build()?;
//! # let _ = last;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A compacted stream (a state stream with an `Eddy-Compaction` policy)
//! keeps every offset but drops a row's change that a later change of
//! the same row supersedes. A binding whose unread range a pass thinned
//! fails with `history-unavailable` too, unless its input is declared
//! with [`Declare::accept_compaction`]: right only for handlers whose
//! result depends on the latest message of each key (materialized rows,
//! a latest value per key). Such a handler sees the kept messages in
//! order, each [`Entry`] at the store's own offset (with gaps), and a
//! unit's [`Range`] records how many items it kept ([`Thinned`]), so
//! that a pinned unit whose range a later pass thinned again fails its
//! replay with `range-unreproducible` instead of running on other items.
//! The store keeps a delete for the stream's delete lifetime, then drops
//! it with the row's older changes, and says where
//! ([`DroppedDeletes`](eddy_streams::DroppedDeletes)). A binding that
//! resumes from its checkpoint before such a dropped delete, while the
//! stream dropped deletes since the binding last read it, may have read
//! an older change of the row and never see the delete: it fails with
//! `history-unavailable` instead of keeping a row that is gone. Keep such
//! bindings within the delete lifetime, or rebuild one that failed from
//! the start ([`Host::forget`], then run it): a binding that reads from
//! the stream's start never read the dropped rows.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use eddy_projection::Declare;
//! use eddy_streams::Route;
//! use serde_json::Value;
//!
//! // The rows of the state stream `carts/<id>`, by key: an upsert writes
//! // the whole row, a delete removes it.
//! #[derive(serde::Serialize, serde::Deserialize, Clone)]
//! struct Cart {
//!     id: String,
//! }
//! let declare = Declare::<Cart>::new("cart-rows");
//! let changes = declare.input_route::<Value>("changes", Route::new("carts/:id")?);
//! declare.accept_compaction(&changes);
//! let rows = declare
//!     .fold(BTreeMap::<String, Value>::new())
//!     .on(changes, |mut rows, entry, _| {
//!         let key = entry.item["key"].as_str().unwrap_or_default().to_owned();
//!         match entry.item["headers"]["operation"].as_str() {
//!             Some("delete") => rows.remove(&key),
//!             _ => rows.insert(key, entry.item["value"].clone()),
//!         };
//!         rows
//!     })
//!     .build()?;
//! # let _ = rows;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Error codes
//!
//! [`ProjectionError::code`] gives `load/invalid-options`,
//! `pin/invalid-output`, `history-unavailable`, `range-unreproducible`,
//! `storage-failure`, `checkpoint/conflict`, `checkpoint/vanished`,
//! `checkpoint/too-large`, `checkpoint/elsewhere`, `checkpoint/invalid`,
//! `input/invalid-item`, `handler/failed`, `compensation/failed`, or the
//! store's own code.
#![deny(missing_docs)]

mod attach;
mod batch;
mod bind;
mod build;
mod checkpoint;
mod commit;
mod declare;
mod digest;
mod dispatch;
mod durable;
mod emits;
mod error;
mod follow;
mod handler;
mod handles;
mod host;
mod inputs;
mod inspect;
mod metrics;
mod params;
mod progress;
mod retry;
mod run;
mod runner;
mod session;
mod step;
mod stream_checkpoints;
mod transaction;
mod unit_key;
mod wake;

pub use crate::metrics::describe_metrics;
pub use attach::{
    AttachError, AttachOptions, AttachStatus, Attached, BindingState, BindingStatus,
    DEFAULT_CONCURRENCY, DEFAULT_STATUS_CAPACITY,
};
pub use batch::{Batch, Entry, Range, Slice, Thinned, Unit};
pub use bind::Bound;
pub use build::{EachEntries, EmitEntries, Entries, FoldEntries, MapAccumEntries};
pub use checkpoint::{
    Checkpoint, CheckpointKey, CheckpointStore, Failure, InputMark, Loaded, Pending, Token,
    CHECKPOINT_PREFIX, RESERVED_PREFIX,
};
pub use commit::{
    AtLeastOnceCommit, CheckpointCommit, Commit, CommitKind, CommitStrategy, FoldCommit,
    ProcessCommit, ProducerCommit, TransactionCommit, UnitResult,
};
pub use declare::{Declare, Kind, Params, Projection, State};
pub use durable::{wake_marks, WakeMarkReport, FIRST_DEFERRAL, MAX_DEFERRAL};
pub use emits::Emits;
pub use error::{HandlerError, ProjectionError, Result};
pub use follow::Follow;
pub use handler::AsyncHandler;
pub use handles::{Collection, Input, Output, StateOutput};
pub use host::Host;
pub use inspect::{
    inspect, inspect_with, BindingHealth, BindingReport, InputLag, LAG_SCAN_BYTES, NOT_RUN_YET,
};
pub use progress::{
    FollowOptions, Pass, Progress, RunOptions, Status, DEFAULT_REPAIR_INTERVAL, DEFAULT_UNIT_BYTES,
    DEFAULT_UNIT_SIZE,
};
pub use retry::{Retry, MAX_INTERVAL};
pub use step::Step;
pub use stream_checkpoints::{StreamCheckpoints, SLOT_BYTES, SLOT_MIN_RECORDS, SLOT_RECORDS};
#[cfg(feature = "postgres")]
pub use transaction::postgres::{PgCheckpoints, PgHost, PgTx};
pub use transaction::{
    SqliteCheckpoints, SqliteHost, SqliteTx, TransactionBound, TransactionProjection, Work,
};
pub use wake::{wake, wake_stream, WakeRow, WAKE_COLLECTION};
