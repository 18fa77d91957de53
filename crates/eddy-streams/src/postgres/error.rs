//! What a sqlx error means for the store: a race lost to a concurrent
//! transaction (run the call again), a database that cannot serve now
//! (retryable), or a failure retrying does not fix.

use crate::StreamError;

/// SQLSTATEs of a transaction that lost a race with another one and can
/// simply run again: serialization failure, deadlock detected, and a unique
/// violation (two creates of one path: the loser sees the winner's row on
/// its next run).
const CONFLICTS: [&str; 3] = ["40001", "40P01", "23505"];

/// Whether `err` says the transaction lost a race and may run again.
pub(super) fn is_conflict(err: &sqlx::Error) -> bool {
    sqlstate(err).is_some_and(|code| CONFLICTS.contains(&code))
}

/// PostgreSQL's code for a database error.
fn sqlstate(err: &sqlx::Error) -> Option<&str> {
    let db = err.as_database_error()?;
    Some(
        db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?
            .code(),
    )
}

/// Whether the same call may succeed later: the connection, the pool or
/// the server is in trouble, or the transaction lost a race.
fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        // Connection exceptions (08), too many connections and other
        // exhausted resources (53), a server shutting down (57P0x), a lock
        // not available (55P03), and lost races.
        sqlx::Error::Database(_) => sqlstate(err).is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P0")
                || code == "55P03"
                || CONFLICTS.contains(&code)
        }),
        _ => false,
    }
}

/// A backend failure: what the store was doing, with the driver's error as
/// its source, retryable when the error is transient.
pub(super) fn pg_error(context: &str, err: sqlx::Error) -> StreamError {
    if is_transient(&err) {
        StreamError::unavailable_from(context, err)
    } else {
        StreamError::internal_from(context, err)
    }
}

/// A failed statement of a record operation.
pub(super) fn statement_error(err: sqlx::Error) -> StreamError {
    pg_error("a PostgreSQL statement failed", err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_troubles_are_retryable_and_bad_requests_are_not() {
        let io = sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into());
        assert!(pg_error("reading", io).is_retryable());
        assert!(pg_error("waiting", sqlx::Error::PoolTimedOut).is_retryable());
        let decode = sqlx::Error::ColumnNotFound("count".into());
        assert!(!pg_error("decoding", decode).is_retryable());
    }
}
