//! The read connections of a SQLite table: opened on demand up to a bound
//! and kept for reuse. A read that finds every connection busy waits for
//! one instead of opening (and then closing) a connection of its own:
//! opening one costs far more than the read (measured in the crate's
//! `process_batch` bench), and the bound caps the open files.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};

use rusqlite::Connection;

use crate::error::TableError;

/// The connections, how many are open (idle or lent), and how many reads
/// wait for one.
struct Pool {
    idle: Vec<Connection>,
    open: usize,
    waiting: usize,
}

pub(super) struct Readers {
    path: PathBuf,
    max: usize,
    pool: Mutex<Pool>,
    returned: Condvar,
}

impl Readers {
    /// At most `max` connections to the file at `path`.
    pub(super) fn new(path: PathBuf, max: usize) -> Self {
        Readers {
            path,
            max: max.max(1),
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }

    /// Runs `read` on a connection of the pool (blocking while all are lent).
    pub(super) fn with<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, TableError>,
    ) -> Result<T, TableError> {
        let lease = Lease {
            readers: self,
            conn: Some(self.take()?),
        };
        match &lease.conn {
            Some(conn) => read(conn),
            None => Err(TableError::internal("a leased read connection is missing")),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self) -> Result<Connection, TableError> {
        let mut pool = self.lock();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Ok(conn);
            }
            if pool.open < self.max {
                pool.open += 1;
                drop(pool);
                return super::connect(&self.path).inspect_err(|_| self.closed());
            }
            pool.waiting += 1;
            pool = self.returned.wait(pool).unwrap_or_else(|e| e.into_inner());
            pool.waiting -= 1;
        }
    }

    /// One connection fewer is open: a waiting read may open one.
    fn closed(&self) {
        self.lock().open -= 1;
        self.returned.notify_one();
    }
}

/// A connection lent to one read; given back when the read ends, or closed
/// if the read panicked (it may have left a transaction open).
struct Lease<'a> {
    readers: &'a Readers,
    conn: Option<Connection>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        if std::thread::panicking() {
            drop(conn);
            self.readers.closed();
            return;
        }
        self.readers.lock().idle.push(conn);
        self.readers.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before the bounded pool a read that found every kept connection lent
    /// opened one of its own (and closed it after), one per read.
    #[test]
    fn a_read_waits_for_a_lent_connection_instead_of_opening_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let readers = &Readers::new(dir.path().join("t.db"), 1);
        let (lent, lent_rx) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let first = scope.spawn(move || {
                readers.with(|_| {
                    lent.send(()).expect("send");
                    release_rx.recv().expect("released");
                    Ok(())
                })
            });
            lent_rx.recv().expect("the first read has its connection");
            let second = scope.spawn(|| {
                readers.with(|conn| {
                    conn.is_autocommit()
                        .then_some(())
                        .ok_or_else(|| TableError::internal("in a transaction"))
                })
            });
            while readers.lock().waiting == 0 {
                std::thread::yield_now();
            }
            release.send(()).expect("release");
            first.join().expect("first").expect("first read");
            second.join().expect("second").expect("second read");
        });
        let pool = readers.lock();
        assert_eq!((pool.open, pool.idle.len(), pool.waiting), (1, 1, 0));
    }
}
