//! One writer's session on a binding: its checkpoint in memory, and the
//! unit loop every runner shares.

mod outputs;
mod read;

pub(crate) use outputs::{
    append_error, append_size, encode_outputs, release_producers, split_appends,
};

use outputs::OutputAppends;

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_streams::Offset;

use crate::checkpoint::{Checkpoint, Failure, Pending, Token};
use crate::declare::{Params, State};
use crate::inputs::ReadAhead;
use crate::metrics::BindingMetrics;
use crate::progress::UnitBounds;
use crate::transaction::{race_retry, Failed, UnitTransaction};
use crate::{
    Batch, Bound, CommitKind, Emits, Host, Pass, Progress, ProjectionError, Range, Result, Status,
    Unit, UnitResult,
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
pub(crate) struct Session<P, S> {
    pub(crate) host: Host,
    pub(crate) bound: Bound<P, S>,
    checkpoint: Checkpoint,
    token: Token,
    state: S,
    exists: bool,
    outputs_checked: bool,
    ahead: std::sync::Mutex<Vec<ReadAhead>>,
    /// How a SQL host commits a unit of a transaction projection.
    transaction: Option<Arc<dyn UnitTransaction<P>>>,
    metrics: BindingMetrics,
    /// The most bytes of one output append: the host's, lowered when the
    /// store refuses an append as too large.
    append_limit: usize,
}

impl<P: Params, S: State> Session<P, S> {
    /// Loads the binding's checkpoint. A failed load counts as a failed
    /// run in the binding's metrics.
    pub(crate) async fn load(host: Host, bound: Bound<P, S>) -> Result<Self> {
        let key = bound.key.clone();
        let loaded = Self::open(host, bound).await;
        if let Err(error) = &loaded {
            BindingMetrics::new(&key).failed(error.code());
        }
        loaded
    }

    async fn open(host: Host, bound: Bound<P, S>) -> Result<Self> {
        let loaded = host.checkpoints.load(&bound.key).await?;
        let mut session = Session {
            metrics: BindingMetrics::new(&bound.key),
            state: bound.projection.initial().clone(),
            checkpoint: fresh_checkpoint(),
            token: loaded.token,
            exists: false,
            outputs_checked: false,
            ahead: std::sync::Mutex::new(Vec::new()),
            transaction: None,
            append_limit: host.append_limit,
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

    /// This session with its units committed by a SQL host's transaction.
    pub(crate) fn with_transaction(mut self, transaction: Arc<dyn UnitTransaction<P>>) -> Self {
        self.transaction = Some(transaction);
        self
    }

    /// Whether the binding has a checkpoint (saved, not forgotten).
    pub(crate) fn has_checkpoint(&self) -> bool {
        self.exists
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
    /// that retries after a failure still knows what was committed. The
    /// binding's metrics count the units and a failure, and take its lag
    /// at the end.
    pub(crate) async fn pass(
        &mut self,
        limit: Option<usize>,
        bounds: UnitBounds,
        tally: &mut Tally,
    ) -> Result<Pass> {
        let pass = self.units(limit, bounds, tally).await;
        if let Err(error) = &pass {
            self.metrics.failed(error.code());
            self.record_failure(error).await;
        }
        let reached_tails = matches!(
            pass,
            Ok(Pass {
                status: Status::CaughtUp | Status::Closed | Status::Forgotten,
                ..
            })
        );
        self.record_lag(reached_tails).await;
        pass
    }

    async fn units(
        &mut self,
        limit: Option<usize>,
        bounds: UnitBounds,
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
            let Some(done) = self.unit(bounds).await? else {
                break Status::CaughtUp;
            };
            self.metrics.committed(done.items);
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

    /// Keeps `error` in the checkpoint for operators, when it is the
    /// binding's own failure (its handler, its input, its outputs): not a
    /// storage failure the runner retries, and not a checkpoint this
    /// writer may no longer move. A binding without a checkpoint gets
    /// none: a failed first run writes nothing. A failure to keep it is
    /// logged; the run's error is what the caller gets either way. The
    /// same failure as the one kept is not written again.
    async fn record_failure(&mut self, error: &ProjectionError) {
        let code = error.code();
        let cause = match error {
            ProjectionError::Compensation { cause, .. } => cause,
            error => error,
        };
        if !self.exists || error.is_retryable() || cause.code().starts_with("checkpoint/") {
            return;
        }
        let message = error.to_string();
        let kept = self.checkpoint.failure.as_ref();
        if kept.is_some_and(|kept| kept.code == code && kept.message == message) {
            return;
        }
        let mut next = self.checkpoint.clone();
        next.failure = Some(Failure {
            code: code.to_owned(),
            message,
            at_ms: now_ms().unwrap_or_default(),
        });
        if let Err(e) = self.save(next).await {
            tracing::warn!(
                projection = self.bound.projection.id(),
                binding = self.bound.key.params,
                "cannot keep the run's failure in the checkpoint: {e}"
            );
        }
    }

    /// Sets each input's lag gauge: zero after a pass whose reads reached
    /// every tail, else the distance from the committed offset to the
    /// tail now (an input whose tail cannot be read keeps its last value).
    async fn record_lag(&self, reached_tails: bool) {
        let inputs = self.bound.projection.inputs().iter();
        for (input, path) in inputs.zip(&self.bound.inputs) {
            let mark = self.checkpoint.inputs.get(&input.name);
            let offset = mark.map_or(Offset::ZERO, |m| m.offset);
            let lag = if reached_tails || mark.is_some_and(|m| m.closed || m.gone) {
                0
            } else {
                match self.host.storage.head(path).await {
                    Ok(info) => info.tail.position().saturating_sub(offset.position()),
                    Err(_) => continue,
                }
            };
            self.metrics.lag(&input.name, lag);
        }
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

    /// Forgets the binding, its producers released first: a forget that
    /// fails after them is simply due again.
    async fn forget(&mut self) -> Result<()> {
        let generation = &self.checkpoint.generation;
        release_producers(self.host.storage.as_ref(), &self.bound, generation).await?;
        self.token = self
            .host
            .checkpoints
            .forget(&self.bound.key, self.token)
            .await?;
        self.exists = false;
        Ok(())
    }

    /// Folds up to the tails in memory, writing nothing.
    pub(crate) async fn fold_in_memory(&mut self) -> Result<S> {
        while let Some((slices, _)) = self.next_slices(UnitBounds::DEFAULT).await? {
            let unit = self.make_unit(&slices);
            let batch = self.batch(slices);
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
    pub(crate) async fn unit(&mut self, bounds: UnitBounds) -> Result<Option<UnitDone>> {
        if let Some(transaction) = self.transaction.clone() {
            return self.unit_in_transaction(transaction.as_ref(), bounds).await;
        }
        let Some((slices, replay)) = self.next_slices(bounds).await? else {
            return Ok(None);
        };
        let unit = self.make_unit(&slices);
        let batch = self.batch(slices);
        let items = batch.len() as u64;
        match self.bound.projection.commit_kind() {
            CommitKind::Checkpoint => self.commit_checkpoint(&batch, &unit).await?,
            CommitKind::Producer | CommitKind::AtLeastOnce => {
                self.commit_pinned(&batch, &unit, replay).await?
            }
            CommitKind::Transaction => {
                return Err(ProjectionError::invalid(format!(
                    "projection `{}` commits in a SQL transaction: run it on a SQL host",
                    self.bound.projection.id()
                )))
            }
        }
        Ok(Some(UnitDone { items }))
    }

    /// Runs one unit in a SQL host's transaction. A transaction that lost
    /// a race runs again after a jittered pause, on inputs read again: the
    /// unit key stays when the ranges do.
    async fn unit_in_transaction(
        &mut self,
        transaction: &dyn UnitTransaction<P>,
        bounds: UnitBounds,
    ) -> Result<Option<UnitDone>> {
        self.check_outputs().await?;
        let retry = race_retry();
        let mut attempt = 0;
        loop {
            let Some((slices, _)) = self.next_slices(bounds).await? else {
                return Ok(None);
            };
            let unit = self.make_unit(&slices);
            let batch = self.batch(slices);
            let next = self.settled(&unit.ranges, &self.state, &[])?;
            let items = batch.len() as u64;
            let committed = transaction
                .commit(batch, &unit, &self.bound.key, self.token, &next)
                .await;
            match committed {
                Ok(token) => {
                    self.token = token;
                    self.checkpoint = next;
                    self.exists = true;
                    return Ok(Some(UnitDone { items }));
                }
                Err(Failed::Race(error)) => {
                    let Some(delay) = retry.delay(attempt) else {
                        return Err(error);
                    };
                    attempt += 1;
                    self.metrics.retried();
                    tracing::debug!(
                        unit = unit.key,
                        "transaction lost a race, running again: {error}"
                    );
                    tokio::time::sleep(delay).await;
                }
                Err(Failed::Fault(error)) => return Err(error),
            }
        }
    }

    fn batch(&self, slices: Vec<crate::batch::AnySlice>) -> Batch {
        Batch::new(self.bound.projection.inner.number, slices)
    }

    /// Runs the handler on the unit: the new state and what it wrote. A
    /// handler that used a handle of another declaration fails the unit.
    async fn run_kernel(&self, batch: &Batch, unit: &Unit<P>) -> Result<(S, Emits)> {
        let projection = &self.bound.projection;
        let mut emits = Emits::new(projection.inner.number);
        let state = (projection.inner.kernel)(self.state.clone(), batch, unit, &mut emits)
            .await
            .map_err(|source| ProjectionError::Handler {
                projection: projection.id().to_owned(),
                source,
            })?;
        if let Some(misuse) = batch.misuse() {
            return Err(ProjectionError::invalid(format!(
                "projection `{}`: {misuse}",
                projection.id()
            )));
        }
        Ok((state, emits))
    }

    async fn commit_checkpoint(&mut self, batch: &Batch, unit: &Unit<P>) -> Result<()> {
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
    async fn commit_pinned(&mut self, batch: &Batch, unit: &Unit<P>, replay: bool) -> Result<()> {
        if self.bound.projection.commit_kind() == CommitKind::Producer {
            self.check_outputs().await?;
            let (state, emits) = self.run_kernel(batch, unit).await?;
            let settled = async {
                let encoded = self.encode_outputs(&emits)?;
                let mut plan = self.plan(encoded, replay)?;
                if !replay {
                    self.pin(unit, &plan).await?;
                }
                let emitted = self.append_outputs(&mut plan, unit, !replay).await?;
                let next = self.settled(&unit.ranges, &state, &emitted)?;
                self.save(next).await
            }
            .await;
            return self.conclude(state, emits, settled, unit).await;
        }
        if !replay {
            self.pin(unit, &[]).await?;
        }
        let (state, emits) = self.run_kernel(batch, unit).await?;
        let settled = async {
            let next = self.settled(&unit.ranges, &state, &[])?;
            self.save(next).await
        }
        .await;
        self.conclude(state, emits, settled, unit).await
    }

    /// Pins the unit's ranges and how it writes each output (`plan`).
    async fn pin(&mut self, unit: &Unit<P>, plan: &[OutputAppends]) -> Result<()> {
        let mut pinned = self.checkpoint.clone();
        self.record_paths(&mut pinned);
        let outputs = self.bound.projection.outputs();
        pinned.pending = Some(Pending {
            key: unit.key.clone(),
            ranges: unit.ranges.clone(),
            appends: plan
                .iter()
                .filter_map(|o| Some((outputs[o.index].name.clone(), o.counts()?)))
                .collect(),
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

    /// Calls the commit's compensation, if any, after the commit failed
    /// with `cause`: the unit's error is `cause`, or both when the
    /// compensation fails too.
    async fn compensate(
        &self,
        state: S,
        emits: Emits,
        cause: ProjectionError,
        unit: &Unit<P>,
    ) -> ProjectionError {
        let Some(compensation) = &self.bound.projection.inner.compensation else {
            return cause;
        };
        let result = UnitResult {
            state: self.bound.projection.has_state().then_some(state),
            emits,
        };
        match compensation(&result, &cause, unit).await {
            Ok(()) => cause,
            Err(source) => ProjectionError::Compensation {
                cause: Box::new(cause),
                source,
            },
        }
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

    /// Writes each input's stream path into its mark, for operators'
    /// tools that measure the binding's lag.
    fn record_paths(&self, checkpoint: &mut Checkpoint) {
        let inputs = self.bound.projection.inputs().iter();
        for (input, path) in inputs.zip(&self.bound.inputs) {
            let mark = checkpoint.inputs.entry(input.name.clone()).or_default();
            mark.path = Some(path.to_string());
        }
    }

    /// The checkpoint after the unit over `ranges` settles with `state`.
    fn settled(
        &self,
        ranges: &BTreeMap<String, Range>,
        state: &S,
        emitted: &[(String, u64)],
    ) -> Result<Checkpoint> {
        let mut next = self.checkpoint.clone();
        next.state = encode_state(&self.bound, state)?;
        for (name, range) in ranges {
            let mark = next.inputs.entry(name.clone()).or_default();
            mark.offset = range.to;
            mark.closed |= range.closed;
            mark.gone |= range.gone;
            if range.deletes_seen.is_some() {
                mark.deletes_seen = range.deletes_seen;
            }
        }
        self.record_paths(&mut next);
        for (output, used) in emitted {
            *next.next_seq.entry(output.clone()).or_insert(0) += used;
        }
        next.pending = None;
        next.failure = None;
        next.units += 1;
        next.committed_at_ms = now_ms();
        Ok(next)
    }
}

/// The time now in unix milliseconds.
fn now_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
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

fn encode_state<P, S: State>(bound: &Bound<P, S>, state: &S) -> Result<serde_json::Value> {
    serde_json::to_value(state).map_err(|e| ProjectionError::InvalidCheckpoint {
        checkpoint: bound.key.path.to_string(),
        reason: format!("the state does not encode: {e}"),
    })
}

fn decode_state<P, S: State>(bound: &Bound<P, S>, checkpoint: &Checkpoint) -> Result<S> {
    serde_json::from_value(checkpoint.state.clone()).map_err(|e| {
        ProjectionError::InvalidCheckpoint {
            checkpoint: bound.key.path.to_string(),
            reason: format!("the state does not decode: {e}"),
        }
    })
}
