//! When a failed wake is tried again: a delay that doubles with each
//! failure in a row, up to a cap, with jitter.

use std::time::Duration;

use super::Subscription;
use crate::ServerConfig;

/// The retry policy of failed wakes (webhook notifications, pull-wake
/// appends) and of store reads the registry depends on.
pub(super) struct Retry {
    initial: Duration,
    max: Duration,
}

impl Retry {
    pub(super) fn new(config: &ServerConfig) -> Self {
        Retry {
            initial: config.wake_retry_initial,
            max: config.wake_retry_max,
        }
    }

    /// Counts a failed wake of `sub` and returns when to try again.
    pub(super) fn after_failure(&self, sub: &mut Subscription) -> Duration {
        sub.failures = sub.failures.saturating_add(1);
        self.delay(sub.failures)
    }

    /// The delay after `failures` failures in a row: doubling from the
    /// initial delay up to the cap, with ±20 % jitter so that many
    /// subscriptions failing together spread out.
    pub(super) fn delay(&self, failures: u32) -> Duration {
        let doubled = self
            .initial
            .saturating_mul(1 << failures.saturating_sub(1).min(20));
        doubled.min(self.max).mul_f64(0.8 + 0.4 * fastrand::f64())
    }
}
