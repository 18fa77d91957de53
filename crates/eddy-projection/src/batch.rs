//! What a handler sees: a unit of work, its batch of slices, and entries.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use eddy_streams::Offset;
use serde::{Deserialize, Serialize};

use crate::handles::{Input, Place};

/// The range of one input that a unit covers, with its terminal marks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// Where the unit starts reading.
    pub from: Offset,
    /// Where the next unit starts (after the last item of this one).
    pub to: Offset,
    /// The unit reached the end of a closed input.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// The input was deleted: this is the binding's final unit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

impl Range {
    /// The number of items in the range.
    pub fn len(&self) -> u64 {
        self.to.position().saturating_sub(self.from.position())
    }

    /// Whether the range holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One unit of work: the binding's parameters, the input ranges it covers,
/// and a key that stays the same for every retry of the same ranges.
///
/// In per-entry handlers, use the unit for its parameters and key only:
/// its ranges describe the whole unit, not the entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit<P> {
    /// A stable key for these ranges of this binding (16 hex digits).
    pub key: String,
    /// The binding's parameters.
    pub params: P,
    /// The range of each input, by input name.
    pub ranges: BTreeMap<String, Range>,
}

/// One item of an input, with its offset.
#[derive(Debug, PartialEq)]
pub struct Entry<'a, T> {
    /// The item.
    pub item: &'a T,
    /// The item's offset (the position before it).
    pub offset: Offset,
}

impl<T> Clone for Entry<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Entry<'_, T> {}

/// The items one input contributes to a unit, as a batch handler sees them.
#[derive(Debug, PartialEq)]
pub struct Slice<'a, T> {
    /// The items, in stream order.
    pub items: &'a [T],
    /// The input stream's path for this binding.
    pub path: &'a str,
    /// The offset of the first item.
    pub from: Offset,
    /// The offset after the last item.
    pub to: Offset,
    /// This slice reaches the end of a closed input.
    pub closed: bool,
    /// The input was deleted; this is the final unit.
    pub gone: bool,
}

impl<'a, T> Slice<'a, T> {
    /// Every item with its offset.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'a, T>> + 'a {
        let start = self.from;
        let items: &'a [T] = self.items;
        items.iter().enumerate().map(move |(i, item)| Entry {
            item,
            offset: start.advanced(i as u64),
        })
    }
}

/// One input's slice with its items type-erased (a boxed `Vec<T>`).
pub(crate) struct AnySlice {
    pub input: String,
    pub path: String,
    pub items: Box<dyn Any + Send + Sync>,
    pub len: usize,
    pub from: Offset,
    pub to: Offset,
    pub closed: bool,
    pub gone: bool,
}

impl AnySlice {
    /// The typed view, when the items are `T`.
    pub fn typed<T: 'static>(&self) -> Option<Slice<'_, T>> {
        let items = self.items.downcast_ref::<Vec<T>>()?;
        Some(Slice {
            items,
            path: &self.path,
            from: self.from,
            to: self.to,
            closed: self.closed,
            gone: self.gone,
        })
    }

    pub fn range(&self) -> Range {
        Range {
            from: self.from,
            to: self.to,
            closed: self.closed,
            gone: self.gone,
        }
    }
}

/// The slices of every input for one unit, in input declaration order.
/// Read one input's slice with the typed handle that
/// [`Declare::input`](crate::Declare::input) returned.
pub struct Batch {
    declaration: u64,
    slices: Vec<AnySlice>,
    misuse: OnceLock<String>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("inputs", &self.slices.len())
            .field("items", &self.len())
            .finish()
    }
}

impl Batch {
    pub(crate) fn new(declaration: u64, slices: Vec<AnySlice>) -> Self {
        Batch {
            declaration,
            slices,
            misuse: OnceLock::new(),
        }
    }

    /// The slice of `input`.
    ///
    /// A handle of another declaration gives an empty slice and fails the
    /// unit with `load/invalid-options` once the handler returns, before
    /// anything of the unit is written.
    pub fn slice<T: 'static>(&self, input: Input<T>) -> Slice<'_, T> {
        match self.find(input.place) {
            Some(slice) => slice,
            None => {
                let _ = self.misuse.set(format!(
                    "a batch handler read input #{} of another declaration",
                    input.place.index
                ));
                Slice {
                    items: &[],
                    path: "",
                    from: Offset::ZERO,
                    to: Offset::ZERO,
                    closed: false,
                    gone: false,
                }
            }
        }
    }

    fn find<T: 'static>(&self, place: Place) -> Option<Slice<'_, T>> {
        if place.declaration != self.declaration {
            return None;
        }
        self.slices.get(place.index)?.typed()
    }

    /// The items of `input`, in stream order (see [`slice`](Batch::slice)).
    pub fn items<T: 'static>(&self, input: Input<T>) -> &[T] {
        self.slice(input).items
    }

    /// The number of items over all inputs.
    pub fn len(&self) -> usize {
        self.slices.iter().map(|s| s.len).sum()
    }

    /// Whether the batch holds no item (a terminal-only unit).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether some input of this unit is gone (the final unit).
    pub fn gone(&self) -> bool {
        self.slices.iter().any(|s| s.gone)
    }

    pub(crate) fn slices(&self) -> &[AnySlice] {
        &self.slices
    }

    /// What a handler did wrong with this batch, if anything.
    pub(crate) fn misuse(&self) -> Option<&str> {
        self.misuse.get().map(String::as_str)
    }
}
