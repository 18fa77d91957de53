//! Shared documents on SQLite: the `documents` table (layout version 7).
//!
//! Writes are jobs of the writer thread like every other write, so they
//! commit in its group commits, as durably as appends; each is one
//! conditional statement, so the compare-and-set is atomic. Reads use the
//! read connections. Every process on the file sees the same rows.

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension};

use super::writer::Containment;
use super::SqliteStorage;
use crate::documents::KeyRange;
use crate::{check_document, next_version, Document, Documents, StreamError};

/// `version` as SQLite stores it (a signed 64-bit integer).
fn signed(version: u64) -> Result<i64, StreamError> {
    i64::try_from(version).map_err(|_| {
        StreamError::InvalidArgument(format!("document version {version} is too large"))
    })
}

fn document(version: i64, body: Vec<u8>) -> Document {
    Document {
        version: u64::try_from(version).unwrap_or_default(),
        body: Bytes::from(body),
    }
}

fn get(conn: &Connection, key: &str) -> Result<Option<Document>, StreamError> {
    let mut stmt = conn.prepare_cached("SELECT version, body FROM documents WHERE key = ?1")?;
    let found = stmt
        .query_row([key], |r| Ok(document(r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(found)
}

fn scan(
    conn: &Connection,
    range: &KeyRange,
    limit: usize,
) -> Result<Vec<(String, Document)>, StreamError> {
    let sql = format!(
        "SELECT key, version, body FROM documents WHERE {} ORDER BY key LIMIT ?3",
        range.condition("key", "?1", "?2"),
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    // ?2 is bound even when the range has no end (and the SQL no ?2).
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let end = range.end.as_deref().unwrap_or_default();
    let rows = stmt.query_map((&range.start, end, limit), |r| {
        Ok((r.get(0)?, document(r.get(1)?, r.get(2)?)))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[async_trait]
impl Documents for SqliteStorage {
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError> {
        check_document(key, b"")?;
        let key = key.to_owned();
        self.with_reader(move |_, records| get(records.conn(), &key))
            .await
    }

    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError> {
        check_document(key, &body)?;
        let version = next_version(expected);
        let (new, expected) = (signed(version)?, expected.map(signed).transpose()?);
        let key = key.to_owned();
        self.submit(body.len(), Containment::Savepoint, move |_, records| {
            let conn = records.conn();
            let written = match expected {
                None => conn
                    .prepare_cached(
                        "INSERT INTO documents (key, version, body) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (key) DO NOTHING",
                    )?
                    .execute((&key, new, body.as_ref()))?,
                Some(expected) => conn
                    .prepare_cached(
                        "UPDATE documents SET version = ?2, body = ?3 \
                         WHERE key = ?1 AND version = ?4",
                    )?
                    .execute((&key, new, body.as_ref(), expected))?,
            };
            Ok(((written == 1).then_some(version), None))
        })
        .await
    }

    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError> {
        check_document(key, b"")?;
        let (key, expected) = (key.to_owned(), signed(expected)?);
        self.submit(0, Containment::Savepoint, move |_, records| {
            let deleted = records
                .conn()
                .prepare_cached("DELETE FROM documents WHERE key = ?1 AND version = ?2")?
                .execute((&key, expected))?;
            Ok((deleted == 1, None))
        })
        .await
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
        self.with_reader(move |_, records| scan(records.conn(), &range, limit))
            .await
    }
}
