//! Stream incarnations: the identity of one stream created at a path.
//!
//! A path can hold a stream, lose it (delete, expiry) and hold another one
//! later. Offsets carry the incarnation of the stream they belong to, so
//! that an offset — and the URL of a chunk read from it — names the bytes
//! of exactly one stream forever. No later stream at a path may reuse an
//! earlier one's incarnation: not after a delete, an expiry, a restart of
//! a memory store, a second process on the same database, or a restore of
//! an older backup.
//!
//! An incarnation is the creation time in microseconds, raised above two
//! floors: every incarnation this process handed out before (so two
//! creations in one clock tick differ), and the incarnation of the
//! stream the path held before, when the store still knows it (its
//! tombstone or its expired record; so another process whose clock lags
//! cannot reuse it). Where neither floor is known (a fresh memory store,
//! a restored file, a tombstone swept long ago) the clock alone separates
//! the streams, which holds as long as the clock does not run backwards
//! past the old stream's creation. Incarnations fit the 16 digits of an
//! offset's first part until the year 2286.
//!
//! What the store forgets, and when: the remains of a path's last stream
//! (an expired stream's record, a deleted one's tombstone) are its
//! floor, so they are swept only once that floor is below the clock's:
//! once the stream's incarnation is more than [`SWEEP_GRACE`] older than
//! the sweeping process's clock. A later stream at the path then takes
//! an incarnation from a clock that is past the old one (in this process
//! also above every incarnation it handed out), unless a clock (this
//! one, stepped back, or another process's on the same database) lags
//! this one by more than the grace. Expired streams (whose TTL is at
//! least a second) and tombstones are therefore swept in steps, by
//! [`Storage::sweep`](crate::Storage::sweep), at the earliest
//! [`SWEEP_GRACE`] after their stream was created, and nothing else keeps
//! them: what a client creates and lets expire or deletes is bounded by
//! what it can create in that time.

use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out incarnations for one store in one process.
#[derive(Debug, Default)]
pub(crate) struct Incarnations {
    last: AtomicU64,
}

impl Incarnations {
    /// A new incarnation at `now_micros`, above `after` (the path's
    /// previous incarnation, or 0) and above every one handed out here
    /// before.
    pub fn next(&self, now_micros: i64, after: u64) -> u64 {
        let from_clock = u64::try_from(now_micros).unwrap_or(0);
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = from_clock
                .max(after.saturating_add(1))
                .max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

/// How far below the clock an incarnation must be before the store may
/// forget it (see the module's notes): the most the clocks of processes
/// sharing a database may differ, or a clock may step back.
pub const SWEEP_GRACE: Duration = Duration::from_secs(60);

/// The incarnations below which a store may forget a path's last stream,
/// at `now_micros`.
pub(crate) fn sweep_floor(now_micros: i64) -> u64 {
    let grace = i64::try_from(SWEEP_GRACE.as_micros()).unwrap_or(i64::MAX);
    u64::try_from(now_micros.saturating_sub(grace)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_clock() {
        let incarnations = Incarnations::default();
        assert_eq!(
            incarnations.next(1_700_000_000_000_000, 0),
            1_700_000_000_000_000
        );
    }

    #[test]
    fn never_repeats_in_one_tick() {
        let incarnations = Incarnations::default();
        let first = incarnations.next(5, 0);
        assert_eq!(incarnations.next(5, 0), first + 1);
        assert_eq!(incarnations.next(4, 0), first + 2, "a clock that went back");
    }

    #[test]
    fn stays_above_the_paths_previous_incarnation() {
        let incarnations = Incarnations::default();
        let previous = 9_000_000;
        assert_eq!(incarnations.next(1, previous), previous + 1);
    }
}
