//! Write requests: put, update, delete, condition check, and their
//! transactional union.

use crate::condition::Condition;
use crate::item::Item;
use crate::update::Update;

/// Writes a whole item, replacing any item with the same key.
#[derive(Debug, Clone, PartialEq)]
pub struct Put {
    /// The item, key attributes included.
    pub item: Item,
    /// A condition on the item as it is.
    pub condition: Option<Condition>,
}

impl Put {
    /// An unconditional put.
    pub fn new(item: Item) -> Self {
        Self {
            item,
            condition: None,
        }
    }

    /// Adds a condition.
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }
}

/// Updates attributes of the item with this key, creating it when absent.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateItem {
    /// The item's key.
    pub key: Item,
    /// The actions.
    pub update: Update,
    /// A condition on the item as it is.
    pub condition: Option<Condition>,
}

impl UpdateItem {
    /// An unconditional update.
    pub fn new(key: Item, update: Update) -> Self {
        Self {
            key,
            update,
            condition: None,
        }
    }

    /// Adds a condition.
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }
}

/// Deletes the item with this key.
#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    /// The item's key.
    pub key: Item,
    /// A condition on the item as it is.
    pub condition: Option<Condition>,
}

impl Delete {
    /// An unconditional delete.
    pub fn new(key: Item) -> Self {
        Self {
            key,
            condition: None,
        }
    }

    /// Adds a condition.
    pub fn when(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }
}

/// Checks a condition on an item without writing it (transactions only).
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionCheck {
    /// The item's key.
    pub key: Item,
    /// The condition.
    pub condition: Condition,
}

/// One item of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum TransactWriteItem {
    /// A put.
    Put(Put),
    /// An update.
    Update(UpdateItem),
    /// A delete.
    Delete(Delete),
    /// A condition check.
    ConditionCheck(ConditionCheck),
}

impl From<Put> for TransactWriteItem {
    fn from(p: Put) -> Self {
        TransactWriteItem::Put(p)
    }
}

impl From<UpdateItem> for TransactWriteItem {
    fn from(u: UpdateItem) -> Self {
        TransactWriteItem::Update(u)
    }
}

impl From<Delete> for TransactWriteItem {
    fn from(d: Delete) -> Self {
        TransactWriteItem::Delete(d)
    }
}

impl From<ConditionCheck> for TransactWriteItem {
    fn from(c: ConditionCheck) -> Self {
        TransactWriteItem::ConditionCheck(c)
    }
}

impl TransactWriteItem {
    /// The condition of this item, if any.
    pub fn condition(&self) -> Option<&Condition> {
        match self {
            TransactWriteItem::Put(p) => p.condition.as_ref(),
            TransactWriteItem::Update(u) => u.condition.as_ref(),
            TransactWriteItem::Delete(d) => d.condition.as_ref(),
            TransactWriteItem::ConditionCheck(c) => Some(&c.condition),
        }
    }
}

/// One item of a transaction that spans several tables of one database
/// (see [`Table::transact_write_tables`](crate::Table::transact_write_tables)).
#[derive(Debug, Clone, PartialEq)]
pub struct TableWrite {
    /// The name of the table it writes.
    pub table: String,
    /// The write.
    pub item: TransactWriteItem,
}

impl TableWrite {
    /// A write of `item` to the table named `table`.
    pub fn new(table: impl Into<String>, item: impl Into<TransactWriteItem>) -> Self {
        Self {
            table: table.into(),
            item: item.into(),
        }
    }
}
