//! Compaction passes in bounded steps (see `compaction.rs` for what a
//! pass keeps). A step reads at most a budget of messages backwards from
//! where the pass stopped, drops those a later one supersedes, and
//! updates the record (bytes, and the pass's outcome when it is done);
//! between steps the pass waits in the engine, so a pass over a long
//! stream never holds the store's writer for long.

use std::sync::Mutex;

use super::lifecycle::{find, Found};
use super::Engine;
use crate::compaction::{appended_by_ms, Pass, Verdict};
use crate::record::{Records, Stored};
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
        let now = self.now_ms();
        let done = CompactStep {
            done: true,
            ..CompactStep::default()
        };
        let Found::Live(Stored { key, mut record }) = find(records, path, now).await? else {
            return Ok(done);
        };
        let head = &record.head;
        let marks = head.retained.marks.clone();
        let Some(policy) = head.config.compaction else {
            return Ok(done);
        };
        let under_way = self.passes.take(path, head.incarnation);
        let mut pass = match under_way {
            Some(pass) if !force => pass,
            _ if force || head.compaction_due_ms().is_some_and(|due| due <= now) => {
                Pass::new(path, head.incarnation, &policy, &marks, head.count, now)
            }
            _ => return Ok(done),
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
        let examined = messages.len() as u64;
        let examined_bytes = messages.iter().map(|(_, m)| m.len() as u64).sum();
        let mut drop = Vec::new();
        for (position, message) in messages.iter().rev() {
            let appended = appended_by_ms(&marks, *position);
            if pass.examine(&policy, *position, message, appended) == Verdict::Drop {
                drop.push(*position);
            }
        }
        let dropped = drop.len() as u64;
        let finished = messages.is_empty();
        if !drop.is_empty() {
            drop.reverse();
            let freed = records.drop_positions(&key, drop).await?;
            record.head.bytes = record.head.bytes.saturating_sub(freed);
            record.head.retained.compacted.dropped += dropped;
        }
        if finished {
            let total = record.head.retained.compacted.dropped;
            *record.head.retained.compacted = pass.finish(total);
        } else {
            self.passes.put(pass);
        }
        if finished || dropped > 0 {
            records.update(&key, record).await?;
        }
        Ok(CompactStep {
            examined,
            examined_bytes,
            dropped,
            done: finished,
        })
    }
}
