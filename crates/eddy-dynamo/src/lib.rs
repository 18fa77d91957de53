//! Eddy's DynamoDB layer (work in progress).
#![deny(missing_docs)]

mod change_feed;
mod condition;
mod embedded;
mod error;
mod item;
mod key_schema;
mod query;
mod request;
mod table;
mod update;

pub use change_feed::{ChangeFeed, ChangeRecord};
pub use condition::{Comparator, Condition};
pub use embedded::EmbeddedTable;
pub use error::{CancellationReason, Error, TableError, ValidationError};
pub use item::{
    compare_values, get_str, get_u64, item_size, items_equal, n, s, value_size, values_equal,
    AttributeValue, Item, ScalarType, MAX_ITEM_SIZE,
};
pub use key_schema::{IndexDefinition, KeyAttribute, KeyDefinition, TableSchema};
pub use query::{Query, QueryPage, SortCondition};
pub use request::{ConditionCheck, Delete, Put, TransactWriteItem, UpdateItem};
pub use table::Table;
pub use update::{Update, UpdateAction};
