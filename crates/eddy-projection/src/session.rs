//! One writer's session on a binding: its checkpoint in memory, and the
//! unit loop every runner shares.

use std::collections::BTreeMap;

use bytes::Bytes;
use eddy_streams::{Append, Offset, Payload, ProducerPosition, StreamConfig, StreamError};

use crate::checkpoint::{Checkpoint, Pending, Token};
use crate::declare::{Item, Params, State};
use crate::inputs::{read_range, ReadAhead};
use crate::unit_key::unit_key;
use crate::{
    Batch, Bound, CommitKind, Emits, Host, Pass, Progress, ProjectionError, Range, Result, Slice,
    Status, Unit, UnitResult,
};

/// What one unit did.
pub(crate) struct UnitDone {
    pub items: u64,
}

/// The units and items a cycle committed so far, over all its passes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    pub units: u64,
    pub items: u64,
}

/// A binding's checkpoint as one writer holds it between units.
pub(crate) struct Session<P, I, S> {
    pub(crate) host: Host,
    pub(crate) bound: Bound<P, I, S>,
    checkpoint: Checkpoint,
    token: Token,
    state: S,
    exists: bool,
    outputs_checked: bool,
    ahead: std::sync::Mutex<Vec<ReadAhead>>,
}

impl<P: Params, I: Item, S: State> Session<P, I, S> {
    /// Loads the binding's checkpoint.
    pub(crate) async fn load(host: Host, bound: Bound<P, I, S>) -> Result<Self> {
        let loaded = host.checkpoints.load(&bound.key).await?;
        let mut session = Session {
            state: bound.projection.initial().clone(),
            checkpoint: fresh_checkpoint(),
            token: loaded.token,
            exists: false,
            outputs_checked: false,
            ahead: std::sync::Mutex::new(Vec::new()),
            host,
            bound,
        };
        if let Some(checkpoint) = loaded.checkpoint {
            session.state = decode_state(&session.bound, &checkpoint)?;
            session.checkpoint = checkpoint;
            session.exists = true;
        } else {
            // A pin before the first settle saves this checkpoint: it must
            // carry the initial state, not `null`, so that a reload decodes.
            session.checkpoint.state = encode_state(&session.bound, &session.state)?;
        }
        Ok(session)
    }

    /// The committed state.
    pub(crate) fn state(&self) -> &S {
        &self.state
    }

    /// The committed offset of each input.
    pub(crate) fn offsets(&self) -> BTreeMap<String, Offset> {
        self.bound
            .projection
            .inputs()
            .iter()
            .map(|input| {
                let offset = self
                    .checkpoint
                    .inputs
                    .get(&input.name)
                    .map_or(Offset::ZERO, |m| m.offset);
                (input.name.clone(), offset)
            })
            .collect()
    }

    /// Whether every input's close (or deletion) is committed.
    pub(crate) fn all_closed(&self) -> bool {
        self.bound.projection.inputs().iter().all(|input| {
            self.checkpoint
                .inputs
                .get(&input.name)
                .is_some_and(|m| m.closed || m.gone)
        })
    }

    /// Inputs whose close is not committed yet, with their offsets.
    pub(crate) fn open_inputs(&self) -> Vec<(eddy_streams::StreamPath, Offset)> {
        self.bound
            .projection
            .inputs()
            .iter()
            .zip(&self.bound.inputs)
            .filter_map(|(input, path)| {
                let mark = self.checkpoint.inputs.get(&input.name);
                match mark {
                    Some(m) if m.closed || m.gone => None,
                    _ => Some((path.clone(), mark.map_or(Offset::ZERO, |m| m.offset))),
                }
            })
            .collect()
    }

    /// The report of a cycle that committed `tally` and whose last pass
    /// was `last`.
    pub(crate) fn progress(&self, tally: Tally, last: Pass) -> Progress<S> {
        Progress {
            state: self
                .bound
                .projection
                .has_state()
                .then(|| self.state.clone()),
            offsets: last.offsets.clone(),
            status: last.status,
            units: tally.units,
            items: tally.items,
            pass: last,
        }
    }

    /// Runs units until caught up, closed, forgotten or `limit`, counting
    /// each committed unit into `tally` as soon as it commits, so a caller
    /// that retries after a failure still knows what was committed.
    pub(crate) async fn pass(
        &mut self,
        limit: Option<usize>,
        unit_size: usize,
        tally: &mut Tally,
    ) -> Result<Pass> {
        let mut units = 0u64;
        let mut items = 0u64;
        let status = loop {
            if self.forget_due() {
                self.forget().await?;
                break Status::Forgotten;
            }
            if limit.is_some_and(|l| tally.units >= l as u64) {
                break Status::Limited;
            }
            if self.all_closed() && self.checkpoint.pending.is_none() {
                break Status::Closed;
            }
            let Some(done) = self.unit(unit_size).await? else {
                break Status::CaughtUp;
            };
            units += 1;
            items += done.items;
            tally.units += 1;
            tally.items += done.items;
        };
        Ok(Pass {
            status,
            units,
            items,
            offsets: self.offsets(),
        })
    }

    /// Whether the final unit of a gone input committed and the binding
    /// still has to be forgotten: the forget is part of that unit's
    /// outcome, retried until it lands.
    pub(crate) fn forget_due(&self) -> bool {
        self.exists
            && self.bound.projection.inner.forget_gone
            && self.checkpoint.pending.is_none()
            && self.checkpoint.inputs.values().any(|mark| mark.gone)
    }

    async fn forget(&mut self) -> Result<()> {
        self.token = self
            .host
            .checkpoints
            .forget(&self.bound.key, self.token)
            .await?;
        self.exists = false;
        Ok(())
    }

    /// The slices of the next unit: the pending one (replayed), or a fresh
    /// one. `None` when there is nothing to do.
    async fn next_slices(&self, unit_size: usize) -> Result<Option<(Vec<Slice<I>>, bool)>> {
        Ok(match self.checkpoint.pending.clone() {
            Some(pending) => Some((self.read_pinned(&pending).await?, true)),
            None => self.read_fresh(unit_size).await?.map(|s| (s, false)),
        })
    }

    fn make_unit(&self, slices: &[Slice<I>]) -> Unit<P> {
        let ranges: BTreeMap<String, Range> = slices
            .iter()
            .map(|s| {
                (
                    s.input.clone(),
                    Range {
                        from: s.from,
                        to: s.to,
                        closed: s.closed,
                        gone: s.gone,
                    },
                )
            })
            .collect();
        Unit {
            key: unit_key(&self.bound.key, &ranges),
            params: self.bound.params.clone(),
            ranges,
        }
    }

    /// Folds up to the tails in memory, writing nothing.
    pub(crate) async fn fold_in_memory(&mut self) -> Result<S> {
        while let Some((slices, _)) = self.next_slices(crate::DEFAULT_UNIT_SIZE).await? {
            let unit = self.make_unit(&slices);
            let batch = Batch::new(slices);
            let (state, _) = self.run_kernel(&batch, &unit).await?;
            self.checkpoint = self.settled(&unit.ranges, &state, &[])?;
            self.state = state;
            if batch.gone() {
                break;
            }
        }
        Ok(self.state.clone())
    }

    /// Runs one unit: the pending one, or a fresh one. `None` when there is
    /// nothing to do.
    pub(crate) async fn unit(&mut self, unit_size: usize) -> Result<Option<UnitDone>> {
        let Some((slices, replay)) = self.next_slices(unit_size).await? else {
            return Ok(None);
        };
        let unit = self.make_unit(&slices);
        let batch = Batch::new(slices);
        let items = batch.len() as u64;
        match self.bound.projection.commit_kind() {
            CommitKind::Checkpoint => self.commit_checkpoint(&batch, &unit).await?,
            CommitKind::Producer | CommitKind::AtLeastOnce => {
                self.commit_pinned(&batch, &unit, replay).await?
            }
        }
        Ok(Some(UnitDone { items }))
    }

    async fn run_kernel(&self, batch: &Batch<I>, unit: &Unit<P>) -> Result<(S, Emits)> {
        (self.bound.projection.inner.kernel)(self.state.clone(), batch, unit)
            .await
            .map_err(|source| ProjectionError::Handler {
                projection: self.bound.projection.id().to_owned(),
                source,
            })
    }

    async fn commit_checkpoint(&mut self, batch: &Batch<I>, unit: &Unit<P>) -> Result<()> {
        let (state, emits) = self.run_kernel(batch, unit).await?;
        let saved = async {
            let next = self.settled(&unit.ranges, &state, &[])?;
            self.save(next).await
        }
        .await;
        self.conclude(state, emits, saved, unit).await
    }

    /// Pins the unit's ranges, runs it and settles it. A producer unit runs
    /// its (deterministic) handler and encodes every output before the
    /// pin, so a handler's output mistake fails the unit with nothing
    /// written; an at-least-once unit pins before its handler runs.
    async fn commit_pinned(
        &mut self,
        batch: &Batch<I>,
        unit: &Unit<P>,
        replay: bool,
    ) -> Result<()> {
        if self.bound.projection.commit_kind() == CommitKind::Producer {
            self.check_outputs().await?;
            let (state, emits) = self.run_kernel(batch, unit).await?;
            let encoded = self.encode_outputs(&emits)?;
            if !replay {
                self.pin(unit).await?;
            }
            let settled = async {
                let emitted = self.append_outputs(encoded).await?;
                let next = self.settled(&unit.ranges, &state, &emitted)?;
                self.save(next).await
            }
            .await;
            return self.conclude(state, emits, settled, unit).await;
        }
        if !replay {
            self.pin(unit).await?;
        }
        let (state, emits) = self.run_kernel(batch, unit).await?;
        let settled = async {
            let next = self.settled(&unit.ranges, &state, &[])?;
            self.save(next).await
        }
        .await;
        self.conclude(state, emits, settled, unit).await
    }

    async fn pin(&mut self, unit: &Unit<P>) -> Result<()> {
        let mut pinned = self.checkpoint.clone();
        pinned.pending = Some(Pending {
            key: unit.key.clone(),
            ranges: unit.ranges.clone(),
        });
        self.save(pinned).await
    }

    /// Adopts the unit's state once its commit succeeded; otherwise the
    /// compensation (if any) sees what the handler produced.
    async fn conclude(
        &mut self,
        state: S,
        emits: Emits,
        committed: Result<()>,
        unit: &Unit<P>,
    ) -> Result<()> {
        match committed {
            Ok(()) => {
                self.state = state;
                Ok(())
            }
            Err(cause) => Err(self.compensate(state, emits, cause, unit).await),
        }
    }

    async fn compensate(
        &self,
        state: S,
        emits: Emits,
        cause: ProjectionError,
        unit: &Unit<P>,
    ) -> ProjectionError {
        if let Some(compensation) = &self.bound.projection.inner.commit.compensation {
            let result = UnitResult {
                state: self.bound.projection.has_state().then_some(state),
                emits,
            };
            if let Err(e) = compensation(&result, &cause, unit).resolve().await {
                tracing::warn!(
                    projection = self.bound.projection.id(),
                    unit = unit.key,
                    "compensation failed: {e}"
                );
            }
        }
        cause
    }

    async fn save(&mut self, next: Checkpoint) -> Result<()> {
        self.token = self
            .host
            .checkpoints
            .save(&self.bound.key, self.token, &next)
            .await?;
        self.checkpoint = next;
        self.exists = true;
        Ok(())
    }

    /// The checkpoint after the unit over `ranges` settles with `state`.
    fn settled(
        &self,
        ranges: &BTreeMap<String, Range>,
        state: &S,
        emitted: &[String],
    ) -> Result<Checkpoint> {
        let mut next = self.checkpoint.clone();
        next.state = encode_state(&self.bound, state)?;
        for (name, range) in ranges {
            let mark = next.inputs.entry(name.clone()).or_default();
            mark.offset = range.to;
            mark.closed |= range.closed;
            mark.gone |= range.gone;
        }
        for output in emitted {
            *next.next_seq.entry(output.clone()).or_insert(0) += 1;
        }
        next.pending = None;
        next.units += 1;
        Ok(next)
    }

    async fn read_fresh(&self, unit_size: usize) -> Result<Option<Vec<Slice<I>>>> {
        let mut slices = Vec::new();
        let mut work = false;
        for (input, path) in self
            .bound
            .projection
            .inputs()
            .iter()
            .zip(&self.bound.inputs)
        {
            let mark = self
                .checkpoint
                .inputs
                .get(&input.name)
                .cloned()
                .unwrap_or_default();
            let mut slice = Slice {
                input: input.name.clone(),
                path: path.to_string(),
                items: Vec::new(),
                from: mark.offset,
                to: mark.offset,
                closed: false,
                gone: false,
            };
            if mark.gone {
                slices.push(slice);
                continue;
            }
            let mut ahead = self.take_ahead(slices.len());
            let read = read_range(
                self.host.storage.as_ref(),
                path,
                mark.offset,
                unit_size,
                Some(&mut ahead),
            )
            .await;
            self.put_ahead(slices.len(), ahead);
            match read {
                Ok(raw) => {
                    slice.items = decode(input, mark.offset, &raw.messages)?;
                    slice.to = raw.to;
                    slice.closed = raw.closed && !mark.closed;
                    work |= !slice.items.is_empty() || slice.closed;
                }
                Err(StreamError::Gone { .. }) if self.exists => {
                    slice.gone = true;
                    work = true;
                }
                Err(
                    e @ (StreamError::Gone { .. }
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
                Err(e) => return Err(e.into()),
            }
            slices.push(slice);
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

    async fn read_pinned(&self, pending: &Pending) -> Result<Vec<Slice<I>>> {
        let mut slices = Vec::new();
        for (input, path) in self
            .bound
            .projection
            .inputs()
            .iter()
            .zip(&self.bound.inputs)
        {
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
            let items = if range.gone || len == 0 {
                Vec::new()
            } else {
                match read_range(self.host.storage.as_ref(), path, range.from, len, None).await {
                    Ok(raw) if raw.messages.len() == len => {
                        decode(input, range.from, &raw.messages)?
                    }
                    Ok(raw) => {
                        return Err(unreproducible(format!(
                            "only {} of {len} items remain",
                            raw.messages.len()
                        )))
                    }
                    Err(
                        e @ (StreamError::Gone { .. }
                        | StreamError::NotFound { .. }
                        | StreamError::OffsetBeyondTail { .. }),
                    ) => return Err(unreproducible(e.to_string())),
                    Err(e) => return Err(e.into()),
                }
            };
            slices.push(Slice {
                input: input.name.clone(),
                path: path.to_string(),
                items,
                from: range.from,
                to: range.to,
                closed: range.closed,
                gone: range.gone,
            });
        }
        Ok(slices)
    }

    /// Creates absent outputs on this owner; refuses closed, gone and
    /// absent foreign outputs.
    async fn check_outputs(&mut self) -> Result<()> {
        if self.outputs_checked {
            return Ok(());
        }
        for (output, path) in self
            .bound
            .projection
            .outputs()
            .iter()
            .zip(&self.bound.outputs)
        {
            let invalid = |reason: String| ProjectionError::InvalidOutput {
                output: output.name.clone(),
                path: path.to_string(),
                reason,
            };
            match self.host.storage.head(path).await {
                Ok(info) if info.closed => return Err(invalid("the stream is closed".into())),
                Ok(_) => {}
                Err(StreamError::NotFound { .. }) if !output.foreign => {
                    self.host
                        .storage
                        .create(path, StreamConfig::json(), Payload::empty())
                        .await?;
                }
                Err(StreamError::NotFound { .. }) => {
                    return Err(invalid(
                        "a foreign output must exist before the first append".into(),
                    ))
                }
                Err(StreamError::Gone { .. }) => {
                    return Err(invalid("the stream was deleted".into()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.outputs_checked = true;
        Ok(())
    }

    /// Checks and encodes the items of every output, refusing names the
    /// projection does not declare: the messages to append, by output.
    fn encode_outputs(&self, emits: &Emits) -> Result<Vec<(usize, Vec<Bytes>)>> {
        let declared = self.bound.projection.outputs();
        if let Some((name, _)) = emits
            .outputs
            .iter()
            .find(|(name, items)| !items.is_empty() && !declared.iter().any(|o| &o.name == *name))
        {
            return Err(ProjectionError::InvalidOutput {
                output: name.clone(),
                path: String::new(),
                reason: "the projection declares no output with this name".into(),
            });
        }
        let mut encoded = Vec::new();
        for (index, (output, path)) in declared.iter().zip(&self.bound.outputs).enumerate() {
            let Some(items) = emits.outputs.get(&output.name).filter(|i| !i.is_empty()) else {
                continue;
            };
            let messages =
                output
                    .encode(items)
                    .map_err(|reason| ProjectionError::InvalidOutput {
                        output: output.name.clone(),
                        path: path.to_string(),
                        reason,
                    })?;
            encoded.push((index, messages));
        }
        Ok(encoded)
    }

    /// Appends each output's encoded items with its producer position;
    /// returns the outputs that used a sequence number.
    async fn append_outputs(&self, encoded: Vec<(usize, Vec<Bytes>)>) -> Result<Vec<String>> {
        let declared = self.bound.projection.outputs();
        let mut emitted = Vec::new();
        for (index, messages) in encoded {
            let (output, path) = (&declared[index], &self.bound.outputs[index]);
            let seq = self
                .checkpoint
                .next_seq
                .get(&output.name)
                .copied()
                .unwrap_or(0);
            let position = ProducerPosition::new(self.producer_id(&output.name), 0, seq);
            let append = Append::messages(messages).with_producer(position);
            match self.host.storage.append(path, append).await {
                Ok(_) => {}
                Err(
                    e @ (StreamError::Closed { .. }
                    | StreamError::Gone { .. }
                    | StreamError::NotFound { .. }),
                ) => {
                    return Err(ProjectionError::InvalidOutput {
                        output: output.name.clone(),
                        path: path.to_string(),
                        reason: e.to_string(),
                    })
                }
                Err(e) => return Err(e.into()),
            }
            emitted.push(output.name.clone());
        }
        Ok(emitted)
    }

    /// The producer id of one output of this binding: stable across
    /// retries, new when the binding is rebuilt.
    fn producer_id(&self, output: &str) -> String {
        format!(
            "eddy-projection/{}/{}/{}/{output}/{}",
            self.bound.key.projection,
            self.bound.key.version,
            self.bound.key.params,
            self.checkpoint.generation
        )
    }
}

fn fresh_checkpoint() -> Checkpoint {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Checkpoint {
        generation: format!("{nanos:x}-{:016x}", fastrand::u64(..)),
        ..Checkpoint::default()
    }
}

fn encode_state<P, I, S: State>(bound: &Bound<P, I, S>, state: &S) -> Result<serde_json::Value> {
    serde_json::to_value(state).map_err(|e| ProjectionError::InvalidCheckpoint {
        checkpoint: bound.key.path.to_string(),
        reason: format!("the state does not encode: {e}"),
    })
}

fn decode_state<P, I, S: State>(bound: &Bound<P, I, S>, checkpoint: &Checkpoint) -> Result<S> {
    serde_json::from_value(checkpoint.state.clone()).map_err(|e| {
        ProjectionError::InvalidCheckpoint {
            checkpoint: bound.key.path.to_string(),
            reason: format!("the state does not decode: {e}"),
        }
    })
}

fn decode<I>(input: &crate::Input<I>, from: Offset, messages: &[bytes::Bytes]) -> Result<Vec<I>> {
    messages
        .iter()
        .enumerate()
        .map(|(i, message)| {
            (input.decode)(message).map_err(|reason| ProjectionError::InvalidItem {
                input: input.name.clone(),
                offset: Offset::at(from.position() + i as u64),
                reason,
            })
        })
        .collect()
}
