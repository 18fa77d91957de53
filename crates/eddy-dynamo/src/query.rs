//! Queries: one partition of the table or of an index, a sort key condition,
//! direction, limit and paging.

use std::cmp::Ordering;

use crate::item::{compare_values, AttributeValue, Item};

/// A condition on the sort key of a query.
#[derive(Debug, Clone, PartialEq)]
pub enum SortCondition {
    /// `sk = value`
    Eq(AttributeValue),
    /// `sk < value`
    Lt(AttributeValue),
    /// `sk <= value`
    Le(AttributeValue),
    /// `sk > value`
    Gt(AttributeValue),
    /// `sk >= value`
    Ge(AttributeValue),
    /// `sk BETWEEN low AND high` (both included)
    Between(AttributeValue, AttributeValue),
    /// `begins_with(sk, prefix)` for string or binary keys.
    BeginsWith(AttributeValue),
}

impl SortCondition {
    /// Whether a sort key value matches.
    pub fn matches(&self, value: &AttributeValue) -> bool {
        let cmp = |other: &AttributeValue| compare_values(value, other);
        match self {
            SortCondition::Eq(v) => cmp(v) == Some(Ordering::Equal),
            SortCondition::Lt(v) => cmp(v) == Some(Ordering::Less),
            SortCondition::Le(v) => matches!(cmp(v), Some(Ordering::Less | Ordering::Equal)),
            SortCondition::Gt(v) => cmp(v) == Some(Ordering::Greater),
            SortCondition::Ge(v) => matches!(cmp(v), Some(Ordering::Greater | Ordering::Equal)),
            SortCondition::Between(lo, hi) => {
                matches!(cmp(lo), Some(Ordering::Greater | Ordering::Equal))
                    && matches!(cmp(hi), Some(Ordering::Less | Ordering::Equal))
            }
            SortCondition::BeginsWith(prefix) => match (value, prefix) {
                (AttributeValue::S(s), AttributeValue::S(p)) => s.starts_with(p.as_str()),
                (AttributeValue::B(b), AttributeValue::B(p)) => b.starts_with(p),
                _ => false,
            },
        }
    }
}

/// A query of one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The index to query, or `None` for the table.
    pub index: Option<String>,
    /// The partition key value.
    pub partition: AttributeValue,
    /// A condition on the sort key.
    pub sort: Option<SortCondition>,
    /// Ascending sort key order when true (the default).
    pub forward: bool,
    /// At most this many items in the page.
    pub limit: Option<usize>,
    /// Start after this key: the previous page's `last_evaluated_key`.
    pub exclusive_start_key: Option<Item>,
}

impl Query {
    /// A forward query of the table partition with this key value.
    pub fn partition(value: AttributeValue) -> Self {
        Self {
            index: None,
            partition: value,
            sort: None,
            forward: true,
            limit: None,
            exclusive_start_key: None,
        }
    }

    /// Queries this index instead of the table.
    pub fn on_index(mut self, index: impl Into<String>) -> Self {
        self.index = Some(index.into());
        self
    }

    /// Adds a sort key condition.
    pub fn sort(mut self, condition: SortCondition) -> Self {
        self.sort = Some(condition);
        self
    }

    /// Descending sort key order.
    pub fn backward(mut self) -> Self {
        self.forward = false;
        self
    }

    /// At most `limit` items.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Starts after this key.
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.exclusive_start_key = key;
        self
    }
}

/// A scan of the whole table (`Scan`), a page at a time: every item, in
/// an order of the table's choosing that paging keeps. It reads every
/// item of the table, so it is for rare, one-time passes, never for a
/// request's work.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scan {
    /// At most this many items in the page.
    pub limit: Option<usize>,
    /// Start after this key: the previous page's `last_evaluated_key`.
    pub exclusive_start_key: Option<Item>,
}

impl Scan {
    /// A scan of the table from its first item.
    pub fn table() -> Self {
        Self::default()
    }

    /// At most `limit` items per page.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Continue after this key (the previous page's `last_evaluated_key`).
    pub fn start_after(mut self, key: Option<Item>) -> Self {
        self.exclusive_start_key = key;
        self
    }
}

/// One page of query results.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryPage {
    /// The items, in sort key order.
    pub items: Vec<Item>,
    /// Where the next page starts, or `None` on the last page.
    pub last_evaluated_key: Option<Item>,
}
