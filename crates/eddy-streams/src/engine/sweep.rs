//! Sweeping: the remains of expired streams and deleted streams'
//! tombstones, forgotten once their incarnation is below the clock's
//! floor (see `incarnation.rs` for why that is safe); and producer states
//! past the producer expiry, which an append already treats as unknown.

use super::lifecycle::{collect, find, Found};
use super::Engine;
use crate::incarnation::sweep_floor;
use crate::record::{Records, Sweepable};
use crate::rules::cutoff;
use crate::StreamError;

impl Engine {
    /// The incarnations below which the store may forget a stream now.
    pub fn sweep_floor(&self) -> u64 {
        sweep_floor(self.clock.now_micros())
    }

    /// Removes what `found` names that may go now: each expired stream
    /// that nothing live was forked from (with its dead forks), and each
    /// tombstone, whose incarnation is below the floor.
    pub async fn sweep<R: Records>(
        &self,
        records: &mut R,
        found: &Sweepable,
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
        Ok(swept)
    }

    /// The last-write time at or before which a producer has expired.
    pub fn producer_cutoff_ms(&self) -> i64 {
        cutoff(self.now_ms(), self.producer_expiry_ms)
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
}

impl Swept {
    /// How many things were removed.
    pub fn count(&self) -> usize {
        self.streams.len() + self.tombstones
    }
}
