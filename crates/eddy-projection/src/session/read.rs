//! Reading a unit's slices: the pending unit's pinned ranges, or fresh
//! input from where the checkpoint stands.

use std::collections::BTreeMap;

use bytes::Bytes;
use eddy_streams::{Offset, StreamError, StreamPath};

use super::Session;
use crate::batch::AnySlice;
use crate::checkpoint::Pending;
use crate::declare::{Params, State};
use crate::handles::InputSpec;
use crate::inputs::{read_range, ReadAhead};
use crate::progress::UnitBounds;
use crate::unit_key::unit_key;
use crate::{ProjectionError, Range, Result, Unit};

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
                slices.push(decode(
                    input,
                    path,
                    &[],
                    mark.offset,
                    mark.offset,
                    false,
                    false,
                )?);
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
            let slice = |messages: &[Bytes], to: Offset, closed: bool, gone: bool| {
                decode(input, path, messages, from, to, closed, gone)
            };
            match read {
                Ok(raw) => {
                    let closed = raw.closed && !mark.closed;
                    work |= !raw.messages.is_empty() || closed;
                    slices.push(slice(&raw.messages, raw.to, closed, false)?);
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
                    slices.push(slice(&[], mark.offset, false, true)?);
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
                    Range {
                        from: at,
                        to: at,
                        closed: false,
                        gone: false,
                    }
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
            let messages = if range.gone || len == 0 {
                Vec::new()
            } else {
                let exact = UnitBounds {
                    items: len,
                    bytes: usize::MAX,
                };
                match read_range(self.host.storage.as_ref(), path, range.from, exact, None).await {
                    // The end must be the pinned one, incarnation included:
                    // a range from the zero offset reads any stream at the
                    // path, also one created after the pin.
                    Ok(raw) if raw.messages.len() == len && raw.to == range.to => raw.messages,
                    Ok(raw) if raw.messages.len() == len => {
                        return Err(unreproducible(format!(
                            "the input was created again: the range now ends at {}",
                            raw.to
                        )))
                    }
                    Ok(raw) => {
                        return Err(unreproducible(format!(
                            "only {} of {len} items remain",
                            raw.messages.len()
                        )))
                    }
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
            slices.push(decode(
                input,
                path,
                &messages,
                range.from,
                range.to,
                range.closed,
                range.gone,
            )?);
        }
        Ok(slices)
    }
}

/// Decodes one input's messages into its slice.
/// Why a binding cannot read on after its stream's retention policy
/// dropped what it had not read, and how to go on.
fn dropped(offset: Offset, earliest: Offset) -> String {
    format!(
        "the stream's retention policy dropped messages {offset}..{earliest} before this binding read them (the earliest kept is {earliest}); \
         to go on from there, declare the input with `accept_dropped_history` (only right when the handler does not need every message), \
         or fold from a stream that keeps its whole history"
    )
}

fn decode(
    input: &InputSpec,
    path: &StreamPath,
    messages: &[Bytes],
    from: Offset,
    to: Offset,
    closed: bool,
    gone: bool,
) -> Result<AnySlice> {
    let items =
        (input.decode)(messages).map_err(|(index, reason)| ProjectionError::InvalidItem {
            input: input.name.clone(),
            offset: from.advanced(index as u64),
            reason,
        })?;
    Ok(AnySlice {
        input: input.name.clone(),
        path: path.to_string(),
        items,
        len: messages.len(),
        from,
        to,
        closed,
        gone,
    })
}
