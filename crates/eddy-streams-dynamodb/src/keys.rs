//! Where each item lives: the key design of the streams layout.
//!
//! | item | partition key | sort key |
//! | --- | --- | --- |
//! | a path's record or tombstone | `ds|s|<path>` | `-` |
//! | a pack of messages | `ds|d|<stream id>` | `m|<end, 20 digits>` |
//! | a part of one large message | `ds|d|<stream id>` | `m|<end, 20 digits>|<part, 4 digits>` |
//! | an idempotent producer | `ds|d|<stream id>` | `p|<producer id>` |
//! | a fork of the stream | `ds|f|<stream id>` | `<fork's path>` |
//! | the directory entry of a live path | `ds|l` | `<path>` |
//! | a removed stream whose data is still to delete | `ds|g` | `<stream id>` |
//! | a stream that expires, by when at the earliest | `ds|x` | `<unix ms, 20 digits>|<stream id>` |
//! | a tombstone, by its incarnation | `ds|t` | `<incarnation, 20 digits>|<stream id>` |
//! | a stream that owes retention drops, by when | `ds|r` | `<unix ms, 20 digits>|<stream id>` |
//! | where the sweep's walk over the directory is | `ds|w` | `-` |
//! | a shared document | `ds|doc` | `<document key>` |
//!
//! `end` is the position after the item's last message, so the items
//! holding positions `a..` are those whose sort key is at least
//! `m|<a + 1>`: one key condition finds the item a read starts in.

use eddy_dynamo::{AttributeValue, Item, TableSchema};
use eddy_streams::StreamError;

/// The partition of the directory: one entry per path with a stream.
const DIRECTORY: &str = "ds|l";
/// The partition of removed streams whose data items are to delete.
const GARBAGE: &str = "ds|g";
/// The partition of streams that expire, ordered by the earliest time
/// they may (the sweep's queue).
pub(crate) const EXPIRING: &str = "ds|x";
/// The partition of tombstones, ordered by incarnation.
pub(crate) const TOMBSTONES: &str = "ds|t";
/// The partition of streams whose retention policy will let messages go,
/// ordered by when (the retention sweep's queue, `retention.rs`).
pub(crate) const RETAINED: &str = "ds|r";
/// The partition of the sweep's walk over the directory (one item).
const WALK: &str = "ds|w";
/// The partition of the shared documents. (No stream's data partition:
/// those are `ds|d|<id>`.)
const DOCUMENTS: &str = "ds|doc";

/// The key attribute names of the table.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub pk: String,
    pub sk: String,
}

impl Keys {
    /// The key names of `schema`, which must be a string partition key and
    /// a string sort key (the single-table layout).
    pub fn of(schema: &TableSchema) -> Result<Keys, StreamError> {
        let sort = schema.key.sort.as_ref();
        let strings = schema.key.partition.kind == eddy_dynamo::ScalarType::S
            && sort.is_some_and(|s| s.kind == eddy_dynamo::ScalarType::S);
        match sort {
            Some(sort) if strings => Ok(Keys {
                pk: schema.key.partition.name.clone(),
                sk: sort.name.clone(),
            }),
            _ => Err(StreamError::InvalidArgument(format!(
                "table {} needs a string partition key and a string sort key \
                 (create it with `eddy dynamo create-table --table {}`)",
                schema.name, schema.name
            ))),
        }
    }

    fn key(&self, pk: String, sk: String) -> Item {
        Item::from([
            (self.pk.clone(), AttributeValue::S(pk)),
            (self.sk.clone(), AttributeValue::S(sk)),
        ])
    }

    /// The key of a path's item.
    pub fn path(&self, path: &str) -> Item {
        self.key(format!("ds|s|{path}"), "-".into())
    }

    /// The partition key of a stream's data items.
    pub fn data(&self, id: &str) -> AttributeValue {
        AttributeValue::S(data_partition(id))
    }

    /// The key of a data item.
    pub fn data_item(&self, id: &str, sort: String) -> Item {
        self.key(data_partition(id), sort)
    }

    /// The partition key of the fork references of stream `id`.
    pub fn forks(&self, id: &str) -> AttributeValue {
        AttributeValue::S(forks_partition(id))
    }

    /// The key of the reference to the fork at `fork` in the partition of
    /// its source, the stream `id`.
    pub fn fork_ref(&self, id: &str, fork: &str) -> Item {
        self.key(forks_partition(id), fork.into())
    }

    /// The key of a path's directory entry.
    pub fn directory_entry(&self, path: &str) -> Item {
        self.key(DIRECTORY.into(), path.into())
    }

    /// The directory's partition key.
    pub fn directory(&self) -> AttributeValue {
        AttributeValue::S(DIRECTORY.into())
    }

    /// The key of a removed stream's garbage entry.
    pub fn garbage_entry(&self, id: &str) -> Item {
        self.key(GARBAGE.into(), id.into())
    }

    /// The garbage partition key.
    pub fn garbage(&self) -> AttributeValue {
        AttributeValue::S(GARBAGE.into())
    }

    /// The key of the sweep entry `sort` of partition `partition`
    /// ([`EXPIRING`], [`TOMBSTONES`] or [`RETAINED`]).
    pub fn sweep_entry(&self, partition: &str, sort: String) -> Item {
        self.key(partition.into(), sort)
    }

    /// The key of the item that says where the sweep's walk over the
    /// directory is (`walk.rs`).
    pub fn walk(&self) -> Item {
        self.key(WALK.into(), "-".into())
    }

    /// The key of the document at `key`.
    pub fn document(&self, key: &str) -> Item {
        self.key(DOCUMENTS.into(), key.into())
    }

    /// The documents' partition key.
    pub fn documents(&self) -> AttributeValue {
        AttributeValue::S(DOCUMENTS.into())
    }

    /// The path whose item has this partition key.
    pub fn path_of(&self, item: &Item) -> Option<String> {
        match item.get(&self.pk) {
            Some(AttributeValue::S(pk)) => pk.strip_prefix("ds|s|").map(str::to_owned),
            _ => None,
        }
    }

    /// The sort key of an item, as text.
    pub fn sort_of<'a>(&self, item: &'a Item) -> Option<&'a str> {
        match item.get(&self.sk) {
            Some(AttributeValue::S(sk)) => Some(sk),
            _ => None,
        }
    }
}

fn data_partition(id: &str) -> String {
    format!("ds|d|{id}")
}

/// A stream's forks are a partition of their own, not sort keys of its
/// data partition: a fork's path takes up to 1 024 bytes, the whole of a
/// sort key.
fn forks_partition(id: &str) -> String {
    format!("ds|f|{id}")
}

/// The sort key of the pack whose last message is at `end - 1`.
pub(crate) fn pack(end: u64) -> String {
    format!("m|{end:020}")
}

/// The sort key of part `part` of the message at `end - 1`.
pub(crate) fn part(end: u64, part: usize) -> String {
    format!("m|{end:020}|{part:04}")
}

/// The sort key after every message item.
pub(crate) const AFTER_MESSAGES: &str = "m|~";

/// The sort key of a sweep entry: `at` (a time or an incarnation), then
/// the stream's id (a path may take the whole 1 024 bytes of a sort key,
/// so the path is an attribute, `p`).
pub(crate) fn sweep_sort(at: u64, id: &str) -> String {
    format!("{at:020}|{id}")
}

/// The sort key before every sweep entry at `at` or later.
pub(crate) fn sweep_before(at: u64) -> String {
    format!("{at:020}")
}

/// The sort key of a producer's state.
pub(crate) fn producer(id: &str) -> String {
    format!("p|{id}")
}

/// The sort key prefix of producers.
pub(crate) const PRODUCERS: &str = "p|";

/// A new stream id: never reused, so a stream created again at a path
/// has other data items than the one before.
pub(crate) fn new_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{now:011x}{:016x}", fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_sort_keys_order_by_end_then_part() {
        let mut keys = vec![pack(10), part(9, 1), part(9, 0), pack(100), pack(8)];
        keys.sort();
        assert_eq!(keys, [pack(8), part(9, 0), part(9, 1), pack(10), pack(100)]);
        assert!(
            part(9, 0) >= pack(9),
            "a read from position 8 finds every part of 8"
        );
        assert!(part(8, 9999) < pack(9), "…and no part of 7");
        assert!(pack(u64::MAX).as_str() < AFTER_MESSAGES);
        assert!(AFTER_MESSAGES < PRODUCERS);
    }
}
