//! Retry schedules for `storage-failure`.

use std::time::Duration;

use crate::{ProjectionError, Result};

/// The longest repair interval, retry base or retry cap a runner accepts:
/// one day. Longer ones are refused with `load/invalid-options`.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// A retry schedule: exponential backoff from `base`, doubled per attempt,
/// capped at `cap`, optionally jittered, optionally with a bounded number of
/// attempts.
///
/// ```
/// use std::time::Duration;
/// use eddy_projection::Retry;
/// let retry = Retry::exponential(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(retry.delay(0), Some(Duration::from_millis(100)));
/// assert_eq!(retry.delay(10), Some(Duration::from_secs(1)));
/// assert_eq!(Retry::default().with_max_attempts(2).delay(2), None);
/// // Saturates instead of overflowing.
/// let huge = Retry::exponential(Duration::MAX, Duration::MAX).with_jitter();
/// assert!(huge.delay(u32::MAX).is_some());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    base: Duration,
    cap: Duration,
    jitter: bool,
    max_attempts: Option<u32>,
}

impl Default for Retry {
    /// Jittered exponential backoff from 200 ms, capped at 30 s, forever.
    fn default() -> Self {
        Retry {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(30),
            jitter: true,
            max_attempts: None,
        }
    }
}

impl Retry {
    /// Exponential backoff without jitter.
    pub fn exponential(base: Duration, cap: Duration) -> Self {
        Retry {
            base,
            cap,
            jitter: false,
            max_attempts: None,
        }
    }

    /// This schedule with each delay scaled by a random factor in
    /// `[0.5, 1.0]`.
    pub fn with_jitter(mut self) -> Self {
        self.jitter = true;
        self
    }

    /// This schedule, giving up after `attempts` retries.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The delay before retry number `attempt` (from 0), or `None` when the
    /// schedule gives up. The arithmetic saturates: no base, cap or attempt
    /// overflows.
    pub fn delay(&self, attempt: u32) -> Option<Duration> {
        if self.max_attempts.is_some_and(|max| attempt >= max) {
            return None;
        }
        let factor = 2u32.checked_pow(attempt.min(31)).unwrap_or(u32::MAX);
        let delay = self.base.saturating_mul(factor).min(self.cap);
        if !self.jitter {
            return Some(delay);
        }
        let scaled = delay.as_secs_f64() * (0.5 + fastrand::f64() / 2.0);
        Some(Duration::try_from_secs_f64(scaled).map_or(delay, |d| d.min(delay)))
    }

    /// Refuses a base or cap over [`MAX_INTERVAL`] (`load/invalid-options`).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.base > MAX_INTERVAL || self.cap > MAX_INTERVAL {
            return Err(ProjectionError::invalid(format!(
                "a retry base or cap must be at most {MAX_INTERVAL:?} (got {:?} and {:?})",
                self.base, self.cap
            )));
        }
        Ok(())
    }
}
