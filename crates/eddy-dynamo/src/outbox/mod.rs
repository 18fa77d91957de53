//! The ordered outbox: side effects committed in the same transaction as
//! their row, delivered in order per row, at least once.
//!
//! - `item.rs`: where an effect is stored and what its item holds.
//! - `drain.rs`: claim → deliver → delete, per row ([`Outbox::drain`]) and
//!   over every row with pending effects ([`Outbox::drain_pending`]).
//! - `failure.rs`: failed deliveries recorded on the head, permanent
//!   ones parking the row; unpark and drop.
//! - `inspect.rs`: what is pending, per row and over all rows.

mod drain;
mod failure;
mod inspect;
mod item;

use std::sync::Arc;
use std::time::Duration;

pub use self::drain::{Deliver, DrainReport, PendingReport, Undelivered};
pub use self::failure::{DeliveryError, LastFailure, Parked, MAX_ERROR_BYTES};
pub use self::inspect::{PendingClaim, RowPending};
pub use self::item::{Effect, MAX_EFFECTS_PER_WRITE};

use crate::app_schema::ENTITY_ATTRIBUTE;
use crate::entity::Entity;
use crate::error::{Error, TableError};
use crate::item::ScalarType;
use crate::key_schema::TableSchema;
use crate::table::Table;

/// How long a drainer holds the head effect of a row by default: a crashed
/// drainer's claim expires after it and the effect is delivered again.
pub const DEFAULT_CLAIM_FOR: Duration = Duration::from_secs(30);

/// The current time in epoch milliseconds (injectable for tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The sparse index `drain_pending` reads: its name and key attributes.
#[derive(Debug, Clone)]
struct PendingIndex {
    name: String,
    partition: String,
    sort: Option<String>,
}

/// A projection's outbox: where its effect items live, how long a claim
/// holds, and the sparse index that finds rows with pending effects.
///
/// Effect items are kept in the row's own partition by default (entity
/// reads never see them: their `__edd_e__` is `<entity type>#outbox`), or
/// in another table of the same database ([`in_table`](Self::in_table)),
/// written in the same transaction as the row either way.
#[derive(Clone)]
pub struct Outbox {
    /// The row table's key attribute names (partition, sort).
    row_key: (String, String),
    table: Arc<dyn Table>,
    /// `<entity type>#outbox`.
    marker: String,
    /// The index partition of this entity's outbox items.
    index_partition: String,
    index: Option<PendingIndex>,
    claim_for: Duration,
    clock: Clock,
    concurrency: usize,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("table", &self.table.schema().name)
            .field("marker", &self.marker)
            .field("index", &self.index)
            .field("claim_for", &self.claim_for)
            .finish_non_exhaustive()
    }
}

fn misconfigured(message: String) -> Error {
    Error::Table(TableError::Misconfigured { message })
}

/// The key attribute names of a table whose partition and sort keys are
/// strings, as outbox items need.
fn string_key(schema: &TableSchema) -> Result<(String, String), Error> {
    let key = &schema.key;
    match &key.sort {
        Some(sort) if key.partition.kind == ScalarType::S && sort.kind == ScalarType::S => {
            Ok((key.partition.name.clone(), sort.name.clone()))
        }
        _ => Err(misconfigured(format!(
            "table {} needs string partition and sort keys to hold outbox items",
            schema.name
        ))),
    }
}

impl Outbox {
    /// The outbox of `read_model`'s rows, its items in each row's own
    /// partition, claims held for [`DEFAULT_CLAIM_FOR`].
    pub fn new<M: serde::Serialize + serde::de::DeserializeOwned>(
        read_model: &Entity<M>,
    ) -> Result<Self, Error> {
        let table = Arc::clone(read_model.table());
        let row_key = string_key(table.schema())?;
        let outbox = Self {
            row_key,
            marker: format!("{}#outbox", read_model.entity_type()),
            index_partition: format!("{}#$outbox", read_model.partition_prefix()),
            table,
            index: None,
            claim_for: DEFAULT_CLAIM_FOR,
            clock: Arc::new(|| {
                u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default()
            }),
            concurrency: 16,
        };
        outbox.check_ttl()?;
        Ok(outbox)
    }

    /// Keeps the items in `table` instead (its keys default to `pk`/`sk`
    /// strings): another table of the row table's database
    /// (`open_table`), so one transaction still writes both. Its change
    /// stream, not the read model's, carries them. Declare the index
    /// ([`with_index`](Self::with_index)) after this: it is the new
    /// table's.
    pub fn in_table(mut self, table: Arc<dyn Table>) -> Result<Self, Error> {
        string_key(table.schema())?;
        self.table = table;
        self.index = None;
        self.check_ttl()?;
        Ok(self)
    }

    /// Lets [`drain_pending`](Self::drain_pending) find rows with pending
    /// effects through the outbox table's index `name`, which only outbox
    /// items carry keys of (sparse). Its key attributes must be strings.
    pub fn with_index(mut self, name: &str) -> Result<Self, Error> {
        let schema = self.table.schema();
        let index = schema.index(name)?;
        let strings = std::iter::once(&index.key.partition)
            .chain(index.key.sort.iter())
            .all(|a| a.kind == ScalarType::S);
        if !strings {
            return Err(misconfigured(format!(
                "index {name} of table {} needs string keys to list outbox items",
                schema.name
            )));
        }
        self.index = Some(PendingIndex {
            name: name.to_owned(),
            partition: index.key.partition.name.clone(),
            sort: index.key.sort.as_ref().map(|a| a.name.clone()),
        });
        Ok(self)
    }

    /// Holds a claimed effect this long (default 30 s): a drainer that
    /// crashed mid-delivery leaves a claim that expires after it.
    pub fn claim_for(mut self, claim_for: Duration) -> Self {
        self.claim_for = claim_for;
        self
    }

    /// Reads the time from `clock` (epoch milliseconds) instead of the
    /// system clock: tests move it to expire claims without sleeping.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Drains at most this many rows at once in `drain_pending` (default
    /// 16); each row is still delivered strictly in order.
    pub fn concurrency(mut self, rows: usize) -> Self {
        self.concurrency = rows.max(1);
        self
    }

    /// The entity type of the rows whose effects these are.
    pub(crate) fn read_model(&self) -> &str {
        self.marker.strip_suffix("#outbox").unwrap_or(&self.marker)
    }

    /// The table the items live in.
    pub fn table(&self) -> &Arc<dyn Table> {
        &self.table
    }

    /// A claim is never in the TTL attribute: a TTL sweep must not delete
    /// a pending effect.
    fn check_ttl(&self) -> Result<(), Error> {
        let schema = self.table.schema();
        match schema.ttl_attribute.as_deref() {
            Some(ttl) if item::ATTRIBUTES.contains(&ttl) || ttl == ENTITY_ATTRIBUTE => {
                Err(misconfigured(format!(
                    "table {} expires items by {ttl}, an attribute outbox items use: pending effects would be deleted",
                    schema.name
                )))
            }
            _ => Ok(()),
        }
    }
}
