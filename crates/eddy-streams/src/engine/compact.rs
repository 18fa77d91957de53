//! Compaction passes in bounded steps (see `compaction.rs` for what a
//! pass keeps). A step reads at most a budget of messages backwards from
//! where the pass stopped, drops those a later one supersedes, and
//! updates the record (bytes, and the pass's outcome when it is done);
//! between steps the pass waits in the engine, so a pass over a long
//! stream never holds the store's writer for long.

use std::sync::Mutex;

use super::lifecycle::{find, Found};
use super::Engine;
use crate::compaction::{appended_by_ms, Compacted, DeletesDropped, Pass, Verdict};
use crate::record::{RecordReader, Records, Stored};
use crate::StreamError;

/// The most passes an engine keeps between steps (one per stream being
/// compacted); past it the oldest is forgotten and starts again later.
const MAX_PASSES: usize = 8;

/// The passes under way, between their steps.
#[derive(Debug, Default)]
pub(crate) struct Passes(Mutex<Vec<Pass>>);

impl Passes {
    /// Takes the pass of the stream at `path` of `incarnation`, if any
    /// (a pass of an earlier stream at the path is forgotten).
    fn take(&self, path: &str, incarnation: u64) -> Option<Pass> {
        let mut passes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let index = passes.iter().position(|pass| pass.path == path)?;
        let pass = passes.remove(index);
        (pass.incarnation == incarnation).then_some(pass)
    }

    /// Keeps `pass` for its next step.
    fn put(&self, pass: Pass) {
        let mut passes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if passes.len() >= MAX_PASSES {
            passes.remove(0);
        }
        passes.push(pass);
    }
}

/// What one compaction step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CompactStep {
    /// Messages it looked at.
    pub examined: u64,
    /// Their bytes.
    pub examined_bytes: u64,
    /// Messages it dropped.
    pub dropped: u64,
    /// Whether no pass is under way for the stream after it.
    pub done: bool,
}

impl CompactStep {
    /// A step with nothing to do: no pass under way, none due.
    pub const NOTHING_DUE: CompactStep = CompactStep {
        examined: 0,
        examined_bytes: 0,
        dropped: 0,
        done: true,
    };

    /// Adds what one of the step's writes dropped, and whether it ended
    /// the pass.
    pub fn add_write(&mut self, write: CompactStep) {
        self.dropped += write.dropped;
        self.done |= write.done;
    }
}

/// Compaction steps over `paths` (the streams a sweep step found due)
/// within one sweep step's budgets of messages and bytes; how many
/// messages they looked at or dropped, so the sweep goes on while a pass
/// is under way. `step(path, budget, max_bytes)` runs one step.
pub(crate) async fn steps_within_budget<P, F, Fut>(
    paths: impl IntoIterator<Item = P>,
    mut step: F,
) -> Result<u64, StreamError>
where
    F: FnMut(P, u64, u64) -> Fut,
    Fut: std::future::Future<Output = Result<CompactStep, StreamError>>,
{
    let (mut budget, mut bytes) = (super::COMPACTION_STEP, super::COMPACTION_STEP_BYTES);
    let mut examined = 0;
    for path in paths {
        if budget == 0 || bytes == 0 {
            break;
        }
        let done = step(path, budget, bytes).await?;
        budget = budget.saturating_sub(done.examined);
        bytes = bytes.saturating_sub(done.examined_bytes);
        examined += done.examined.max(done.dropped);
    }
    Ok(examined)
}

/// A whole compaction pass now, in steps of the sweep's size until one
/// ends it; how many messages it dropped. `step(force)` runs one step,
/// `force` starting a pass whether or not the stream is due.
pub(crate) async fn whole_pass<F, Fut>(mut step: F) -> Result<u64, StreamError>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = Result<CompactStep, StreamError>>,
{
    let mut force = true;
    let mut dropped = 0;
    loop {
        let done = step(force).await?;
        dropped += done.dropped;
        force = false;
        if done.done {
            return Ok(dropped);
        }
    }
}

/// What a compaction step decided, before it writes: the positions to
/// drop, and the pass's outcome when it looked at everything. Its pass
/// is already kept for the next step, so a step whose write fails leaves
/// the pass ahead of what was dropped (which only keeps more).
#[derive(Clone, Debug)]
pub(crate) struct CompactPlan {
    /// The stream it is about.
    path: String,
    incarnation: u64,
    /// The positions to drop, in order.
    drop: Vec<u64>,
    /// Those of them that are deletes past their lifetime, in order: the
    /// write that drops one also notes it (readers learn of it with it).
    deletes: Vec<u64>,
    /// The pass's outcome, when this step ends it.
    finished: Option<Compacted>,
    examined: u64,
    examined_bytes: u64,
}

/// The most rows one write of a compaction step deletes, where a backend
/// writes the step apart from its reads: a step's drops go in writes of
/// at most this many, so appends wait for one of them at a time.
pub(crate) const DROPS_PER_WRITE: usize = 256;

impl CompactPlan {
    /// The step before its writes: what it read, nothing dropped yet.
    pub fn read_step(&self) -> CompactStep {
        CompactStep {
            examined: self.examined,
            examined_bytes: self.examined_bytes,
            ..CompactStep::default()
        }
    }

    /// The plan as one write, unless it writes nothing (it drops nothing
    /// and does not end the pass).
    #[cfg(feature = "postgres")]
    pub fn whole(self) -> Option<CompactPlan> {
        (!self.drop.is_empty() || self.finished.is_some()).then_some(self)
    }

    /// The plan as writes of at most [`DROPS_PER_WRITE`] drops each, in
    /// order (none when it drops nothing and does not end the pass);
    /// only the last ends the pass and counts what was read.
    pub fn writes(self) -> Vec<CompactPlan> {
        if self.drop.is_empty() && self.finished.is_none() {
            return Vec::new();
        }
        if self.drop.len() <= DROPS_PER_WRITE {
            return vec![self];
        }
        let parts: Vec<Vec<u64>> = self
            .drop
            .chunks(DROPS_PER_WRITE)
            .map(<[u64]>::to_vec)
            .collect();
        let last = parts.len() - 1;
        parts
            .into_iter()
            .enumerate()
            .map(|(index, drop)| CompactPlan {
                path: self.path.clone(),
                incarnation: self.incarnation,
                deletes: self
                    .deletes
                    .iter()
                    .copied()
                    .filter(|p| drop.binary_search(p).is_ok())
                    .collect(),
                drop,
                finished: if index == last {
                    self.finished.clone()
                } else {
                    None
                },
                examined: if index == last { self.examined } else { 0 },
                examined_bytes: if index == last {
                    self.examined_bytes
                } else {
                    0
                },
            })
            .collect()
    }
}

impl Engine {
    /// One step of compaction of the live stream at `path`, looking at up
    /// to `budget` messages of at most `max_bytes` together (at least
    /// one): of the pass under way, or of a new one when the stream is
    /// due (or when `force`, which also drops a pass under way to start
    /// one that reaches the tail now). The pass ends with a step that
    /// finds nothing left to look at.
    pub async fn compact_step<R: Records>(
        &self,
        records: &mut R,
        path: &str,
        budget: u64,
        max_bytes: u64,
        force: bool,
    ) -> Result<CompactStep, StreamError> {
        match self
            .compact_plan(records, path, budget, max_bytes, force)
            .await?
        {
            Some(plan) => self.compact_apply(records, &plan).await,
            None => Ok(CompactStep::NOTHING_DUE),
        }
    }

    /// The reading half of [`compact_step`](Self::compact_step): what the
    /// step drops, decided from the messages it reads (which never change
    /// but by being dropped), so a backend may decide outside the write
    /// that locks the stream. `None` when there is nothing to do, or no
    /// room for it in the unit now ([`RecordReader::room_to_compact`]:
    /// the pass waits for a later step).
    pub async fn compact_plan<R: RecordReader>(
        &self,
        records: &mut R,
        path: &str,
        budget: u64,
        max_bytes: u64,
        force: bool,
    ) -> Result<Option<CompactPlan>, StreamError> {
        let now = self.now_ms();
        let Found::Live(Stored { key, record }) = find(records, path, now).await? else {
            return Ok(None);
        };
        let head = &record.head;
        let Some(policy) = head.config.compaction else {
            return Ok(None);
        };
        if !records.room_to_compact().await? {
            return Ok(None);
        }
        let marks = &head.retained.marks;
        let mut pass = match self.passes.take(path, head.incarnation) {
            Some(pass) if !force => pass,
            _ if force || head.compaction_due_ms().is_some_and(|due| due <= now) => {
                Pass::new(path, head.incarnation, &policy, marks, head.count, now)
            }
            _ => return Ok(None),
        };
        let first = record.first();
        let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let messages = records
            .messages_before(
                &key,
                first..pass.cursor.max(first),
                budget.max(1),
                max_bytes,
            )
            .await?;
        let (mut drop, mut deletes) = (Vec::new(), Vec::new());
        for (position, message) in messages.iter().rev() {
            let appended = appended_by_ms(marks, *position);
            match pass.examine(&policy, *position, message, appended) {
                Verdict::Keep => {}
                Verdict::Drop => drop.push(*position),
                Verdict::DropDelete => {
                    drop.push(*position);
                    deletes.push(*position);
                }
            }
        }
        drop.reverse();
        deletes.reverse();
        let finished = messages.is_empty().then(|| pass.finish(0));
        if finished.is_none() {
            self.passes.put(pass);
        }
        Ok(Some(CompactPlan {
            path: path.to_owned(),
            incarnation: head.incarnation,
            drop,
            deletes,
            finished,
            examined: messages.len() as u64,
            examined_bytes: messages.iter().map(|(_, m)| m.len() as u64).sum(),
        }))
    }

    /// The writing half of [`compact_step`](Self::compact_step): drops
    /// what `plan` decided from the stream as it is now (nothing if it was
    /// replaced meanwhile), with its bytes, and stores the pass's outcome.
    pub async fn compact_apply<R: Records>(
        &self,
        records: &mut R,
        plan: &CompactPlan,
    ) -> Result<CompactStep, StreamError> {
        let now = self.now_ms();
        let step = CompactStep {
            examined: plan.examined,
            examined_bytes: plan.examined_bytes,
            dropped: plan.drop.len() as u64,
            done: plan.finished.is_some(),
        };
        let found = find(records, &plan.path, now).await?;
        let Found::Live(Stored { key, mut record }) = found else {
            return Ok(step);
        };
        if record.head.incarnation != plan.incarnation {
            return Ok(step);
        }
        let mut wrote = false;
        if !plan.drop.is_empty() {
            let freed = records.drop_positions(&key, plan.drop.clone()).await?;
            record.head.bytes = record.head.bytes.saturating_sub(freed);
            let compacted = &mut record.head.retained.compacted;
            compacted.dropped += step.dropped;
            compacted.note_deletes(
                plan.deletes
                    .iter()
                    .fold(DeletesDropped::default(), |d, p| d.and(*p)),
            );
            wrote = true;
        }
        if let Some(outcome) = &plan.finished {
            // What every pass added up stays; the rest is this pass's.
            let all = &record.head.retained.compacted;
            *record.head.retained.compacted = Compacted {
                dropped: all.dropped,
                deletes_dropped_below: all.deletes_dropped_below,
                deletes_dropped: all.deletes_dropped,
                ..outcome.clone()
            };
            wrote = true;
        }
        if wrote {
            records.update(&key, record).await?;
        }
        Ok(step)
    }
}
