//! Shared documents on PostgreSQL: the `documents` table (migration 5) in
//! the store's schema. Each write is one conditional statement on the
//! pool, committed on its own (autocommit) as durably as the store's
//! other commits; every process on the schema sees the same rows.

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::Row;

use super::error::pg_error;
use super::schema::quote;
use super::PgStorage;
use crate::documents::KeyRange;
use crate::{check_document, next_version, Document, Documents, StreamError};

/// `version` as PostgreSQL stores it (`BIGINT`).
fn signed(version: u64) -> Result<i64, StreamError> {
    i64::try_from(version).map_err(|_| {
        StreamError::InvalidArgument(format!("document version {version} is too large"))
    })
}

fn document(row: &sqlx::postgres::PgRow, at: usize) -> Result<Document, sqlx::Error> {
    let version: i64 = row.try_get(at)?;
    let body: Vec<u8> = row.try_get(at + 1)?;
    Ok(Document {
        version: u64::try_from(version).unwrap_or_default(),
        body: Bytes::from(body),
    })
}

impl PgStorage {
    fn documents_table(&self) -> String {
        format!("{}.documents", quote(&self.schema))
    }
}

#[async_trait]
impl Documents for PgStorage {
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError> {
        check_document(key, b"")?;
        let failed = |e| pg_error("cannot read a document", e);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT version, body FROM {} WHERE key = $1",
            self.documents_table()
        )))
        .bind(key)
        .fetch_optional(&self.wiring.pool)
        .await
        .map_err(failed)?;
        row.map(|row| document(&row, 0)).transpose().map_err(failed)
    }

    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError> {
        check_document(key, &body)?;
        let version = next_version(expected);
        let table = self.documents_table();
        let statement = match expected {
            None => format!(
                "INSERT INTO {table} (key, version, body) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO NOTHING"
            ),
            Some(_) => format!(
                "UPDATE {table} SET version = $2, body = $3 WHERE key = $1 AND version = $4"
            ),
        };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(statement))
            .bind(key)
            .bind(signed(version)?)
            .bind(body.as_ref());
        if let Some(expected) = expected {
            query = query.bind(signed(expected)?);
        }
        let written = query
            .execute(&self.wiring.pool)
            .await
            .map_err(|e| pg_error("cannot write a document", e))?;
        Ok((written.rows_affected() == 1).then_some(version))
    }

    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError> {
        check_document(key, b"")?;
        let deleted = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {} WHERE key = $1 AND version = $2",
            self.documents_table()
        )))
        .bind(key)
        .bind(signed(expected)?)
        .execute(&self.wiring.pool)
        .await
        .map_err(|e| pg_error("cannot remove a document", e))?;
        Ok(deleted.rows_affected() == 1)
    }

    async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StreamError> {
        let Some(range) = KeyRange::of(prefix, after).filter(|_| limit > 0) else {
            return Ok(Vec::new());
        };
        let failed = |e| pg_error("cannot scan the documents", e);
        let limit_at = if range.end.is_some() { "$3" } else { "$2" };
        let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT key, version, body FROM {} WHERE {} ORDER BY key LIMIT {limit_at}",
            self.documents_table(),
            range.condition("key", "$1", "$2"),
        )))
        .bind(&range.start);
        if let Some(end) = &range.end {
            query = query.bind(end);
        }
        let rows = query
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.wiring.pool)
            .await
            .map_err(failed)?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, document(row, 1)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(failed)
    }
}
