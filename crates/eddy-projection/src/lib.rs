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
//! - [`Declare`] starts a declaration (id, parameters `P`, item type `I`,
//!   inputs, outputs); a constructor finishes it into a [`Projection`]:
//!   [`fold`](Declare::fold), [`process`](Declare::process) (with the
//!   [`each`] adapter), [`emit`](Declare::emit),
//!   [`map_accum`](Declare::map_accum) and
//!   [`map_accum_batch`](Declare::map_accum_batch).
//! - [`Projection::at`] binds it to parameters ([`Bound`]);
//!   [`Projection::parse`] finds the parameters in an input path.
//! - [`Commit`] says how a unit becomes durable: [`Commit::checkpoint`],
//!   [`Commit::producer`], [`Commit::at_least_once`], each optionally
//!   [`with_compensation`](Commit::with_compensation).
//! - A [`Host`] (storage plus a [`CheckpointStore`]) runs bindings:
//!   [`Host::run`] returns a [`Progress`]; [`Host::follow`] is a pull-based
//!   stream of them; [`Host::read`], [`Host::current`] and
//!   [`Host::decide`] look at state without moving anything.
//! - [`wake`] declares a wake projection; [`Host::attach`] runs bindings
//!   when their inputs commit.
//!
//! # Example: order totals
//!
//! ```
//! use std::sync::Arc;
//! use eddy_projection::{Commit, Declare, Emits, Host, RunOptions, Status};
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
//! let totals = JsonStream::<Total>::new("Shop/OrderTotals", "order-totals")?;
//!
//! let order_totals = Declare::<(), Order>::new("order-totals")
//!     .input("input", &orders)
//!     .output("totals", &totals)
//!     .emit(Commit::producer(), |entry, _unit| {
//!         let order = entry.item;
//!         Emits::new().json("totals", [Total { order_id: order.order_id.clone(), total: order.amount }])
//!     })?;
//! let bound = order_totals.at(())?;
//!
//! let storage = Arc::new(MemoryStorage::new());
//! orders.create(storage.as_ref(), &()).await?;
//! orders.append(storage.as_ref(), &(), &[
//!     Order { order_id: "a".into(), amount: 3.0 },
//!     Order { order_id: "b".into(), amount: 4.5 },
//! ]).await?;
//!
//! let host = Host::new(storage.clone());
//! let progress = host.run(&bound, RunOptions::limit(10)).await?;
//! assert_eq!((progress.units, progress.items, progress.status), (1, 2, Status::CaughtUp));
//!
//! let written = totals.read(storage.as_ref(), &(), ReadFrom::Beginning).await?;
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
//! - **Several inputs share one item type `I`.** Each input decodes its
//!   own type `T` and converts it with `Into<I>`; use an enum for inputs
//!   of different types. Entries carry their input's name.
//! - **Handlers return a value or a future** through [`Step`]: return the
//!   value itself, [`Step::result`] for fallible work, or [`Step::future`]
//!   for async work (which owns what it uses).
//! - **The commit fit is checked when the constructor runs**: a pair that
//!   cannot work fails with `load/invalid-options` before anything runs.
//!   `fold` takes `checkpoint` (its default) or `atLeastOnce`; `process`
//!   takes `atLeastOnce`; `emit`, `mapAccum` and `mapAccumBatch` take
//!   `producer`. The SQL `transaction` commit is not in this crate yet.
//! - **Outputs** are [`JsonStream`](eddy_streams::JsonStream)s (items via
//!   [`Emits::json`]) or [`StateStream`](eddy_streams::StateStream)s (row
//!   changes and controls via [`Emits::state`] and [`StateEntry`]). An
//!   output's owner is this projection's storage unless it is declared
//!   with [`Declare::foreign_output`].
//! - **`follow` is a `futures::Stream`** that runs a cycle per pull;
//!   dropping it stops the follower.
//! - **`limit` counts units**; `unit_size` (default 1000) bounds the items
//!   one input contributes to a unit.
//!
//! # Checkpoints
//!
//! A [`CheckpointStore`] moves each binding's checkpoint by compare-and-set
//! on a [`Token`], so a second writer fails with `checkpoint/conflict` and
//! nothing is overwritten. [`StreamCheckpoints`], the default, keeps it in
//! two slot streams under `__eddy/checkpoints/<id>/<version>/<params>/`
//! that take turns: a binding's checkpoint storage stays at most two slots
//! of [`SLOT_RECORDS`] records, however many units it commits
//! (`ARCHITECTURE.md` has the protocol and its crash cases). A checkpoint
//! deleted behind the engine's back fails with `checkpoint/vanished` rather
//! than being rebuilt; [`Host::forget`] forgets a binding on purpose.
//! `eddy serve` takes writes under [`RESERVED_PREFIX`] only with its admin
//! token: give that token to a remote projection worker.
//!
//! Producer ids are derived from the binding, the output and a generation
//! fixed when the checkpoint is first written; sequence numbers count the
//! units that wrote to each output.
//!
//! # Error codes
//!
//! [`ProjectionError::code`] gives `load/invalid-options`,
//! `pin/invalid-output`, `history-unavailable`, `range-unreproducible`,
//! `storage-failure`, `checkpoint/conflict`, `checkpoint/vanished`,
//! `checkpoint/invalid`, `input/invalid-item`, `handler/failed`, or the
//! store's own code.
#![deny(missing_docs)]

mod attach;
mod batch;
mod bind;
mod checkpoint;
mod commit;
mod declare;
mod dispatch;
mod emits;
mod error;
mod follow;
mod handler;
mod host;
mod inputs;
mod params;
mod progress;
mod retry;
mod run;
mod session;
mod step;
mod stream_checkpoints;
mod streams;
mod unit_key;
mod wake;

pub use attach::{AttachError, AttachOptions, AttachStatus, Attached, BindingState, BindingStatus};
pub use batch::{Batch, Entry, Range, Slice, Unit};
pub use bind::Bound;
pub use checkpoint::{
    Checkpoint, CheckpointKey, CheckpointStore, InputMark, Loaded, Pending, Token,
    CHECKPOINT_PREFIX, RESERVED_PREFIX,
};
pub use commit::{Commit, CommitKind, UnitResult};
pub use declare::{Declare, Item, Kind, Params, Projection, State};
pub use emits::{Emits, StateEntry};
pub use error::{HandlerError, ProjectionError, Result};
pub use handler::{each, BatchMarker, Each, EachMarker, ProcessHandler};
pub use host::Host;
pub use progress::{
    FollowOptions, Pass, Progress, RunOptions, Status, DEFAULT_REPAIR_INTERVAL, DEFAULT_UNIT_SIZE,
};
pub use retry::{Retry, MAX_INTERVAL};
pub use step::Step;
pub use stream_checkpoints::{StreamCheckpoints, SLOT_BYTES, SLOT_RECORDS};
pub use streams::{Input, IntoOutput, Output};
pub use wake::{wake, wake_stream, WakeRow, WAKE_COLLECTION};
