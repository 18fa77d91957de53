//! Sweeping: the remains of expired streams and deleted streams'
//! tombstones, forgotten once their incarnation is below the clock's
//! floor (see `incarnation.rs` for why that is safe); and producer states
//! past the producer expiry, which an append already treats as unknown;
//! and the prefixes that streams' retention policies let go, and steps
//! of compaction passes (`compact.rs`).

use super::lifecycle::{collect, find, Found};
use super::Engine;
use crate::incarnation::sweep_floor;
use crate::record::{Records, Stored, Sweepable};
use crate::rules::cutoff;
use crate::StreamError;

impl Engine {
    /// The incarnations below which the store may forget a stream now.
    pub fn sweep_floor(&self) -> u64 {
        sweep_floor(self.clock.now_micros())
    }

    /// Removes what `found` names that may go now: each expired stream
    /// that nothing live was forked from (with its dead forks), and each
    /// tombstone, whose incarnation is below the floor; drops what the
    /// retained streams' policies let go, and, when `compact`, runs steps
    /// of their compaction passes (a backend that runs them apart, in
    /// writes of their own, passes `false`).
    pub async fn sweep<R: Records>(
        &self,
        records: &mut R,
        found: &Sweepable,
        compact: bool,
    ) -> Result<Swept, StreamError> {
        let now = self.now_ms();
        let below = self.sweep_floor();
        let mut swept = Swept::default();
        for path in &found.streams {
            if let Found::Dead { incarnation, .. } = find(records, path, now).await? {
                if incarnation < below {
                    collect(records, path, false, now).await?;
                    swept.streams.push(path.clone());
                }
            }
        }
        for path in &found.tombstones {
            if records.drop_tombstone(path, below).await? {
                swept.tombstones += 1;
            }
        }
        let (mut budget, mut bytes_budget) = (RETENTION_STEP, RETENTION_STEP_BYTES);
        for path in &found.retained {
            if budget == 0 || bytes_budget == 0 {
                break;
            }
            let (dropped, freed) = self
                .retain(records, path, budget, bytes_budget, now)
                .await?;
            budget -= dropped;
            bytes_budget = bytes_budget.saturating_sub(freed);
            swept.messages += dropped;
            if budget == 0 || bytes_budget == 0 || !compact {
                continue;
            }
            // Compaction looks at messages within the same budgets.
            let step = self
                .compact_step(records, path, budget, bytes_budget, false)
                .await?;
            budget = budget.saturating_sub(step.examined);
            bytes_budget = bytes_budget.saturating_sub(step.examined_bytes);
            swept.messages += step.dropped;
            swept.examined += step.examined;
        }
        Ok(swept)
    }

    /// The last-write time at or before which a producer has expired.
    pub fn producer_cutoff_ms(&self) -> i64 {
        cutoff(self.now_ms(), self.producer_expiry_ms)
    }

    /// Drops up to `max` of the oldest messages of the live stream at
    /// `path` that its retention policy lets go at `now`, of at most
    /// `max_bytes` together (at least one, however large); how many, and
    /// their bytes. The record keeps its count, so offsets never change;
    /// its first kept position and its bytes move.
    async fn retain<R: Records>(
        &self,
        records: &mut R,
        path: &str,
        max: u64,
        max_bytes: u64,
        now: i64,
    ) -> Result<(u64, u64), StreamError> {
        let Found::Live(Stored { key, mut record }) = find(records, path, now).await? else {
            return Ok((0, 0));
        };
        let policy = record.head.config.retention;
        let (first, count) = (record.first(), record.head.count);
        let by_rule = record.head.retained.droppable_below(&policy, count, now);
        // The byte bound weighs the oldest messages one by one, within
        // the step, and always keeps the newest.
        let window = first..count.min(first.saturating_add(max));
        // A backend may weigh a prefix of the window only (up to the first
        // message past `max_bytes`, or what its step has room to drop):
        // the step drops no further than it weighed.
        let sizes = records.message_sizes(&key, window, max_bytes).await?;
        let mut end = first;
        let mut bytes = record.head.bytes;
        let mut freed = 0;
        // Positions, not indexes: compaction leaves holes among them.
        for &(position, size) in &sizes {
            let over_bytes = policy.bytes.is_some_and(|keep| bytes > keep) && position + 1 < count;
            if position >= by_rule && !over_bytes {
                break;
            }
            if end > first && freed + size > max_bytes {
                break;
            }
            bytes = bytes.saturating_sub(size);
            freed += size;
            end = position + 1;
        }
        if end <= first {
            return Ok((0, 0));
        }
        records.drop_messages(&key, first..end).await?;
        record.head.bytes = record.head.bytes.saturating_sub(freed);
        record.head.retained.dropped_below(end);
        records.update(&key, record).await?;
        Ok((end - first, freed))
    }

    /// Drops up to `max` expired producer states, of any stream; how many.
    pub async fn sweep_producers<R: Records>(
        &self,
        records: &mut R,
        max: usize,
    ) -> Result<u64, StreamError> {
        records
            .sweep_expired_producers(self.producer_cutoff_ms(), max)
            .await
    }
}

/// What one sweep removed.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// The paths of the expired streams removed.
    pub streams: Vec<String>,
    /// How many tombstones were dropped.
    pub tombstones: usize,
    /// How many messages retention and compaction dropped.
    pub messages: u64,
    /// How many messages compaction looked at.
    pub examined: u64,
}

impl Swept {
    /// How many things were removed (and, so that the caller goes on
    /// while a compaction pass is under way, looked at).
    pub fn count(&self) -> usize {
        let messages = usize::try_from(self.messages.max(self.examined)).unwrap_or(usize::MAX);
        (self.streams.len() + self.tombstones).saturating_add(messages)
    }
}

/// The most messages one sweep step drops under retention policies, over
/// all streams: a step is one short write (SQLite's writer, one
/// PostgreSQL transaction), whatever the streams owe.
pub(crate) const RETENTION_STEP: u64 = 1024;

/// The most bytes one sweep step drops under retention policies (at least
/// one message, however large): deleting 16 MB of large messages in one
/// SQLite step held the writer for up to 240 ms once the file reused
/// freed pages (`scripts/bench/retention.sh`).
pub(crate) const RETENTION_STEP_BYTES: u64 = 1024 * 1024;

/// The most messages one step of [`Storage::compact`](crate::Storage::compact)
/// looks at: the sweep's step.
pub(crate) const COMPACTION_STEP: u64 = RETENTION_STEP;

/// The most bytes of messages one step of
/// [`Storage::compact`](crate::Storage::compact) looks at (at least one).
pub(crate) const COMPACTION_STEP_BYTES: u64 = RETENTION_STEP_BYTES;
