//! Live-read cursors: interval numbers that keep caches from collapsing
//! distinct long-poll requests.

use std::time::{SystemTime, UNIX_EPOCH};

/// The cursor epoch: 2024-10-09T00:00:00Z in unix seconds.
const EPOCH_SECS: u64 = 1_728_432_000;
/// The length of one cursor interval.
pub(crate) const INTERVAL_SECS: u64 = 20;

/// The cursor to return at `now`, given the client's `cursor` parameter:
/// the current interval number, or one greater than the client's when the
/// client is already at or past it.
pub(crate) fn next(now: SystemTime, client: Option<&str>) -> String {
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn intervals_count_from_the_epoch_and_pass_the_client() {
        let now = UNIX_EPOCH + Duration::from_secs(EPOCH_SECS + 45);
        assert_eq!(next(now, None), "2");
        assert_eq!(next(now, Some("2")), "3");
        assert_eq!(next(now, Some("1")), "2");
        assert_eq!(next(now, Some("junk")), "2");
        assert_eq!(next(UNIX_EPOCH, None), "0", "before the epoch");
        assert_eq!(next(now, Some(&u64::MAX.to_string())), u64::MAX.to_string());
    }

    proptest! {
        /// Any cursor a client sends gives a decimal cursor back, greater
        /// than the client's when the client's is a number at or past now.
        #[test]
        fn any_client_cursor_gives_a_decimal_answer(secs in any::<u32>(), client in any::<Vec<u8>>()) {
            let client = String::from_utf8_lossy(&client);
            let now = UNIX_EPOCH + Duration::from_secs(u64::from(secs));
            let answer: u64 = next(now, Some(&client)).parse().expect("decimal");
            if let Ok(sent) = client.parse::<u64>() {
                prop_assert!(answer > sent || answer == u64::MAX || answer > next(now, None).parse().expect("decimal"));
            }
        }
    }
}
