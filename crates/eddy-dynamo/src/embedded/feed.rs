//! What bounds the change log: a record is kept until every registered
//! consumer's checkpoint has passed it, and at most for the retention
//! window (24 hours by default, as DynamoDB Streams keeps records). A
//! consumer that falls further behind than the window gets
//! `history-unavailable`, as a DynamoDB Streams reader gets
//! `TrimmedDataAccessException`.

use super::engine::WriteClock;
use super::store::Txn;
use crate::error::TableError;

/// How many of the oldest records one step of the age trim looks at.
const PAGE: usize = 1024;

/// Trims the records every registered consumer has passed. Without a
/// registered consumer nothing is trimmed here (the age trim still runs).
pub(crate) fn trim_by_consumers(txn: &mut dyn Txn) -> Result<(), TableError> {
    let Some(slowest) = txn.checkpoints()?.into_iter().min() else {
        return Ok(());
    };
    if slowest > txn.trimmed_through()? {
        txn.trim_through(slowest)?;
    }
    Ok(())
}

/// Trims the records committed before the retention window. Each record
/// looked at is trimmed, except the first one still inside the window.
pub(crate) fn trim_by_age(txn: &mut dyn Txn, clock: WriteClock) -> Result<(), TableError> {
    let retention = chrono::Duration::from_std(clock.retention).unwrap_or(chrono::Duration::MAX);
    let Some(cutoff) = clock.now.checked_sub_signed(retention) else {
        return Ok(());
    };
    let cutoff = cutoff.timestamp();
    loop {
        let oldest = txn.oldest(PAGE)?;
        let expired = oldest.iter().take_while(|(_, created)| *created < cutoff);
        let Some((through, _)) = expired.last() else {
            return Ok(());
        };
        txn.trim_through(*through)?;
        if oldest.len() < PAGE || oldest.last().is_some_and(|(_, c)| *c >= cutoff) {
            return Ok(());
        }
    }
}

/// Refuses to read after a position older than what the log still holds.
pub(crate) fn check_readable(after: u64, trimmed_through: u64) -> Result<(), TableError> {
    if after < trimmed_through {
        return Err(TableError::HistoryUnavailable {
            message: format!(
                "the change records after {after} were trimmed (kept until every follower passed them, or for the retention window); records from {} on remain: rebuild the projections from the table",
                trimmed_through + 1
            ),
        });
    }
    Ok(())
}
