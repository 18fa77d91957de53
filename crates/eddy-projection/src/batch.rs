//! What a handler sees: a unit of work, its batch of slices, and entries.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use eddy_streams::Offset;
use serde::{Deserialize, Serialize};

use crate::digest::Fnv;
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
    /// What compaction kept of the range, when it dropped messages in it
    /// (an input that [accepts compaction](crate::Declare::accept_compaction));
    /// `None` when the range holds a message at every position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinned: Option<Thinned>,
    /// How many deletes the stream's compaction had dropped past their
    /// lifetime when the range was read, for an input that [accepts
    /// compaction](crate::Declare::accept_compaction) (`None` for others,
    /// and in ranges pinned before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes_seen: Option<u64>,
}

impl Range {
    /// The range `from..to`, neither closed nor gone nor thinned.
    pub(crate) fn between(from: Offset, to: Offset) -> Range {
        Range {
            from,
            to,
            closed: false,
            gone: false,
            thinned: None,
            deletes_seen: None,
        }
    }

    /// The number of items in the range: the positions from `from` to
    /// `to`, or fewer when compaction thinned it.
    pub fn len(&self) -> u64 {
        match &self.thinned {
            Some(thinned) => thinned.items,
            None => self.to.position().saturating_sub(self.from.position()),
        }
    }

    /// Whether the range holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The items a compacted stream kept of a range: how many, and a digest
/// of their offsets. A pin records it, so that a replay can tell that it
/// reads exactly the items the pinned unit saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thinned {
    /// How many items the range holds.
    pub items: u64,
    /// A digest of the items' offsets (16 hex digits).
    pub digest: String,
}

impl Thinned {
    /// What `offsets` are of the range `from..to`: `None` when they fill
    /// every position of it.
    pub(crate) fn of(from: Offset, to: Offset, offsets: &[Offset]) -> Option<Thinned> {
        let positions = to.position().saturating_sub(from.position());
        let items = offsets.len() as u64;
        (items < positions).then(|| Thinned {
            items,
            digest: digest(offsets),
        })
    }
}

/// A digest of the offsets of a range's items.
fn digest(offsets: &[Offset]) -> String {
    let mut hash = Fnv::new();
    for offset in offsets {
        hash.feed(&offset.incarnation().to_le_bytes());
        hash.feed(&offset.position().to_le_bytes());
    }
    hash.finish()
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
    /// The item's offset in its stream, as the store gives it (the
    /// position before it; on a compacted stream, with gaps where
    /// messages were dropped).
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
    /// Where the slice starts reading: the first item's position, unless
    /// compaction dropped the messages there.
    pub from: Offset,
    /// The offset after the last item.
    pub to: Offset,
    /// This slice reaches the end of a closed input.
    pub closed: bool,
    /// The input was deleted; this is the final unit.
    pub gone: bool,
    /// Each item's offset.
    offsets: &'a [Offset],
}

impl<'a, T> Slice<'a, T> {
    /// Every item with its offset.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'a, T>> + 'a {
        let items: &'a [T] = self.items;
        items.iter().zip(self.offsets).map(|(item, offset)| Entry {
            item,
            offset: *offset,
        })
    }

    /// The offset of the item at `index`, as the store gives it (with
    /// gaps where compaction dropped messages); `None` past the last item.
    pub fn offset_of(&self, index: usize) -> Option<Offset> {
        self.offsets.get(index).copied()
    }
}

/// One input's slice with its items type-erased (a boxed `Vec<T>`).
pub(crate) struct AnySlice {
    pub input: String,
    pub path: String,
    pub items: Box<dyn Any + Send + Sync>,
    /// Each item's offset, as the store gave it.
    pub offsets: Vec<Offset>,
    pub from: Offset,
    pub to: Offset,
    pub closed: bool,
    pub gone: bool,
    /// See [`Range::deletes_seen`].
    pub deletes_seen: Option<u64>,
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
            offsets: &self.offsets,
        })
    }

    pub fn range(&self) -> Range {
        Range {
            from: self.from,
            to: self.to,
            closed: self.closed,
            gone: self.gone,
            thinned: Thinned::of(self.from, self.to, &self.offsets),
            deletes_seen: self.deletes_seen,
        }
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.offsets.len()
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
                    offsets: &[],
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
        self.slices.iter().map(AnySlice::len).sum()
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
