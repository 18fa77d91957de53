//! Tombstones: what a removed projection row leaves at its key.
//!
//! A tombstone is the row's key, `__edd_e__ = "<entity type>#tombstone"`,
//! the row's checkpoints and revision, [`REVISION_NAME_ATTRIBUTE`] naming
//! the revision attribute (so a plain [`Entity`](crate::Entity) can bump
//! it), and, with `removal.ttl`, the table's TTL attribute. It carries no
//! model attribute and no index key, so no index lists it. Every entity
//! read (get, batch get, transactional get, queries) reports it as absent;
//! `Entity::create` may write over it, carrying its checkpoints with the
//! revision one higher, so a late redelivery still reads as applied;
//! `Entity::update` and `Entity::delete` leave it alone.

use crate::app_schema::ENTITY_ATTRIBUTE;
use crate::condition::Condition;
use crate::error::Error;
use crate::item::{get_present, get_str, get_u64, n, s, Item};
use crate::key_schema::TableSchema;

/// The attribute of a tombstone that names the row's revision attribute.
pub const REVISION_NAME_ATTRIBUTE: &str = "__edd_rev__";

/// The entity marker (`__edd_e__`) of an entity's tombstones.
pub(crate) fn tombstone_marker(entity_type: &str) -> String {
    format!("{entity_type}#tombstone")
}

/// Whether `item` is a tombstone of `entity_type`.
pub(crate) fn is_tombstone(entity_type: &str, item: &Item) -> bool {
    get_str(item, ENTITY_ATTRIBUTE) == Some(tombstone_marker(entity_type).as_str())
}

/// A new item written where a tombstone is: `item` with the tombstone's
/// checkpoints (every attribute but the key, the markers and the TTL
/// attribute) and its revision one higher, on the condition that the
/// tombstone is still as read.
pub(crate) fn over_tombstone(
    schema: &TableSchema,
    entity_type: &str,
    mut item: Item,
    tombstone: &Item,
) -> Result<(Item, Condition), Error> {
    let mut condition = Condition::eq(ENTITY_ATTRIBUTE, s(tombstone_marker(entity_type)));
    let revision = get_str(tombstone, REVISION_NAME_ATTRIBUTE);
    let skipped = |name: &str| {
        schema.key.names().any(|k| k == name)
            || name == ENTITY_ATTRIBUTE
            || name == REVISION_NAME_ATTRIBUTE
            || schema.ttl_attribute.as_deref() == Some(name)
            || Some(name) == revision
    };
    for (name, value) in tombstone {
        if !skipped(name) {
            condition = condition.and(Condition::eq(name.clone(), value.clone()));
            item.insert(name.clone(), value.clone());
        }
    }
    if let Some(field) = revision {
        match get_present(tombstone, field).and_then(|_| get_u64(tombstone, field)) {
            Some(read) => {
                let next = read.checked_add(1).ok_or_else(|| Error::CounterOverflow {
                    counter: format!("the revision of a {entity_type} tombstone"),
                })?;
                condition = condition.and(Condition::eq(field, n(read)));
                item.insert(field.to_owned(), n(next));
            }
            None => condition = condition.and(Condition::absent(field)),
        }
    }
    Ok((item, condition))
}
