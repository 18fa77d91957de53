//! Sliding-TTL touches, debounced, for the backends that store records
//! (SQLite, PostgreSQL): a read records its time here at once and every
//! load sees it, but the backend stores it only later, with SQLite's next
//! group commit or at most [`FLUSH_INTERVAL`] later, one row update per
//! stream however many reads came in between.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a touch may wait before its backend stores it on its own.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// The latest read time of each stream whose touch is not stored yet.
#[derive(Debug)]
pub(crate) struct Touches {
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
    /// have waited a full interval by `now`; otherwise none.
    pub fn due(&self, committing: bool, force: bool, now: Instant) -> Vec<(i64, i64)> {
        let mut pending = self.lock();
        let waited = now.saturating_duration_since(pending.last_flush) >= FLUSH_INTERVAL;
        if pending.reads.is_empty() || !(committing || force || waited) {
            return Vec::new();
        }
        pending.last_flush = now;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// However many reads a stream gets, one touch (the latest read time)
    /// waits to be stored, and the writer stores it only with a group
    /// commit, once it waited a full interval, or when the store closes:
    /// not one write per read.
    #[test]
    fn reads_are_debounced_into_one_touch_per_stream() {
        let touches = Touches::default();
        let start = touches.lock().last_flush;
        for at in 0..1000 {
            touches.record(7, 1_000 + at);
            touches.record(8, 5_000 - at);
        }
        assert_eq!(touches.accessed(7, 0), 1_999);
        assert_eq!(
            touches.accessed(7, 3_000),
            3_000,
            "a later stored access wins"
        );
        assert_eq!(touches.accessed(9, 42), 42);

        let soon = start + FLUSH_INTERVAL / 2;
        assert!(
            touches.due(false, false, soon).is_empty(),
            "no write of its own yet"
        );
        let mut due = touches.due(true, false, soon);
        due.sort_unstable();
        assert_eq!(due, [(7, 1_999), (8, 5_000)], "stored with a group commit");
        touches.stored(&due);

        touches.record(7, 2_500);
        let later = soon + FLUSH_INTERVAL / 2;
        assert!(
            touches.due(false, false, later).is_empty(),
            "the interval restarts"
        );
        assert_eq!(
            touches.due(false, false, soon + FLUSH_INTERVAL),
            [(7, 2_500)]
        );
        assert_eq!(
            touches.due(false, true, soon),
            [(7, 2_500)],
            "closing stores all"
        );
    }

    /// A touch is forgotten once stored, unless a later read replaced it
    /// while its commit ran.
    #[test]
    fn a_stored_touch_is_forgotten_unless_read_again_meanwhile() {
        let touches = Touches::default();
        touches.record(1, 10);
        touches.record(2, 20);
        let due = touches.due(false, true, Instant::now());
        touches.record(2, 30);
        touches.stored(&due);
        assert_eq!(touches.due(false, true, Instant::now()), [(2, 30)]);
        assert_eq!(touches.accessed(1, 0), 0);
    }

    /// Only the touches marked stored are forgotten: a flush that skipped
    /// a row another transaction held keeps its touch for the next one.
    #[test]
    fn touches_not_marked_stored_stay_pending() {
        let touches = Touches::default();
        touches.record(1, 10);
        touches.record(2, 20);
        let mut due = touches.due(false, true, Instant::now());
        due.sort_unstable();
        touches.stored(&due[..1]);
        assert_eq!(touches.due(false, true, Instant::now()), [(2, 20)]);
        assert_eq!(touches.accessed(2, 0), 20);
    }
}
