//! The store's notion of "now", injected so that expiry can be tested
//! without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where a store reads the current time (stream expiry, sliding TTLs).
///
/// Stores use [`SystemClock`] unless given another; tests use a
/// [`ManualClock`] and move time forward explicitly.
pub trait Clock: std::fmt::Debug + Send + Sync + 'static {
    /// The current time in unix milliseconds (negative before 1970).
    fn now_ms(&self) -> i64;

    /// The current time in unix microseconds (stream incarnations). The
    /// default is [`now_ms`](Clock::now_ms) in microseconds.
    fn now_micros(&self) -> i64 {
        self.now_ms().saturating_mul(1000)
    }
}

/// The operating system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        unix_ms(SystemTime::now())
    }

    fn now_micros(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    }
}

/// A clock that moves only when told to.
///
/// ```
/// use std::time::Duration;
/// use eddy_streams::{Clock, ManualClock};
/// let clock = ManualClock::starting_now();
/// let before = clock.now_ms();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), before + 2000);
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock that reads `now_ms` (unix milliseconds) until moved.
    pub fn at(now_ms: i64) -> Self {
        ManualClock {
            now_ms: AtomicI64::new(now_ms),
        }
    }

    /// A clock stopped at the current wall-clock time, so that fixed expiry
    /// times relative to [`SystemTime::now`] keep their meaning.
    pub fn starting_now() -> Self {
        ManualClock::at(SystemClock.now_ms())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Unix milliseconds of a time (negative before 1970).
pub(crate) fn unix_ms(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// `duration` in whole milliseconds, saturating.
pub(crate) fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
