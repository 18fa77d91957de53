//! Calls that lost a race to another writer, and how long they try again.
//!
//! Commits are optimistic: of the writers that read a stream's record at
//! once, one commits and the others run again on what it wrote. Two
//! rules keep that fair between processes and bound what a loser waits:
//!
//! - A loser tries again after a jittered pause (1 ms doubling to 100 ms)
//!   for as long as [`RecordOptions::contention_timeout`]
//!   (super::RecordOptions::contention_timeout) allows, not for a number
//!   of attempts: with W processes on one stream a call may lose W − 1
//!   races a round, and a count that suits two writers fails a third of
//!   the calls of sixteen.
//! - A winner that had lost first knows that others wait: it lets them go
//!   first, pausing about as long as its commit took before committing
//!   its stream's next group ([`Retry::yield_turn`]). Each of W writers
//!   then commits about once every W rounds instead of the fastest
//!   winning again and again.

use std::time::{Duration, Instant};

use crate::StreamError;

/// The first pause after a lost race.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause between two runs of a call, and the longest a
/// winner waits for its turn.
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// The attempts of one call.
pub(super) struct Retry {
    started: Instant,
    timeout: Duration,
    pause: Duration,
    lost: u32,
    last_attempt: Instant,
}

impl Retry {
    /// A call's first attempt, which may try again for `timeout`.
    pub fn start(timeout: Duration) -> Self {
        let now = Instant::now();
        Retry {
            started: now,
            timeout,
            pause: FIRST_PAUSE,
            lost: 0,
            last_attempt: now,
        }
    }

    /// The attempt lost a race: waits (jittered, so that writers that
    /// lost to each other do not meet again) and allows another, or fails
    /// with a retryable error once the call has tried for its timeout.
    pub async fn lost(&mut self) -> Result<(), StreamError> {
        self.lost += 1;
        let pause = self.pause.mul_f64(0.5 + fastrand::f64() / 2.0);
        if self.started.elapsed() + pause > self.timeout {
            return Err(StreamError::unavailable(format!(
                "lost {} races in {} ms with writers of the same stream in other processes; \
                 nothing was written, retry",
                self.lost,
                self.started.elapsed().as_millis()
            )));
        }
        tokio::time::sleep(pause).await;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        self.last_attempt = Instant::now();
        Ok(())
    }

    /// After the call's commit: when it had lost races first, other
    /// writers are waiting, so let them commit before this one's stream
    /// commits again (a pause of about the winning attempt's time).
    pub async fn yield_turn(&self) {
        if self.lost > 0 {
            let took = self.last_attempt.elapsed().min(MAX_PAUSE);
            tokio::time::sleep(took.mul_f64(0.5 + fastrand::f64())).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loser_tries_again_until_its_timeout_then_fails_retryably() {
        let timeout = Duration::from_millis(400);
        let mut retry = Retry::start(timeout);
        let mut attempts = 1;
        let error = loop {
            match retry.lost().await {
                Ok(()) => attempts += 1,
                Err(error) => break error,
            }
        };
        // It stops when the next pause would pass the timeout, not after
        // a number of attempts.
        assert!(retry.started.elapsed() >= timeout - MAX_PAUSE);
        assert!(attempts > 8, "{attempts} attempts");
        assert!(error.is_retryable(), "{error}");
    }

    #[tokio::test]
    async fn only_a_winner_that_lost_first_yields() {
        let retry = Retry::start(Duration::from_secs(1));
        let at_once = tokio::time::timeout(Duration::ZERO, retry.yield_turn()).await;
        assert!(at_once.is_ok(), "a winner at its first attempt goes on");

        let mut retry = Retry::start(Duration::from_secs(1));
        assert!(retry.lost().await.is_ok());
        tokio::time::sleep(Duration::from_millis(40)).await; // the winning attempt
        let waited = tokio::time::timeout(Duration::from_millis(10), retry.yield_turn()).await;
        assert!(waited.is_err(), "it pauses about as long as it took");
    }
}
