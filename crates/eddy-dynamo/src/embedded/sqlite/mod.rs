//! The SQLite store: one database file in WAL mode with full sync, a
//! writer thread that group-commits, and a small pool of read connections.
//! The record layout and commit protocol are described in the crate's
//! DESIGN.md.

mod layout;
mod readers;
mod writer;

pub(crate) use writer::GROUP;

use std::ops::Bound;
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, ErrorCode, OptionalExtension};

use super::feed::check_readable;
use super::store::{KeyRange, Store, Work};
use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;
use crate::key_schema::TableSchema;

/// Read connections open at most (concurrent reads beyond wait for one).
const READERS: usize = 16;
/// How long a write waits for another handle (or process) holding the file.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A SQLite failure: another writer holding the file past the busy timeout
/// is transient; anything else is not.
fn storage(e: rusqlite::Error) -> TableError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            TableError::unavailable("the SQLite table is locked by another writer", e)
        }
        _ => TableError::internal_from("the SQLite table failed", e),
    }
}

fn decode_item(text: &str) -> Result<Item, TableError> {
    serde_json::from_str(text)
        .map_err(|e| TableError::internal_from("a stored item does not decode", e))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, TableError> {
    serde_json::to_string(value)
        .map_err(|e| TableError::internal_from("an item does not encode", e))
}

/// The item under `(pk, sk)`, read on `conn`.
fn get_item(conn: &Connection, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT item FROM items WHERE pk = ?1 AND sk = ?2")
        .and_then(|mut s| s.query_row(params![pk, sk], |r| r.get(0)).optional())
        .map_err(storage)?;
    text.as_deref().map(decode_item).transpose()
}

fn trimmed_through(conn: &Connection) -> Result<u64, TableError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT value FROM meta WHERE key = 'trimmed'")
        .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
        .map_err(storage)?;
    Ok(text.and_then(|t| t.parse().ok()).unwrap_or(0))
}

fn connect(path: &Path) -> Result<Connection, TableError> {
    let conn = Connection::open(path).map_err(storage)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(storage)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(storage)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
    Ok(conn)
}

pub(crate) struct SqliteStore {
    writer: Mutex<Sender<Work>>,
    readers: readers::Readers,
}

impl SqliteStore {
    /// Opens (creating when absent) the database at `path` for `schema`:
    /// an older layout is upgraded, indexes added to the schema are
    /// backfilled, and a file holding another table is refused.
    pub(crate) fn open(path: &Path, schema: &TableSchema) -> Result<Self, TableError> {
        let mut conn = connect(path)?;
        layout::prepare(&mut conn, schema, &path.display().to_string())?;
        Ok(Self {
            writer: Mutex::new(writer::spawn(conn)?),
            readers: readers::Readers::new(path.to_owned(), READERS),
        })
    }

    /// Runs `read` in one read transaction: every statement sees the same
    /// committed state.
    fn read_snapshot<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, TableError>,
    ) -> Result<T, TableError> {
        self.read(|conn| {
            conn.execute_batch("BEGIN").map_err(storage)?;
            let out = read(conn);
            conn.execute_batch("COMMIT").map_err(storage)?;
            out
        })
    }

    /// Runs `read` on a pooled read connection.
    fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T, TableError>,
    ) -> Result<T, TableError> {
        self.readers.with(read)
    }
}

/// The SQL of a range query and its arguments, in placeholder order.
fn range_sql(range: &KeyRange) -> (String, Vec<String>) {
    let (dir, op_after) = if range.forward {
        ("ASC", ">")
    } else {
        ("DESC", "<")
    };
    let mut args = Vec::new();
    let mut arg = |value: &str| {
        args.push(value.to_owned());
        format!("?{}", args.len())
    };
    let (sort, mut sql) = match &range.index {
        None => {
            let pk = arg(&range.partition);
            ("sk", format!("SELECT item FROM items WHERE pk = {pk}"))
        }
        Some(index) => {
            let (idx, ipk) = (arg(index), arg(&range.partition));
            (
                "e.isk",
                format!(
                    "SELECT i.item FROM index_entries e JOIN items i ON i.pk = e.pk AND i.sk = e.sk \
                     WHERE e.idx = {idx} AND e.ipk = {ipk}"
                ),
            )
        }
    };
    for (bound, inclusive, exclusive) in [(&range.lower, ">=", ">"), (&range.upper, "<=", "<")] {
        match bound {
            Bound::Included(v) => sql.push_str(&format!(" AND {sort} {inclusive} {}", arg(v))),
            Bound::Excluded(v) => sql.push_str(&format!(" AND {sort} {exclusive} {}", arg(v))),
            Bound::Unbounded => {}
        }
    }
    if let Some((at_sort, at_pk, at_sk)) = &range.after {
        match range.index {
            None => sql.push_str(&format!(" AND sk {op_after} {}", arg(at_sk))),
            Some(_) => {
                let (s, p, k) = (arg(at_sort), arg(at_pk), arg(at_sk));
                sql.push_str(&format!(
                    " AND (e.isk, e.pk, e.sk) {op_after} ({s}, {p}, {k})"
                ));
            }
        }
    }
    match range.index {
        None => sql.push_str(&format!(" ORDER BY sk {dir}")),
        Some(_) => sql.push_str(&format!(" ORDER BY e.isk {dir}, e.pk {dir}, e.sk {dir}")),
    }
    (sql, args)
}

impl Store for SqliteStore {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        self.read(|conn| get_item(conn, pk, sk))
    }

    fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, TableError> {
        self.read_snapshot(|conn| keys.iter().map(|(pk, sk)| get_item(conn, pk, sk)).collect())
    }

    fn scan(
        &self,
        after: Option<&(String, String)>,
        visit: &mut dyn FnMut(&str, Item) -> bool,
    ) -> Result<bool, TableError> {
        let (pk, sk) = after.cloned().unwrap_or_default();
        let first = after.is_none();
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT pk, item FROM items WHERE ?1 OR (pk, sk) > (?2, ?3) ORDER BY pk, sk",
                )
                .map_err(storage)?;
            let mut rows = stmt.query(params![first, pk, sk]).map_err(storage)?;
            while let Some(row) = rows.next().map_err(storage)? {
                let pk = row
                    .get_ref(0)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(storage)?;
                let text = row
                    .get_ref(1)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(storage)?;
                if !visit(pk, decode_item(text)?) {
                    return Ok(rows.next().map_err(storage)?.is_some());
                }
            }
            Ok(false)
        })
    }

    fn query(
        &self,
        range: &KeyRange,
        visit: &mut dyn FnMut(Item) -> bool,
    ) -> Result<bool, TableError> {
        let (sql, args) = range_sql(range);
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql).map_err(storage)?;
            let mut rows = stmt.query(params_from_iter(args)).map_err(storage)?;
            while let Some(row) = rows.next().map_err(storage)? {
                let text = row
                    .get_ref(0)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(storage)?;
                if !visit(decode_item(text)?) {
                    return Ok(rows.next().map_err(storage)?.is_some());
                }
            }
            Ok(false)
        })
    }

    fn changes_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read_snapshot(|conn| {
            if let Some(after) = after {
                check_readable(after, trimmed_through(conn)?)?;
            }
            let after = i64::try_from(after.unwrap_or(0)).unwrap_or(i64::MAX);
            let mut stmt = conn
                .prepare_cached("SELECT record FROM changes WHERE seq > ?1 ORDER BY seq LIMIT ?2")
                .map_err(storage)?;
            let mut rows = stmt.query(params![after, limit]).map_err(storage)?;
            let mut records = Vec::new();
            while let Some(row) = rows.next().map_err(storage)? {
                let text = row
                    .get_ref(0)
                    .and_then(|v| Ok(v.as_str()?))
                    .map_err(storage)?;
                records.push(serde_json::from_str(text).map_err(|e| {
                    TableError::internal_from("a stored change record does not decode", e)
                })?);
            }
            Ok(records)
        })
    }

    fn load_checkpoint(&self, consumer: &str) -> Result<Option<u64>, TableError> {
        let seq: Option<i64> = self.read(|conn| {
            conn.query_row(
                "SELECT seq FROM checkpoints WHERE consumer = ?1",
                params![consumer],
                |r| r.get(0),
            )
            .optional()
            .map_err(storage)
        })?;
        Ok(seq.and_then(|s| u64::try_from(s).ok()))
    }

    fn write(&self, work: Work) {
        let sent = match self.writer.lock() {
            Ok(writer) => writer.send(work).map_err(|e| e.0),
            Err(_) => return,
        };
        if let Err(work) = sent {
            let _ = work(&mut crate::embedded::memory::Refused(
                "the SQLite table's writer has stopped; reopen the table".into(),
            ));
        }
    }

    fn blocking(&self) -> bool {
        true
    }
}
