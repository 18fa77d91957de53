//! Savepoints run by cached statements. rusqlite's `Savepoint` (and
//! `execute_batch`) hands SQLite the statement as text, which it parses
//! anew every time: with a savepoint per job, that was about 3 400
//! instructions of every durable append.

use rusqlite::Connection;

/// A named savepoint's three statements.
pub(super) struct Savepoint {
    begin: &'static str,
    release: &'static str,
    roll_back: &'static str,
}

/// Each job of a group commit runs under this one.
pub(super) const JOB: Savepoint = Savepoint {
    begin: "SAVEPOINT eddy_job",
    release: "RELEASE eddy_job",
    roll_back: "ROLLBACK TO eddy_job",
};

/// Each append of a caller's transaction runs under this one.
pub(super) const APPEND: Savepoint = Savepoint {
    begin: "SAVEPOINT eddy_append",
    release: "RELEASE eddy_append",
    roll_back: "ROLLBACK TO eddy_append",
};

impl Savepoint {
    /// Opens the savepoint.
    pub fn begin(&self, conn: &Connection) -> rusqlite::Result<()> {
        run(conn, self.begin)
    }

    /// Keeps what was written since [`begin`](Self::begin).
    pub fn release(&self, conn: &Connection) -> rusqlite::Result<()> {
        run(conn, self.release)
    }

    /// Undoes what was written since [`begin`](Self::begin) and closes the
    /// savepoint.
    pub fn roll_back(&self, conn: &Connection) -> rusqlite::Result<()> {
        run(conn, self.roll_back)?;
        run(conn, self.release)
    }
}

fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_savepoint_keeps_its_writes_and_a_rolled_back_one_does_not() {
        let mut conn = Connection::open_in_memory().expect("memory database");
        conn.execute_batch("CREATE TABLE t (v INTEGER)")
            .expect("table");
        let tx = conn.transaction().expect("transaction");
        for (keep, value) in [(true, 1), (false, 2), (true, 3)] {
            JOB.begin(&tx).expect("begin");
            tx.execute("INSERT INTO t VALUES (?1)", [value])
                .expect("insert");
            if keep {
                JOB.release(&tx).expect("release");
            } else {
                JOB.roll_back(&tx).expect("roll back");
            }
        }
        tx.commit().expect("commit");
        let kept: Vec<i64> = conn
            .prepare("SELECT v FROM t ORDER BY v")
            .and_then(|mut stmt| stmt.query_map([], |row| row.get(0))?.collect())
            .expect("rows");
        assert_eq!(kept, vec![1, 3]);
    }
}
