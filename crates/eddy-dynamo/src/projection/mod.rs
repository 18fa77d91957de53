//! Projections: events folded into read-model rows, each row guarded by the
//! checkpoints of the stream instances that feed it (or a revision).
//!
//! - `step.rs`: what `evolve` returns ([`Step`]) and its typed failure
//!   ([`EvolveError`]).
//! - `options.rs`: [`Mode`], [`Revision`], [`Removal`].
//! - `core.rs` + `fold.rs` + `write.rs`: the row core, shared by every kind
//!   of projection: per row, one read, every (source, instance) folded in a
//!   fixed order, one guarded write (several when DynamoDB's limits,
//!   `limits.rs`, cannot hold it in one).
//! - `slots.rs`: where a row keeps its instances' checkpoints;
//!   `slot_map.rs`: the multi-source layout ([`Checkpoints`]).
//! - `effects.rs`: the outbox seam ([`EffectCommit`], [`PendingEffect`]).
//! - `single.rs`: [`Projection`], one source, one scalar checkpoint per row.
//! - `multi.rs`: [`MultiProjection`], several sources.
//! - `repair.rs`: rebuild and catch-up of one row.
//! - `outcome.rs`: what applying reports.

mod core;
mod effects;
mod fold;
mod limits;
mod multi;
mod options;
mod outcome;
mod repair;
mod single;
mod slot_map;
mod slots;
mod step;
mod write;

pub use self::effects::{EffectCommit, EffectEvent, PendingEffect};
pub use self::multi::{MultiProjection, MultiProjectionBuilder, SourceBuilder, SourceContext};
pub use self::options::{Mode, Removal, Revision};
pub use self::outcome::{InstanceOutcome, RecordFailure, RowOutcome, RowReport};
pub use self::repair::RebuildInstances;
pub use self::single::{Projection, ProjectionBuilder};
pub use self::slot_map::{Checkpoints, SourceField};
pub use self::step::{EvolveError, Step};

/// The attribute that names the stream instance a single-source row is
/// folded from.
pub const SOURCE_ATTRIBUTE: &str = "__edd_src__";
