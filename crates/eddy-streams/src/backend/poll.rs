//! Other processes' commits, seen by polling the streams readers wait on.
//!
//! A backend shared by several processes (DynamoDB) tells no process of
//! another's commits. Every `poll` interval, while any reader of this
//! process waits, the task reads the records of every path with waiters
//! in one backend call and hands each waiter the stream's state when it
//! is later than the one it holds (a new tail, a close), or has it look
//! again when the stream is no longer live. A waiter therefore wakes at
//! most one interval plus one read after a commit anywhere.

use std::sync::Weak;

use super::storage::Inner;
use super::Backend;

/// Polls until the store is dropped.
pub(super) async fn run<B: Backend>(inner: Weak<Inner<B>>) {
    let Some(interval) = inner.upgrade().map(|inner| inner.options.poll) else {
        return;
    };
    // The first poll comes one interval after the first wait, not at
    // once: a waiter has just read its stream's state, so a poll now
    // would read the same record again.
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        poll_once(&inner).await;
    }
}

/// Reads the watched streams once and raises what changed.
async fn poll_once<B: Backend>(inner: &Inner<B>) {
    let paths = inner.notifier.watched();
    if paths.is_empty() {
        return;
    }
    let records = match inner.backend.records(&paths).await {
        Ok(records) => records,
        Err(error) => {
            // The next poll tries again; waiters time out as usual.
            tracing::debug!(%error, "polling the streams readers wait on");
            return;
        }
    };
    let now = inner.engine.now_ms();
    for (path, record) in paths.iter().zip(records) {
        match record.filter(|record| record.is_live(now)) {
            Some(record) => inner.notifier.publish_observed(&record.head.info(path)),
            None => inner.notifier.touch(path),
        }
    }
}
