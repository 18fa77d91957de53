//! Projections: events folded into read-model rows, each row guarded by the
//! checkpoints of the stream instances that feed it (or a revision).
//!
//! - `step.rs`: what `evolve` returns ([`Step`]) and its typed failure
//!   ([`EvolveError`]).
//! - `core.rs` + `fold.rs`: the row core, shared by every kind of
//!   projection: per row, one read, every (source, instance) folded in a
//!   fixed order, one guarded write.
//! - `slots.rs`: where a row keeps its instances' checkpoints.
//! - `single.rs`: [`Projection`], the single-source projection: one source,
//!   one scalar checkpoint per row.
//! - `outcome.rs`: what applying reports.

mod core;
mod fold;
mod outcome;
mod single;
mod slots;
mod step;

pub use self::outcome::{InstanceOutcome, RecordFailure, RowOutcome, RowReport};
pub use self::single::{Projection, ProjectionBuilder};
pub use self::step::{EvolveError, Step};

/// The attribute that names the stream instance a single-source row is
/// folded from.
pub const SOURCE_ATTRIBUTE: &str = "__edd_src__";
