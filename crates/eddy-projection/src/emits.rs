//! What output handlers return: items for each named output.

use std::collections::BTreeMap;

use eddy_streams::Control;
use serde::Serialize;
use serde_json::Value;

/// One entry for a state output: a row change naming its collection, or a
/// control. Controls are written unchanged, in order with the changes.
#[derive(Clone, Debug, PartialEq)]
pub struct StateEntry(pub(crate) StateKind);

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum StateKind {
    Upsert { collection: String, row: Value },
    Remove { collection: String, key: String },
    Control(Control),
    Invalid(String),
}

impl StateEntry {
    /// Inserts or replaces `row` in `collection`; the key is the row's key
    /// field as the output declares it.
    pub fn upsert<R: Serialize + ?Sized>(collection: &str, row: &R) -> Self {
        StateEntry(match serde_json::to_value(row) {
            Ok(row) => StateKind::Upsert {
                collection: collection.to_owned(),
                row,
            },
            Err(e) => StateKind::Invalid(format!("a `{collection}` row does not encode: {e}")),
        })
    }

    /// Removes the row with `key` from `collection`.
    pub fn remove(collection: &str, key: impl Into<String>) -> Self {
        StateEntry(StateKind::Remove {
            collection: collection.to_owned(),
            key: key.into(),
        })
    }

    /// A `reset` control: readers forget every row.
    pub fn reset() -> Self {
        StateEntry(StateKind::Control(Control::Reset))
    }

    /// A `snapshot-start` control.
    pub fn snapshot_start() -> Self {
        StateEntry(StateKind::Control(Control::SnapshotStart))
    }

    /// A `snapshot-end` control.
    pub fn snapshot_end() -> Self {
        StateEntry(StateKind::Control(Control::SnapshotEnd))
    }
}

/// One item for an output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OutputItem {
    Json(Value),
    State(StateEntry),
    Invalid(String),
}

/// Items for each named output of one entry or batch.
///
/// A missing output emits nothing; an output with no items uses no
/// producer sequence number.
///
/// ```
/// use eddy_projection::{Emits, StateEntry};
/// let emits = Emits::new()
///     .json("totals", [serde_json::json!({ "orderId": "a", "total": 3 })])
///     .state("board", [StateEntry::remove("card", "old"), StateEntry::reset()]);
/// assert_eq!(emits.len("totals"), 1);
/// assert_eq!(emits.len("board"), 2);
/// assert_eq!(emits.len("other"), 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Emits {
    pub(crate) outputs: BTreeMap<String, Vec<OutputItem>>,
}

impl Emits {
    /// No items.
    pub fn new() -> Self {
        Emits::default()
    }

    /// Adds items for a JSON output.
    pub fn json<T: Serialize>(mut self, output: &str, items: impl IntoIterator<Item = T>) -> Self {
        let list = self.outputs.entry(output.to_owned()).or_default();
        for item in items {
            list.push(match serde_json::to_value(&item) {
                Ok(value) => OutputItem::Json(value),
                Err(e) => OutputItem::Invalid(format!("an item does not encode: {e}")),
            });
        }
        self
    }

    /// Adds row changes and controls for a state output.
    pub fn state(mut self, output: &str, entries: impl IntoIterator<Item = StateEntry>) -> Self {
        self.outputs
            .entry(output.to_owned())
            .or_default()
            .extend(entries.into_iter().map(OutputItem::State));
        self
    }

    /// Appends every item of `other` after this one's, output by output.
    pub fn merge(&mut self, other: Emits) {
        for (output, items) in other.outputs {
            self.outputs.entry(output).or_default().extend(items);
        }
    }

    /// The number of items for `output`.
    pub fn len(&self, output: &str) -> usize {
        self.outputs.get(output).map_or(0, Vec::len)
    }

    /// Whether no output has an item.
    pub fn is_empty(&self) -> bool {
        self.outputs.values().all(Vec::is_empty)
    }

    /// The number of items over all outputs.
    pub fn total(&self) -> usize {
        self.outputs.values().map(Vec::len).sum()
    }
}
