//! Storing the debounced TTL touches of this process's reads (see
//! `crate::touches`): a task of the store writes them all, one statement
//! for every stream, at most [`FLUSH_INTERVAL`] after a read; closing or
//! dropping the store writes what is left.

use std::sync::Arc;
use std::time::Instant;

use tokio::time::MissedTickBehavior;

use super::transaction::Wiring;
use crate::touches::FLUSH_INTERVAL;

/// The store's flusher: stores the pending touches every interval, until
/// it is aborted.
pub(super) async fn run(wiring: Arc<Wiring>) {
    let mut ticks = tokio::time::interval(FLUSH_INTERVAL);
    // A flush that waited on row locks is not followed by a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        flush(&wiring).await;
    }
}

/// Stores every pending touch in one statement, outside any transaction of
/// the store's calls. A failed flush keeps its touches pending for the next
/// one; a touch lost for good (the process dies first) only lets its
/// stream expire earlier than its reads said, never later.
pub(super) async fn flush(wiring: &Wiring) {
    let due = wiring.touches.due(false, true, Instant::now());
    if due.is_empty() {
        return;
    }
    let (keys, reads): (Vec<i64>, Vec<i64>) = due.iter().copied().unzip();
    let stored = sqlx::query(sqlx::AssertSqlSafe(Arc::clone(&wiring.sql.slide)))
        .bind(keys)
        .bind(reads)
        .execute(&wiring.pool)
        .await;
    match stored {
        Ok(_) => wiring.touches.stored(&due),
        Err(err) => {
            tracing::warn!(error = %err, streams = due.len(), "cannot store TTL touches")
        }
    }
}
