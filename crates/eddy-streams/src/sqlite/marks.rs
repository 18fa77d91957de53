//! Durable wake-up marks on SQLite: the `wake_marks` table (layout
//! version 5), written in the writer's transactions.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row};

use super::SqliteStorage;
use crate::marks::{signed, unsigned, MarkOwner, Marker, MarkerGuard, Marks, WakeMark, WakeMarks};
use crate::StreamError;

const COLUMNS: &str = "projection, version, params, path, commits, attempts, due_ms";

/// Writes `marks` in the transaction on `conn`.
pub(super) fn write(conn: &Connection, marks: &Marks) -> Result<(), StreamError> {
    if marks.is_empty() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached(
        "INSERT INTO wake_marks (projection, version, params, path, commits, attempts, due_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, 0, 0) \
         ON CONFLICT (projection, version, params) \
         DO UPDATE SET commits = commits + excluded.commits, path = excluded.path",
    )?;
    for ((owner, params), (path, commits)) in marks {
        stmt.execute((
            &owner.projection,
            owner.version,
            params,
            path,
            signed(*commits),
        ))?;
    }
    Ok(())
}

fn mark(r: &Row<'_>) -> rusqlite::Result<WakeMark> {
    Ok(WakeMark {
        projection: r.get(0)?,
        version: r.get(1)?,
        params: r.get(2)?,
        path: r.get(3)?,
        commits: unsigned(r.get(4)?),
        attempts: r.get(5)?,
        due_ms: unsigned(r.get(6)?),
    })
}

#[async_trait]
impl WakeMarks for SqliteStorage {
    fn register(&self, owner: MarkOwner, marker: Marker) -> MarkerGuard {
        self.markers.register(owner, marker)
    }

    async fn list(&self) -> Result<Vec<WakeMark>, StreamError> {
        self.transaction(|tx| {
            let mut stmt = tx.sql().prepare_cached(&format!(
                "SELECT {COLUMNS} FROM wake_marks ORDER BY projection, version, params"
            ))?;
            let marks = stmt.query_map([], mark)?;
            Ok(marks.collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn get(&self, owner: &MarkOwner, params: &str) -> Result<Option<WakeMark>, StreamError> {
        let (owner, params) = (owner.clone(), params.to_owned());
        self.transaction(move |tx| {
            let mut stmt = tx.sql().prepare_cached(&format!(
                "SELECT {COLUMNS} FROM wake_marks \
                 WHERE projection = ?1 AND version = ?2 AND params = ?3"
            ))?;
            let found = stmt
                .query_row((&owner.projection, owner.version, &params), mark)
                .optional()?;
            Ok(found)
        })
        .await
    }

    async fn clear(
        &self,
        owner: &MarkOwner,
        params: &str,
        commits: u64,
    ) -> Result<bool, StreamError> {
        let (owner, params) = (owner.clone(), params.to_owned());
        self.transaction(move |tx| {
            let key = (&owner.projection, owner.version, &params);
            let deleted = tx.sql().execute(
                "DELETE FROM wake_marks \
                 WHERE projection = ?1 AND version = ?2 AND params = ?3 AND commits = ?4",
                (key.0, key.1, key.2, signed(commits)),
            )?;
            if deleted == 0 {
                tx.sql().execute(
                    "UPDATE wake_marks SET attempts = 0, due_ms = 0 \
                     WHERE projection = ?1 AND version = ?2 AND params = ?3",
                    key,
                )?;
            }
            Ok(deleted == 1)
        })
        .await
    }

    async fn defer(
        &self,
        owner: &MarkOwner,
        params: &str,
        path: &str,
        attempts: u32,
        due_ms: u64,
    ) -> Result<(), StreamError> {
        let (owner, params, path) = (owner.clone(), params.to_owned(), path.to_owned());
        self.transaction(move |tx| {
            tx.sql().execute(
                "INSERT INTO wake_marks (projection, version, params, path, commits, attempts, due_ms) \
                 VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6) \
                 ON CONFLICT (projection, version, params) \
                 DO UPDATE SET attempts = excluded.attempts, due_ms = excluded.due_ms",
                (
                    &owner.projection,
                    owner.version,
                    &params,
                    &path,
                    attempts,
                    signed(due_ms),
                ),
            )?;
            Ok(())
        })
        .await
    }
}
