//! Durable wake-up marks on PostgreSQL: the `wake_marks` table (migration
//! 3), written in the transaction of each commit.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};

use super::error::pg_error;
use super::schema::quote;
use super::PgStorage;
use crate::marks::{signed, unsigned, MarkOwner, Marker, MarkerGuard, Marks, WakeMark, WakeMarks};
use crate::StreamError;

const COLUMNS: &str = "projection, version, params, path, commits, attempts, due_ms";

/// The statement that writes a transaction's marks, on `schema`'s table.
pub(super) fn upsert(schema: &str) -> String {
    format!(
        "INSERT INTO {}.wake_marks (projection, version, params, path, commits, attempts, due_ms) \
         SELECT m.projection, m.version, m.params, m.path, m.commits, 0, 0 \
         FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[]) \
             AS m(projection, version, params, path, commits) \
         ON CONFLICT (projection, version, params) \
         DO UPDATE SET commits = wake_marks.commits + excluded.commits, path = excluded.path",
        quote(schema)
    )
}

/// Writes `marks` with `statement` (from [`upsert`]) on `conn`, inside the
/// commit's transaction. The marks are sorted, so concurrent commits lock
/// their rows in one order.
pub(super) async fn write(
    conn: &mut PgConnection,
    statement: &str,
    marks: &Marks,
) -> Result<(), sqlx::Error> {
    if marks.is_empty() {
        return Ok(());
    }
    let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ((owner, params), (path, commits)) in marks {
        columns.0.push(owner.projection.clone());
        columns.1.push(i64::from(owner.version));
        columns.2.push(params.clone());
        columns.3.push(path.clone());
        columns.4.push(signed(*commits));
    }
    sqlx::query(sqlx::AssertSqlSafe(statement))
        .bind(columns.0)
        .bind(columns.1)
        .bind(columns.2)
        .bind(columns.3)
        .bind(columns.4)
        .execute(conn)
        .await
        .map(drop)
}

fn mark(row: &sqlx::postgres::PgRow) -> Result<WakeMark, sqlx::Error> {
    Ok(WakeMark {
        projection: row.try_get(0)?,
        version: u32::try_from(row.try_get::<i64, _>(1)?).unwrap_or_default(),
        params: row.try_get(2)?,
        path: row.try_get(3)?,
        commits: unsigned(row.try_get(4)?),
        attempts: u32::try_from(row.try_get::<i64, _>(5)?).unwrap_or_default(),
        due_ms: unsigned(row.try_get(6)?),
    })
}

impl PgStorage {
    fn marks_table(&self) -> String {
        format!("{}.wake_marks", quote(&self.schema))
    }
}

#[async_trait]
impl WakeMarks for PgStorage {
    fn register(&self, owner: MarkOwner, marker: Marker) -> MarkerGuard {
        self.wiring.markers.register(owner, marker)
    }

    async fn list(&self) -> Result<Vec<WakeMark>, StreamError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM {} ORDER BY projection, version, params",
            self.marks_table()
        )))
        .fetch_all(&self.wiring.pool)
        .await
        .map_err(|e| pg_error("cannot list the wake-up marks", e))?;
        rows.iter()
            .map(mark)
            .collect::<Result<_, _>>()
            .map_err(|e| pg_error("cannot read a wake-up mark", e))
    }

    async fn get(&self, owner: &MarkOwner, params: &str) -> Result<Option<WakeMark>, StreamError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM {} WHERE projection = $1 AND version = $2 AND params = $3",
            self.marks_table()
        )))
        .bind(&owner.projection)
        .bind(i64::from(owner.version))
        .bind(params)
        .fetch_optional(&self.wiring.pool)
        .await
        .map_err(|e| pg_error("cannot read a wake-up mark", e))?;
        row.as_ref()
            .map(mark)
            .transpose()
            .map_err(|e| pg_error("cannot read a wake-up mark", e))
    }

    async fn clear(
        &self,
        owner: &MarkOwner,
        params: &str,
        commits: u64,
    ) -> Result<bool, StreamError> {
        // One statement: delete the mark if no commit marked it since,
        // else take its deferral away.
        let table = self.marks_table();
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH deleted AS (
                DELETE FROM {table}
                WHERE projection = $1 AND version = $2 AND params = $3 AND commits = $4
                RETURNING 1),
             kept AS (
                UPDATE {table} SET attempts = 0, due_ms = 0
                WHERE projection = $1 AND version = $2 AND params = $3 AND commits <> $4
                RETURNING 1)
             SELECT count(*) FROM deleted"
        )))
        .bind(&owner.projection)
        .bind(i64::from(owner.version))
        .bind(params)
        .bind(signed(commits))
        .fetch_one(&self.wiring.pool)
        .await
        .map_err(|e| pg_error("cannot clear a wake-up mark", e))?;
        let deleted: i64 = row
            .try_get(0)
            .map_err(|e| pg_error("cannot clear a wake-up mark", e))?;
        Ok(deleted == 1)
    }

    async fn defer(
        &self,
        owner: &MarkOwner,
        params: &str,
        path: &str,
        attempts: u32,
        due_ms: u64,
    ) -> Result<(), StreamError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {} (projection, version, params, path, commits, attempts, due_ms)
             VALUES ($1, $2, $3, $4, 0, $5, $6)
             ON CONFLICT (projection, version, params)
             DO UPDATE SET attempts = excluded.attempts, due_ms = excluded.due_ms",
            self.marks_table()
        )))
        .bind(&owner.projection)
        .bind(i64::from(owner.version))
        .bind(params)
        .bind(path)
        .bind(i64::from(attempts))
        .bind(signed(due_ms))
        .execute(&self.wiring.pool)
        .await
        .map_err(|e| pg_error("cannot defer a wake-up mark", e))?;
        Ok(())
    }
}
