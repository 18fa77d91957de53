//! The store's sweeper: every interval, the remains of expired streams,
//! old tombstones, expired producers and the prefixes retention policies
//! let go (`Storage::sweep`), in steps of a few streams (and at most 1024
//! dropped messages, 1 MiB of them) so that no step holds the store's writer for long.

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{Storage, StreamError};
use tokio::task::JoinHandle;

/// The most streams (and, apart, tombstones) one sweep step removes.
const STEP: usize = 64;

/// Sweeps `store` every `every` until the task is aborted.
pub fn spawn(store: Arc<dyn Storage>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match sweep_all(&*store).await {
                Ok(0) => {}
                Ok(swept) => tracing::debug!(
                    swept,
                    "swept expired streams, old tombstones and retained prefixes"
                ),
                Err(err) => {
                    tracing::warn!(error = %err, "sweeping the store failed; trying again later")
                }
            }
        }
    })
}

/// Sweeps in steps until a step removes nothing; returns how much it
/// removed. (A step may remove less than `STEP` with more to come: the
/// DynamoDB store takes fewer per step, to fit one transaction.)
pub async fn sweep_all(store: &dyn Storage) -> Result<usize, StreamError> {
    let mut swept = 0;
    loop {
        let step = store.sweep(STEP).await?;
        swept += step;
        if step == 0 {
            return Ok(swept);
        }
        // Let the writers in between steps.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use eddy_streams::{ManualClock, MemoryStorage, Payload, StreamConfig, StreamPath};

    use super::*;

    #[tokio::test]
    async fn sweeps_every_expired_stream_in_steps() {
        let clock = Arc::new(ManualClock::starting_now());
        let store = MemoryStorage::new().with_clock(clock.clone());
        let config = StreamConfig::bytes("text/plain").with_ttl(Duration::from_secs(1));
        for n in 0..STEP * 2 + 1 {
            let path = StreamPath::new(format!("ttl/{n}")).expect("path");
            store
                .create(&path, config.clone(), Payload::Body("x".into()))
                .await
                .expect("create");
        }
        clock.advance(eddy_streams::SWEEP_GRACE + Duration::from_secs(2));
        assert_eq!(sweep_all(&store).await, Ok(STEP * 2 + 1));
        assert_eq!(sweep_all(&store).await, Ok(0));
    }
}
