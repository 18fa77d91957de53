//! Where a row keeps the checkpoints of the stream instances that feed it.
//!
//! The row core reads each instance's checkpoint from a *working copy* of
//! the row's slot attributes, records the instances that moved into it one
//! after the other (so a later instance sees the claims of earlier ones in
//! the same write), copies the slot attributes into the item it writes,
//! and, for projections without a revision, guards the write with the slots
//! as read. A single-source projection keeps one scalar checkpoint and the
//! instance that owns it; multi-source layouts (a map keyed by
//! `<source>#<stream id>`, fields mapped per source) are further
//! implementations of the same trait.

use super::SOURCE_ATTRIBUTE;
use crate::condition::Condition;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::{get_present, n, s, AttributeValue, Item};

/// How a projection keeps per-instance checkpoints in its rows.
pub(crate) trait CheckpointSlots: Send + Sync {
    /// The checkpoint of `instance` of `source` in `slots` (`None`: none
    /// recorded). An error keeps the instance out of the write.
    fn read(
        &self,
        slots: &Item,
        source: &str,
        instance: &StreamId,
        row: &str,
    ) -> Result<Option<u64>, Error>;
    /// Records that `instance` of `source` has considered every version up
    /// to `checkpoint`.
    fn record(&self, slots: &mut Item, source: &str, instance: &StreamId, checkpoint: u64);
    /// Copies the slot attributes from `from` into the item to write.
    fn copy(&self, from: &Item, into: &mut Item);
    /// The condition on the slots of the row as read, for a write that has
    /// no revision to guard it.
    fn guard(&self, read: &Item) -> Condition;
    /// The (source, instance) pairs the slots know (catch-up).
    fn instances(&self, slots: &Item) -> Vec<(String, StreamId)>;
    /// Forgets every checkpoint (rebuild writes them from scratch).
    fn clear(&self, slots: &mut Item);
}

/// One checkpoint field and the instance that owns it
/// ([`SOURCE_ATTRIBUTE`]): a row fed by one stream instance. Another
/// instance is refused with `ProjectionSourceConflict`; an owner that is
/// absent or `NULL` (a row written before the projection) is adopted.
pub(crate) struct ScalarCheckpoint {
    pub field: String,
}

impl CheckpointSlots for ScalarCheckpoint {
    fn read(
        &self,
        slots: &Item,
        _source: &str,
        instance: &StreamId,
        row: &str,
    ) -> Result<Option<u64>, Error> {
        if let Some(AttributeValue::S(owner)) = get_present(slots, SOURCE_ATTRIBUTE) {
            if *owner != instance.to_string() && *owner != unescaped(instance) {
                return Err(Error::ProjectionSourceConflict {
                    row: row.to_owned(),
                    owner: owner.clone(),
                    instance: instance.to_string(),
                });
            }
        }
        read_counter(slots, &self.field, row)
    }

    fn record(&self, slots: &mut Item, _source: &str, instance: &StreamId, checkpoint: u64) {
        slots.insert(self.field.clone(), n(checkpoint));
        slots.insert(SOURCE_ATTRIBUTE.to_owned(), s(instance.to_string()));
    }

    fn copy(&self, from: &Item, into: &mut Item) {
        for name in [self.field.as_str(), SOURCE_ATTRIBUTE] {
            if let Some(value) = get_present(from, name) {
                into.insert(name.to_owned(), value.clone());
            }
        }
    }

    fn guard(&self, read: &Item) -> Condition {
        match get_present(read, &self.field) {
            Some(value) => Condition::eq(self.field.clone(), value.clone()),
            None => Condition::absent(self.field.clone()),
        }
    }

    fn instances(&self, slots: &Item) -> Vec<(String, StreamId)> {
        match get_present(slots, SOURCE_ATTRIBUTE) {
            Some(AttributeValue::S(owner)) => owner
                .parse::<StreamId>()
                .map(|id| vec![(String::new(), id)])
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn clear(&self, slots: &mut Item) {
        slots.remove(&self.field);
        slots.remove(SOURCE_ATTRIBUTE);
    }
}

/// The owner text rows written before stream ids were escaped hold
/// (`attr=value,…` as is); the same as the escaped form unless a value
/// holds `%`, `,`, `=` or `#`.
fn unescaped(instance: &StreamId) -> String {
    instance
        .attributes()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads a counter (a checkpoint or a revision) of a row: `None` when
/// absent or `NULL`; anything but an unsigned integer is a decode error,
/// never "absent".
pub(crate) fn read_counter(item: &Item, field: &str, row: &str) -> Result<Option<u64>, Error> {
    let bad = |value: String| Error::ItemDecode {
        entity: row.to_owned(),
        message: format!("{field} holds {value}, not an unsigned integer"),
    };
    match get_present(item, field) {
        None => Ok(None),
        Some(AttributeValue::N(text)) => {
            text.trim().parse().map(Some).map_err(|_| bad(text.clone()))
        }
        Some(other) => Err(bad(format!("{other:?}"))),
    }
}
