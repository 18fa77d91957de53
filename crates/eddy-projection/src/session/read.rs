//! Reading a unit's slices: the pending unit's pinned ranges, or fresh
//! input from where the checkpoint stands.

use std::collections::BTreeMap;

use bytes::Bytes;
use eddy_streams::{Offset, StreamError, StreamPath};

use super::Session;
use crate::batch::AnySlice;
use crate::checkpoint::{InputMark, Pending};
use crate::declare::{Params, State};
use crate::handles::InputSpec;
use crate::inputs::{read_range, Raw, ReadAhead};
use crate::progress::UnitBounds;
use crate::unit_key::unit_key;
use crate::{ProjectionError, Range, Result, Thinned, Unit};

impl<P: Params, S: State> Session<P, S> {
    /// The slices of the next unit: the pending one (replayed), or a fresh
    /// one. `None` when there is nothing to do.
    pub(super) async fn next_slices(
        &self,
        bounds: UnitBounds,
    ) -> Result<Option<(Vec<AnySlice>, bool)>> {
        Ok(match self.checkpoint.pending.clone() {
            Some(pending) => Some((self.read_pinned(&pending).await?, true)),
            None => self.read_fresh(bounds).await?.map(|s| (s, false)),
        })
    }

    pub(super) fn make_unit(&self, slices: &[AnySlice]) -> Unit<P> {
        let ranges: BTreeMap<String, Range> = slices
            .iter()
            .map(|s| (s.input.clone(), s.range()))
            .collect();
        Unit {
            key: unit_key(&self.bound.key, &ranges),
            params: self.bound.params.clone(),
            ranges,
        }
    }

    fn inputs(&self) -> impl Iterator<Item = (&InputSpec, &StreamPath)> {
        self.bound
            .projection
            .inputs()
            .iter()
            .zip(&self.bound.inputs)
    }

    async fn read_fresh(&self, bounds: UnitBounds) -> Result<Option<Vec<AnySlice>>> {
        let mut slices = Vec::new();
        let mut work = false;
        for (index, (input, path)) in self.inputs().enumerate() {
            let mark = self
                .checkpoint
                .inputs
                .get(&input.name)
                .cloned()
                .unwrap_or_default();
            if mark.gone {
                let range = Range::between(mark.offset, mark.offset);
                slices.push(decode(input, path, &[], Vec::new(), range)?);
                continue;
            }
            let mut from = mark.offset;
            let mut ahead = self.take_ahead(index);
            let storage = self.host.storage.as_ref();
            let mut read = read_range(storage, path, from, bounds, Some(&mut ahead)).await;
            if let Err(StreamError::OffsetDropped { earliest, .. }) = &read {
                if input.accepts_dropped {
                    from = *earliest;
                    read = read_range(storage, path, from, bounds, Some(&mut ahead)).await;
                }
            }
            self.put_ahead(index, ahead);
            match read {
                // Compaction dropped messages in the range: a handler that
                // folds every message would silently get another result.
                Ok(raw)
                    if !input.accepts_compaction
                        && skipped(from, raw.to, raw.messages.len()) =>
                {
                    return Err(ProjectionError::HistoryUnavailable {
                        input: input.name.clone(),
                        path: path.to_string(),
                        reason: format!(
                            "the stream's compaction dropped messages between {from} and {} before this binding read them; \
                             a binding that handles every message cannot go on (read the stream within its compaction lag, \
                             declare the input with `accept_compaction` if the handler keeps only the latest message of each key, \
                             or fold from a stream that is not compacted)",
                            raw.to
                        ),
                    })
                }
                Ok(raw) if input.accepts_compaction && may_have_missed(from, &mark, &raw) => {
                    let before = raw.dropped_deletes.map_or(raw.to, |d| d.before);
                    return Err(ProjectionError::HistoryUnavailable {
                        input: input.name.clone(),
                        path: path.to_string(),
                        reason: missed_delete(from, before),
                    });
                }
                Ok(raw) => {
                    let closed = raw.closed && !mark.closed;
                    work |= !raw.messages.is_empty() || closed;
                    let range = Range {
                        closed,
                        deletes_seen: input
                            .accepts_compaction
                            .then(|| raw.dropped_deletes.map_or(0, |d| d.count)),
                        ..Range::between(from, raw.to)
                    };
                    slices.push(decode(input, path, &raw.messages, raw.offsets, range)?);
                }
                // Deleted, or deleted while forks still read it, or another
                // stream created at its path (a stale offset): either way
                // the stream this binding read is gone, and it gets its
                // final unit.
                Err(
                    StreamError::Gone { .. }
                    | StreamError::SoftDeleted { .. }
                    | StreamError::StaleOffset { .. },
                ) if self.exists => {
                    work = true;
                    let range = Range {
                        gone: true,
                        ..Range::between(from, mark.offset)
                    };
                    slices.push(decode(input, path, &[], Vec::new(), range)?);
                }
                Err(
                    e @ (StreamError::Gone { .. }
                    | StreamError::SoftDeleted { .. }
                    | StreamError::NotFound { .. }
                    | StreamError::OffsetBeyondTail { .. }),
                ) => {
                    return Err(ProjectionError::HistoryUnavailable {
                        input: input.name.clone(),
                        path: path.to_string(),
                        reason: if self.exists {
                            e.to_string()
                        } else {
                            format!("{e}, and the binding has no checkpoint")
                        },
                    })
                }
                Err(StreamError::OffsetDropped {
                    offset, earliest, ..
                }) => {
                    return Err(ProjectionError::HistoryUnavailable {
                        input: input.name.clone(),
                        path: path.to_string(),
                        reason: dropped(offset, earliest),
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(work.then_some(slices))
    }

    fn take_ahead(&self, index: usize) -> ReadAhead {
        let mut ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner());
        if ahead.len() <= index {
            ahead.resize_with(index + 1, ReadAhead::default);
        }
        std::mem::take(&mut ahead[index])
    }

    fn put_ahead(&self, index: usize, buffer: ReadAhead) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = ahead.get_mut(index) {
            *slot = buffer;
        }
    }

    async fn read_pinned(&self, pending: &Pending) -> Result<Vec<AnySlice>> {
        let mut slices = Vec::new();
        for (input, path) in self.inputs() {
            let range = match pending.ranges.get(&input.name) {
                Some(range) => range.clone(),
                None => {
                    let at = self
                        .checkpoint
                        .inputs
                        .get(&input.name)
                        .map_or(Offset::ZERO, |m| m.offset);
                    Range::between(at, at)
                }
            };
            let unreproducible = |reason: String| ProjectionError::RangeUnreproducible {
                input: input.name.clone(),
                path: path.to_string(),
                from: range.from,
                to: range.to,
                reason,
            };
            let len = usize::try_from(range.len()).map_err(|e| unreproducible(e.to_string()))?;
            let (messages, offsets) = if range.gone || len == 0 {
                (Vec::new(), Vec::new())
            } else {
                let exact = UnitBounds {
                    items: len,
                    bytes: usize::MAX,
                };
                match read_range(self.host.storage.as_ref(), path, range.from, exact, None).await {
                    Ok(raw) => match replay_differs(&range, &raw) {
                        None => (raw.messages, raw.offsets),
                        Some(reason) => return Err(unreproducible(reason)),
                    },
                    Err(
                        e @ (StreamError::Gone { .. }
                        | StreamError::SoftDeleted { .. }
                        | StreamError::NotFound { .. }
                        | StreamError::StaleOffset { .. }
                        | StreamError::OffsetBeyondTail { .. }
                        | StreamError::OffsetDropped { .. }),
                    ) => return Err(unreproducible(e.to_string())),
                    Err(e) => return Err(e.into()),
                }
            };
            slices.push(decode(input, path, &messages, offsets, range)?);
        }
        Ok(slices)
    }
}

/// Why the items a replay read (at most as many as the pinned `range`
/// holds) are not the ones the range pinned, if they are not.
fn replay_differs(range: &Range, raw: &Raw) -> Option<String> {
    // The incarnation must be the pinned one: a range from the zero
    // offset reads any stream at the path, also one created after the pin.
    if raw
        .offsets
        .iter()
        .any(|o| o.incarnation() != range.to.incarnation())
    {
        return Some(format!(
            "the input was created again: the range now ends at {}",
            raw.to
        ));
    }
    let items = range.len();
    let end = range.to.position();
    let within = raw.offsets.iter().filter(|o| o.position() < end).count();
    if within as u64 != items {
        return Some(format!(
            "only {within} of its {items} items remain (the stream's retention or compaction dropped the others after the pin)"
        ));
    }
    // Compaction only drops messages, so as many items before the same
    // end are the same ones; the digest makes sure.
    let kept = Thinned::of(range.from, range.to, &raw.offsets);
    (kept != range.thinned)
        .then(|| "the items the stream keeps in the range are not the ones pinned".to_owned())
}

/// Whether a read from `from` to `to` that gave `messages` messages
/// skipped positions (compaction dropped messages between them).
fn skipped(from: Offset, to: Offset, messages: usize) -> bool {
    to.position().saturating_sub(from.position()) > messages as u64
}

/// Whether a binding that resumes at `from` (where `mark` stands) may have
/// missed a delete compaction dropped past its lifetime, as `raw` tells:
/// when the stream dropped one at or after `from` (the binding may have
/// read an earlier change of its row, and keeps the row), unless the
/// binding reads from the start (it read nothing) or saw as many dropped
/// deletes on its last read (none was dropped since; what was dropped
/// before, it never read the rows of).
fn may_have_missed(from: Offset, mark: &InputMark, raw: &Raw) -> bool {
    raw.dropped_deletes.is_some_and(|dropped| {
        from.position() > 0
            && from.position() < dropped.before.position()
            && mark.deletes_seen != Some(dropped.count)
    })
}

/// Why a binding cannot read on after compaction dropped a delete it may
/// not have read, and how to go on.
fn missed_delete(from: Offset, before: Offset) -> String {
    let at = before.with_position(before.position().saturating_sub(1));
    format!(
        "the stream's compaction dropped the delete at {at} (its delete lifetime was over) while this binding had read only up to {from}: \
         the binding may hold a row the stream deleted; rebuild the binding from the start (forget its checkpoint and run it again), \
         and keep its bindings within the stream's delete lifetime (`deletes=` of its compaction policy, one day by default)"
    )
}

/// Why a binding cannot read on after its stream's retention policy
/// dropped what it had not read, and how to go on.
fn dropped(offset: Offset, earliest: Offset) -> String {
    format!(
        "the stream's retention policy dropped messages {offset}..{earliest} before this binding read them (the earliest kept is {earliest}); \
         to go on from there, declare the input with `accept_dropped_history` (only right when the handler does not need every message), \
         or fold from a stream that keeps its whole history"
    )
}

/// Decodes one input's messages into its slice over `range`.
fn decode(
    input: &InputSpec,
    path: &StreamPath,
    messages: &[Bytes],
    offsets: Vec<Offset>,
    range: Range,
) -> Result<AnySlice> {
    let items =
        (input.decode)(messages).map_err(|(index, reason)| ProjectionError::InvalidItem {
            input: input.name.clone(),
            offset: offsets
                .get(index)
                .copied()
                .unwrap_or_else(|| range.from.advanced(index as u64)),
            reason,
        })?;
    Ok(AnySlice {
        deletes_seen: range.deletes_seen,
        input: input.name.clone(),
        path: path.to_string(),
        items,
        offsets,
        from: range.from,
        to: range.to,
        closed: range.closed,
        gone: range.gone,
    })
}
