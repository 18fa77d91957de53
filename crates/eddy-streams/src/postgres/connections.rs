//! The store's own connections for single statements (reads, the group
//! writer's statements), without sqlx's pool: that pool pings a
//! connection when it hands it out and again when it takes it back, two
//! round trips around every statement. A statement that runs on its own
//! (autocommit) needs neither: a connection comes back clean unless the
//! statement's future was dropped midway, and such a connection is closed
//! rather than reused.

use std::sync::{Arc, Mutex, MutexGuard};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::ConnectOptions;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::pg_error;
use crate::StreamError;

/// At most `limit` connections, opened when first needed and kept idle
/// between statements.
#[derive(Debug)]
pub(super) struct Connections {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    permits: Arc<Semaphore>,
}

impl Connections {
    /// Up to `limit` connections to the database of `options`.
    pub fn new(options: PgConnectOptions, limit: usize) -> Self {
        Connections {
            options,
            idle: Mutex::default(),
            permits: Arc::new(Semaphore::new(limit)),
        }
    }

    fn idle(&self) -> MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection of its own, waiting while all of them are in use.
    pub async fn acquire(self: &Arc<Self>) -> Result<Lease, StreamError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let idle = self.idle().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self
                .options
                .connect()
                .await
                .map_err(|e| pg_error("cannot connect to PostgreSQL", e))?,
        };
        Ok(Lease {
            conn: Some(conn),
            clean: false,
            home: Arc::clone(self),
            _permit: permit,
        })
    }

    /// Closes the idle connections and refuses new leases.
    pub async fn close(&self) {
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle());
        for conn in idle {
            if let Err(e) = sqlx::Connection::close(conn).await {
                tracing::debug!(error = %e, "closing a connection");
            }
        }
    }
}

/// A connection taken from [`Connections`]. It goes back when dropped if
/// its last statement finished ([`Lease::finished`]); otherwise it is
/// closed.
#[derive(Debug)]
pub(super) struct Lease {
    conn: Option<PgConnection>,
    clean: bool,
    home: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    /// The connection, for a statement; until [`finished`](Self::finished)
    /// says otherwise it is not reused.
    pub fn conn(&mut self) -> Result<&mut PgConnection, StreamError> {
        self.clean = false;
        self.conn
            .as_mut()
            .ok_or_else(|| StreamError::internal("a leased connection is gone"))
    }

    /// Records how the last statement ended: a connection whose statement
    /// failed in the connection itself (I/O, protocol) is not reused.
    pub fn finished<T>(&mut self, outcome: &Result<T, sqlx::Error>) {
        self.clean = match outcome {
            Ok(_) => true,
            Err(err) => !broken(err),
        };
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.clean && !self.home.permits.is_closed() {
                self.home.idle().push(conn);
            }
        }
    }
}

/// Whether `err` leaves its connection unusable: a failure of the
/// connection itself, or the server ending the session (a fatal error, a
/// connection exception, an administrator's or a shutdown's termination).
pub(super) fn broken(err: &sqlx::Error) -> bool {
    if let sqlx::Error::Database(db) = err {
        return db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|e| {
                matches!(
                    e.severity(),
                    sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
                ) || e.code().starts_with("08")
                    || e.code().starts_with("57P")
            });
    }
    !matches!(
        err,
        sqlx::Error::RowNotFound
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::TypeNotFound { .. }
    )
}
