//! Live-read cursors: interval numbers that keep caches from collapsing
//! distinct long-poll requests.

use std::time::{SystemTime, UNIX_EPOCH};

/// The cursor epoch: 2024-10-09T00:00:00Z in unix seconds.
const EPOCH_SECS: u64 = 1_728_432_000;
/// The length of one cursor interval.
const INTERVAL_SECS: u64 = 20;

/// The cursor to return at `now`, given the client's `cursor` parameter:
/// the current interval number, or one greater than the client's when the
/// client is already at or past it.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let now = UNIX_EPOCH + Duration::from_secs(1_728_432_000 + 45);
/// assert_eq!(eddy_server::cursor::next(now, None), "2");
/// assert_eq!(eddy_server::cursor::next(now, Some("2")), "3");
/// assert_eq!(eddy_server::cursor::next(now, Some("junk")), "2");
/// ```
pub fn next(now: SystemTime, client: Option<&str>) -> String {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let current = secs.saturating_sub(EPOCH_SECS) / INTERVAL_SECS;
    match client.and_then(|c| c.parse::<u64>().ok()) {
        Some(sent) if sent >= current => sent.saturating_add(1),
        _ => current,
    }
    .to_string()
}
