//! Sliding-TTL touches, debounced: a read records its time here at once
//! and every load sees it, but the writer stores it only with its next
//! group commit or at most [`FLUSH_INTERVAL`] later, one row update per
//! stream however many reads came in between.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a touch may wait before the writer stores it on its own.
pub(super) const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// The latest read time of each stream whose touch is not stored yet.
#[derive(Debug)]
pub(super) struct Touches {
    pending: Mutex<Pending>,
}

#[derive(Debug)]
struct Pending {
    /// Stream key → read time (unix ms).
    reads: HashMap<i64, i64>,
    last_flush: Instant,
}

impl Default for Touches {
    fn default() -> Self {
        Touches {
            pending: Mutex::new(Pending {
                reads: HashMap::new(),
                last_flush: Instant::now(),
            }),
        }
    }
}

impl Touches {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that stream `key` was read at `at_ms`.
    pub fn record(&self, key: i64, at_ms: i64) {
        let mut pending = self.lock();
        let latest = pending.reads.entry(key).or_insert(at_ms);
        *latest = (*latest).max(at_ms);
    }

    /// The last access of stream `key`: the stored one or a later pending
    /// read.
    pub fn accessed(&self, key: i64, stored_ms: i64) -> i64 {
        match self.lock().reads.get(&key) {
            Some(&read) => read.max(stored_ms),
            None => stored_ms,
        }
    }

    /// The touches to store now: all of them when `force`, when a group
    /// commit is under way anyway (`committing`), or when the oldest may
    /// have waited a full interval; otherwise none.
    pub fn due(&self, committing: bool, force: bool) -> Vec<(i64, i64)> {
        let mut pending = self.lock();
        let waited = pending.last_flush.elapsed() >= FLUSH_INTERVAL;
        if pending.reads.is_empty() || !(committing || force || waited) {
            return Vec::new();
        }
        pending.last_flush = Instant::now();
        pending.reads.iter().map(|(&key, &at)| (key, at)).collect()
    }

    /// Forgets touches that are stored now, unless a later read came in
    /// meanwhile.
    pub fn stored(&self, touches: &[(i64, i64)]) {
        let mut pending = self.lock();
        for (key, at) in touches {
            if pending.reads.get(key) == Some(at) {
                pending.reads.remove(key);
            }
        }
    }
}
