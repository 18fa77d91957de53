//! A table's key schema: partition and sort key, secondary indexes, TTL.

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::item::{AttributeValue, Item, ScalarType};

/// The most bytes of a partition key value (DynamoDB's limit).
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;

/// The most bytes of a sort key value (DynamoDB's limit).
pub const MAX_SORT_KEY_BYTES: usize = 1024;

/// One key attribute: its name and scalar type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyAttribute {
    /// The attribute name.
    pub name: String,
    /// The attribute's scalar type.
    pub kind: ScalarType,
}

impl KeyAttribute {
    /// A string key attribute.
    pub fn s(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: ScalarType::S,
        }
    }

    /// A number key attribute.
    pub fn n(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: ScalarType::N,
        }
    }
}

/// A key made of a partition attribute and an optional sort attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDefinition {
    /// The partition (hash) key.
    pub partition: KeyAttribute,
    /// The sort (range) key, if any.
    pub sort: Option<KeyAttribute>,
}

impl KeyDefinition {
    /// The attribute names of this key, partition first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.partition.name.as_str())
            .chain(self.sort.iter().map(|a| a.name.as_str()))
    }

    /// Extracts this key from an item, or `None` when an attribute is absent
    /// (how sparse index membership is decided).
    pub fn extract(&self, item: &Item) -> Option<Item> {
        let mut key = Item::new();
        for name in self.names() {
            key.insert(name.to_owned(), item.get(name)?.clone());
        }
        Some(key)
    }
}

/// A global secondary index: a name and its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDefinition {
    /// The index name.
    pub name: String,
    /// The index key.
    pub key: KeyDefinition,
}

/// What a table looks like: its name, primary key, indexes and TTL attribute.
///
/// An embedded table is created from it; a DynamoDB-backed table is
/// configured with the one the real table was created with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// The table name.
    pub name: String,
    /// The primary key.
    pub key: KeyDefinition,
    /// Global secondary indexes (projection `ALL`).
    pub indexes: Vec<IndexDefinition>,
    /// The TTL attribute: a number of epoch seconds after which the item expires.
    pub ttl_attribute: Option<String>,
}

impl TableSchema {
    /// The single-table layout the entity layer uses: string `pk` and `sk`.
    pub fn single_table(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            key: KeyDefinition {
                partition: KeyAttribute::s("pk"),
                sort: Some(KeyAttribute::s("sk")),
            },
            indexes: Vec::new(),
            ttl_attribute: None,
        }
    }

    /// Adds a global secondary index with string partition and sort keys.
    pub fn with_index(
        mut self,
        name: impl Into<String>,
        pk: impl Into<String>,
        sk: Option<&str>,
    ) -> Self {
        self.indexes.push(IndexDefinition {
            name: name.into(),
            key: KeyDefinition {
                partition: KeyAttribute::s(pk),
                sort: sk.map(KeyAttribute::s),
            },
        });
        self
    }

    /// Sets the TTL attribute.
    pub fn with_ttl(mut self, attribute: impl Into<String>) -> Self {
        self.ttl_attribute = Some(attribute.into());
        self
    }

    /// The index with this name.
    pub fn index(&self, name: &str) -> Result<&IndexDefinition, ValidationError> {
        self.indexes
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| ValidationError::UnknownIndex(name.to_owned()))
    }

    /// Checks that `key` holds exactly the primary key attributes, with the
    /// declared types and non-empty values.
    pub fn validate_key(&self, key: &Item) -> Result<(), ValidationError> {
        let expected = self.key.names().count();
        if key.len() != expected {
            return Err(ValidationError::InvalidKey(format!(
                "a key of table {} has exactly the attributes {:?}",
                self.name,
                self.key.names().collect::<Vec<_>>()
            )));
        }
        self.validate_key_attributes(&self.key, key, true)
    }

    /// Checks the item's primary key and any index key attributes it carries.
    pub fn validate_item(&self, item: &Item) -> Result<(), ValidationError> {
        self.validate_key_attributes(&self.key, item, true)?;
        for index in &self.indexes {
            self.validate_key_attributes(&index.key, item, false)?;
        }
        Ok(())
    }

    fn validate_key_attributes(
        &self,
        key: &KeyDefinition,
        item: &Item,
        required: bool,
    ) -> Result<(), ValidationError> {
        let attrs = std::iter::once((&key.partition, MAX_PARTITION_KEY_BYTES))
            .chain(key.sort.iter().map(|sort| (sort, MAX_SORT_KEY_BYTES)));
        for (attr, max_bytes) in attrs {
            let bytes = match item.get(&attr.name) {
                Some(AttributeValue::S(s)) => s.len(),
                Some(AttributeValue::B(b)) => b.len(),
                _ => 0,
            };
            if bytes > max_bytes {
                return Err(ValidationError::InvalidKey(format!(
                    "key attribute {} is {bytes} bytes; DynamoDB allows {max_bytes}",
                    attr.name
                )));
            }
            match item.get(&attr.name) {
                None if required => {
                    return Err(ValidationError::InvalidKey(format!(
                        "missing key attribute {}",
                        attr.name
                    )))
                }
                None => {}
                Some(value) if !attr.kind.matches(value) => {
                    return Err(ValidationError::InvalidKey(format!(
                        "key attribute {} must be of type {:?}",
                        attr.name, attr.kind
                    )))
                }
                Some(AttributeValue::S(s)) if s.is_empty() => {
                    return Err(ValidationError::InvalidKey(format!(
                        "key attribute {} is an empty string",
                        attr.name
                    )))
                }
                Some(value @ AttributeValue::N(n))
                    if crate::embedded::encode_value(value).is_none() =>
                {
                    return Err(ValidationError::InvalidKey(format!(
                        "key attribute {} holds {n}, not a number DynamoDB stores",
                        attr.name
                    )))
                }
                Some(AttributeValue::B(b)) if b.is_empty() => {
                    return Err(ValidationError::InvalidKey(format!(
                        "key attribute {} is empty binary",
                        attr.name
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
