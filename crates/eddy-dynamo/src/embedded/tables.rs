//! Several tables in one embedded database, so one transaction can write
//! them all (as one `TransactWriteItems` names several DynamoDB tables).
//!
//! The database's first table (the one it was opened with) keeps its keys as
//! encoded, so files written before other tables existed read as they are.
//! Every other table's partition keys and index names start with
//! `T<name>#`: encoded key values start with `S`, `N` or `B`, and table
//! names hold no `#`, so two tables never share an item, an index
//! partition or a range. Only the first table's changes are logged: the
//! database has one change feed, and it is that table's.

use std::sync::Arc;

use super::keys::encode_key;
use crate::error::{TableError, ValidationError};
use crate::item::Item;
use crate::key_schema::TableSchema;

/// What marks another table's keys.
const OTHER_TABLE: char = 'T';

/// Where a table's items live in its database's store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Namespace(Option<Arc<str>>);

impl Namespace {
    /// The namespace of another table than the first, named `name`
    /// (DynamoDB's rule: 3 to 255 of `a-z A-Z 0-9 _ . -`).
    pub(crate) fn other(name: &str) -> Result<Self, TableError> {
        let valid = (3..=255).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !valid {
            return Err(ValidationError::InvalidKey(format!(
                "{name:?} is not a table name (3 to 255 of a-z A-Z 0-9 _ . -)"
            ))
            .into());
        }
        Ok(Self(Some(format!("{OTHER_TABLE}{name}#").into())))
    }

    /// A stored partition key of this table.
    pub(crate) fn pk(&self, pk: String) -> String {
        match &self.0 {
            None => pk,
            Some(prefix) => format!("{prefix}{pk}"),
        }
    }

    /// The stored name of one of this table's indexes.
    pub(crate) fn index(&self, name: &str) -> String {
        match &self.0 {
            None => name.to_owned(),
            Some(prefix) => format!("{prefix}{name}"),
        }
    }

    /// Whether a stored partition key is this table's.
    pub(crate) fn owns(&self, pk: &str) -> bool {
        match &self.0 {
            None => !pk.starts_with(OTHER_TABLE),
            Some(prefix) => pk.starts_with(&**prefix),
        }
    }

    /// Whether this table's changes go to the database's change feed.
    pub(crate) fn logged(&self) -> bool {
        self.0.is_none()
    }
}

/// One table of a database: its schema and where its items live.
#[derive(Debug, Clone)]
pub(crate) struct TableRef {
    pub schema: Arc<TableSchema>,
    pub ns: Namespace,
}

impl TableRef {
    /// The stored `(pk, sk)` of an item or key of this table; `None` when
    /// a key attribute is absent or cannot be a key.
    pub(crate) fn encode_key(&self, item: &Item) -> Option<(String, String)> {
        encode_key(&self.schema.key, item).map(|(pk, sk)| (self.ns.pk(pk), sk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tables_never_share_keys_with_the_first() {
        let first = Namespace::default();
        let outbox = Namespace::other("outbox").unwrap();
        let stored = outbox.pk("Sorder#1".into());
        assert!(outbox.owns(&stored) && !first.owns(&stored));
        assert!(first.owns("Sorder#1") && !outbox.owns("Sorder#1"));
        assert!(!Namespace::other("outbox2").unwrap().owns(&stored));
        assert!(Namespace::other("a#b").is_err());
        assert!(Namespace::other("ab").is_err());
    }
}
