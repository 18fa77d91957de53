//! The writer's copy of the stream records it has read or written, so that
//! an append finds its stream's record without a `SELECT` of its row (a
//! third of the writer's work for a small append).
//!
//! It follows the writer's transaction write by write and is dropped
//! whenever the database may hold something else: when a job's savepoint
//! or a group rolls back, after a caller's transaction (its own SQL may
//! touch anything), and when another connection has committed since the
//! writer last looked. SQLite tells the last with `PRAGMA data_version`,
//! which changes exactly when another connection commits; the writer asks
//! it once per group, inside the group's write transaction, where no other
//! connection can commit.

use std::collections::HashMap;

use rusqlite::Connection;

use crate::record::StreamRecord;

/// The most records kept; beyond, the copy starts over.
const MAX_HEADS: usize = 65_536;

/// Stream records by path, as the writer's transaction holds them.
#[derive(Debug, Default)]
pub(super) struct Heads {
    by_path: HashMap<String, (i64, StreamRecord)>,
    paths: HashMap<i64, String>,
    /// `PRAGMA data_version` when the writer last looked.
    version: Option<i64>,
}

impl Heads {
    /// The record at `path`, if kept.
    pub fn get(&self, path: &str) -> Option<(i64, StreamRecord)> {
        self.by_path.get(path).cloned()
    }

    /// Keeps `record` as stream `key`'s, at `path`.
    pub fn put(&mut self, path: &str, key: i64, record: StreamRecord) {
        if self.by_path.len() >= MAX_HEADS && !self.by_path.contains_key(path) {
            self.clear();
        }
        if let Some(old) = self.by_path.insert(path.to_owned(), (key, record)) {
            if old.0 != key {
                self.paths.remove(&old.0);
            }
        }
        self.paths.insert(key, path.to_owned());
    }

    /// Forgets whatever stream was kept at `path`.
    pub fn forget_path(&mut self, path: &str) {
        if let Some((key, _)) = self.by_path.remove(path) {
            self.paths.remove(&key);
        }
    }

    /// Forgets stream `key`.
    pub fn forget(&mut self, key: i64) {
        if let Some(path) = self.paths.remove(&key) {
            self.by_path.remove(&path);
        }
    }

    /// Moves stream `key`'s last access forward to `at_ms`, if kept.
    pub fn slide(&mut self, key: i64, at_ms: i64) {
        if let Some(path) = self.paths.get(&key) {
            if let Some((_, record)) = self.by_path.get_mut(path) {
                record.accessed_ms = record.accessed_ms.max(at_ms);
            }
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.by_path.clear();
        self.paths.clear();
    }

    /// Forgets everything when another connection has committed since the
    /// last look. Call it inside a write transaction.
    pub fn check(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        if self.version != Some(version) {
            self.clear();
            self.version = Some(version);
        }
        Ok(())
    }
}
