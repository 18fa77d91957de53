//! Eddy's DynamoDB layer (work in progress).
#![deny(missing_docs)]

mod app_schema;
mod batch;
mod change_feed;
mod command;
mod condition;
mod embedded;
mod entity;
mod error;
mod event_item;
mod event_stream;
mod follower;
mod item;
mod key_schema;
mod lambda;
mod projection;
mod query;
mod request;
mod table;
mod update;
mod variants;

pub use app_schema::{AppSchema, ENTITY_ATTRIBUTE};
pub use batch::{process_batch, BatchProjection, BatchResult, FailedRecord};
pub use change_feed::{ChangeFeed, ChangeRecord};
pub use command::CommandError;
pub use condition::{Comparator, Condition};
pub use embedded::EmbeddedTable;
pub use entity::{Entity, KeyComposite};
pub use error::{CancellationReason, Error, TableError, ValidationError};
pub use event_item::{EventItem, StreamId};
pub use event_stream::{make_stream, EventStream, StoredEvent, MAX_APPEND};
pub use follower::Follower;
pub use item::{
    compare_values, get_str, get_u64, item_size, items_equal, n, s, value_size, values_equal,
    AttributeValue, Item, ScalarType, MAX_ITEM_SIZE,
};
pub use key_schema::{IndexDefinition, KeyAttribute, KeyDefinition, TableSchema};
pub use lambda::{handle_stream_event, StreamEvent, StreamEventResponse};
pub use projection::{
    EvolveError, Projection, ProjectionBuilder, RecordFailure, RowOutcome, RowReport,
    SOURCE_ATTRIBUTE,
};
pub use query::{Query, QueryPage, SortCondition};
pub use request::{ConditionCheck, Delete, Put, TransactWriteItem, UpdateItem};
pub use table::Table;
pub use update::{Update, UpdateAction};
