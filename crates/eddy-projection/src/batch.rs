//! What a handler sees: a unit of work, its batch of slices, and entries.

use std::collections::BTreeMap;

use eddy_streams::Offset;
use serde::{Deserialize, Serialize};

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

/// The items one input contributes to a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice<I> {
    /// The input name.
    pub input: String,
    /// The input stream's path for this binding.
    pub path: String,
    /// The items, in stream order.
    pub items: Vec<I>,
    /// The offset of the first item.
    pub from: Offset,
    /// The offset after the last item.
    pub to: Offset,
    /// This slice reaches the end of a closed input.
    pub closed: bool,
    /// The input was deleted; this is the final unit.
    pub gone: bool,
}

/// One item with where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry<'a, I> {
    /// The input name.
    pub input: &'a str,
    /// The item.
    pub item: &'a I,
    /// The item's offset (the position before it).
    pub offset: Offset,
}

/// The slices of every input for one unit, in input declaration order.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<I> {
    slices: Vec<Slice<I>>,
}

impl<I> Batch<I> {
    pub(crate) fn new(slices: Vec<Slice<I>>) -> Self {
        Batch { slices }
    }

    /// The slice of the first (or only) input.
    ///
    /// A bound projection always has at least one input, so every batch
    /// has a first slice.
    pub fn input(&self) -> &Slice<I> {
        // Declarations refuse zero inputs, so index 0 exists.
        &self.slices[0]
    }

    /// The slice of the input named `name`.
    pub fn slice(&self, name: &str) -> Option<&Slice<I>> {
        self.slices.iter().find(|s| s.input == name)
    }

    /// Every slice, in input declaration order.
    pub fn slices(&self) -> &[Slice<I>] {
        &self.slices
    }

    /// Every entry: the first input's items, then the second's, and so on.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_, I>> {
        self.slices.iter().flat_map(|slice| {
            let start = slice.from.position();
            slice.items.iter().enumerate().map(move |(i, item)| Entry {
                input: &slice.input,
                item,
                offset: Offset::at(start + i as u64),
            })
        })
    }

    /// The number of items over all inputs.
    pub fn len(&self) -> usize {
        self.slices.iter().map(|s| s.items.len()).sum()
    }

    /// Whether the batch holds no item (a terminal-only unit).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether some input of this unit is gone (the final unit).
    pub fn gone(&self) -> bool {
        self.slices.iter().any(|s| s.gone)
    }
}
