//! Storing the debounced TTL touches of this process's reads (see
//! `crate::touches`): a task of the store writes them all, one statement
//! for every stream, at most [`FLUSH_INTERVAL`] after a read; closing or
//! dropping the store writes what is left.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use tokio::time::MissedTickBehavior;

use super::transaction::Wiring;
use crate::touches::FLUSH_INTERVAL;

/// The store's flusher: stores the pending touches every interval, until
/// it is aborted.
pub(super) async fn run(wiring: Arc<Wiring>) {
    let mut ticks = tokio::time::interval(FLUSH_INTERVAL);
    // A slow flush is not followed by a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        flush(&wiring).await;
    }
}

/// Stores every pending touch in one statement, outside any transaction of
/// the store's calls. The statement skips the stream rows another
/// transaction holds rather than wait for them: those touches stay pending
/// for the next flush, and touches of streams removed meanwhile are
/// dropped. A failed flush keeps its touches pending for the next one; a
/// touch lost for good (the process dies first) only lets its stream
/// expire earlier than its reads said, never later.
pub(super) async fn flush(wiring: &Wiring) {
    let due = wiring.touches.due(false, true, Instant::now());
    if due.is_empty() {
        return;
    }
    let (keys, reads): (Vec<i64>, Vec<i64>) = due.iter().copied().unzip();
    let slide = sqlx::AssertSqlSafe(Arc::clone(&wiring.sql.slide));
    let skipped = sqlx::query_scalar::<_, i64>(slide)
        .bind(keys)
        .bind(reads)
        .fetch_all(&wiring.pool)
        .await;
    match skipped {
        Ok(skipped) => {
            let skipped: HashSet<i64> = skipped.into_iter().collect();
            let stored: Vec<(i64, i64)> = due
                .iter()
                .copied()
                .filter(|(key, _)| !skipped.contains(key))
                .collect();
            wiring.touches.stored(&stored);
            if !skipped.is_empty() {
                tracing::debug!(
                    streams = skipped.len(),
                    "TTL touches of locked streams wait"
                );
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, streams = due.len(), "cannot store TTL touches")
        }
    }
}
