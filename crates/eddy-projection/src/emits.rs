//! What output handlers write: items for each output, through its typed
//! handle.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use eddy_streams::Control;
use serde::Serialize;
use serde_json::Value;

use crate::handles::{Collection, Output, Place, StateOutput};

/// One item for an output, as the handler wrote it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OutputItem {
    /// An encoded JSON item: where it lies in its output's JSON buffer.
    Json(Range<usize>),
    /// A row of the collection at this index of the state output.
    Upsert { collection: usize, row: Value },
    /// A delete of the row with this key.
    Remove { collection: usize, key: String },
    /// A control, written unchanged.
    Control(Control),
}

/// The items a handler wrote to one output.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Items {
    pub list: Vec<OutputItem>,
    /// The encodings of the JSON items, one after the other: one buffer
    /// per output and unit rather than an allocation per item.
    pub json: Vec<u8>,
}

impl fmt::Debug for Items {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Items")
            .field("list", &self.list)
            .field("json", &String::from_utf8_lossy(&self.json))
            .finish()
    }
}

/// The items a unit's handler wrote, for each output.
///
/// ```
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// # let doubled = JsonStream::<u64>::new("Test/D", "d").unwrap();
/// let declare = Declare::<()>::new("double");
/// let input = declare.input("n", &numbers);
/// let output = declare.output("d", &doubled);
/// let double = declare
///     .emit(Commit::producer())
///     .on(input, move |entry, _, emits| emits.push(output, u64::from(*entry.item) * 2))
///     .build();
/// ```
///
/// An item of another type does not compile:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::JsonStream;
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// # let doubled = JsonStream::<u64>::new("Test/D", "d").unwrap();
/// let declare = Declare::<()>::new("double");
/// let input = declare.input("n", &numbers);
/// let output = declare.output("d", &doubled);
/// let double = declare
///     .emit(Commit::producer())
///     .on(input, move |entry, _, emits| emits.push(output, "two"))
///     .build();
/// ```
///
/// nor does a row of another type in a state output's collection:
///
/// ```compile_fail
/// # use eddy_projection::{Commit, Declare};
/// # use eddy_streams::{JsonStream, StateStream};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Card { id: String }
/// # let numbers = JsonStream::<u32>::new("Test/N", "n").unwrap();
/// # let board = StateStream::new("Test/B", "b").unwrap().collection::<Card>("card", "id");
/// let declare = Declare::<()>::new("board");
/// let input = declare.input("n", &numbers);
/// let output = declare.state_output("b", &board);
/// let cards = declare.collection::<Card>(output, "card");
/// let projection = declare
///     .emit(Commit::producer())
///     .on(input, move |entry, _, emits| emits.upsert(cards, *entry.item))
///     .build();
/// ```
///
/// Handlers write through the handles [`Declare`](crate::Declare) returned,
/// so an item's type always fits its output. An output with no items uses
/// no producer sequence number. What the compiler cannot check is checked
/// before anything of the unit is written, failing the unit with
/// `pin/invalid-output`: a handle of another declaration, an item that does
/// not encode, and a row that the state stream's declaration refuses (its
/// key field, or a row type other than the one the stream declared for the
/// collection).
#[derive(Clone, Debug, PartialEq)]
pub struct Emits {
    declaration: u64,
    pub(crate) outputs: BTreeMap<usize, Items>,
    pub(crate) invalid: Option<String>,
}

impl Emits {
    pub(crate) fn new(declaration: u64) -> Self {
        Emits {
            declaration,
            outputs: BTreeMap::new(),
            invalid: None,
        }
    }

    fn items(&mut self, place: Place) -> Option<&mut Items> {
        if place.declaration != self.declaration {
            self.invalid
                .get_or_insert_with(|| format!("output #{} of another declaration", place.index));
            return None;
        }
        Some(self.outputs.entry(place.index).or_default())
    }

    /// Writes `item` to the JSON output `output`.
    pub fn push<T: Serialize>(&mut self, output: Output<T>, item: impl Borrow<T>) {
        let Some(items) = self.items(output.place) else {
            return;
        };
        let start = items.json.len();
        match serde_json::to_writer(&mut items.json, item.borrow()) {
            Ok(()) => {
                let end = items.json.len();
                items.list.push(OutputItem::Json(start..end));
            }
            Err(e) => {
                items.json.truncate(start);
                self.invalid
                    .get_or_insert_with(|| format!("an item does not encode: {e}"));
            }
        }
    }

    /// Writes every item of `items` to the JSON output `output`.
    pub fn extend<T: Serialize, B: Borrow<T>>(
        &mut self,
        output: Output<T>,
        items: impl IntoIterator<Item = B>,
    ) {
        for item in items {
            self.push(output, item);
        }
    }

    /// Inserts or replaces `row` in `collection`; its key is the row's key
    /// field as the state stream declares it.
    pub fn upsert<R: Serialize>(&mut self, collection: Collection<R>, row: impl Borrow<R>) {
        match serde_json::to_value(row.borrow()) {
            Ok(row) => {
                if let Some(items) = self.items(collection.output.place) {
                    items.list.push(OutputItem::Upsert {
                        collection: collection.index,
                        row,
                    });
                }
            }
            Err(e) => {
                self.invalid
                    .get_or_insert_with(|| format!("a row does not encode: {e}"));
            }
        }
    }

    /// Removes the row with `key` from `collection`.
    pub fn remove<R>(&mut self, collection: Collection<R>, key: impl Into<String>) {
        if let Some(items) = self.items(collection.output.place) {
            items.list.push(OutputItem::Remove {
                collection: collection.index,
                key: key.into(),
            });
        }
    }

    /// Writes a control to the state output `output` (`reset` makes
    /// readers forget every row; snapshot markers frame a snapshot), in
    /// order with its row changes.
    pub fn control(&mut self, output: StateOutput, control: Control) {
        if let Some(items) = self.items(output.place) {
            items.list.push(OutputItem::Control(control));
        }
    }

    /// The number of items written to `output` so far.
    pub fn len<T>(&self, output: Output<T>) -> usize {
        self.count(output.place)
    }

    /// The number of row changes and controls written to `output` so far.
    pub fn state_len(&self, output: StateOutput) -> usize {
        self.count(output.place)
    }

    fn count(&self, place: Place) -> usize {
        if place.declaration != self.declaration {
            return 0;
        }
        self.outputs
            .get(&place.index)
            .map_or(0, |items| items.list.len())
    }

    /// Whether no output has an item.
    pub fn is_empty(&self) -> bool {
        self.outputs.values().all(|items| items.list.is_empty())
    }

    /// The number of items over all outputs.
    pub fn total(&self) -> usize {
        self.outputs.values().map(|items| items.list.len()).sum()
    }
}
