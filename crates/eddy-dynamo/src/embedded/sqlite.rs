//! The SQLite store: one database file in WAL mode with full sync. The
//! record layout and commit protocol are described in the crate's DESIGN.md.

use std::path::Path;

use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};

use super::store::{Store, Txn, Write};
use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;
use crate::key_schema::TableSchema;

const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL, sk TEXT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (pk, sk)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS index_entries (
    idx TEXT NOT NULL, ipk TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL,
    PRIMARY KEY (idx, ipk, pk, sk)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS index_entries_by_item ON index_entries (pk, sk);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (consumer TEXT PRIMARY KEY, seq TEXT NOT NULL) WITHOUT ROWID;
";

pub(crate) struct SqliteStore {
    conn: Connection,
}

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

impl SqliteStore {
    /// Opens (creating when absent) the database at `path` for `schema`.
    /// A database created for another schema is refused.
    pub(crate) fn open(path: &Path, schema: &TableSchema) -> Result<Self, TableError> {
        let conn = Connection::open(path).map_err(storage)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(storage)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(storage)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(storage)?;
        conn.execute_batch(SCHEMA_SQL).map_err(storage)?;
        let wanted = encode(schema)?;
        let stored: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(storage)?;
        match stored {
            None => {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                    params![wanted],
                )
                .map_err(storage)?;
            }
            Some(stored) if stored == wanted => {}
            Some(stored) => {
                return Err(TableError::Misconfigured {
                    message: format!(
                        "{} holds a table with another schema ({stored}); open it with that schema",
                        path.display()
                    ),
                })
            }
        }
        Ok(Self { conn })
    }
}

/// The item under `(pk, sk)`, read on `conn` (inside or outside a transaction).
fn get_item(conn: &Connection, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
    let text: Option<String> = conn
        .prepare_cached("SELECT item FROM items WHERE pk = ?1 AND sk = ?2")
        .and_then(|mut s| s.query_row(params![pk, sk], |r| r.get(0)).optional())
        .map_err(storage)?;
    text.as_deref().map(decode_item).transpose()
}

/// The inside of a `BEGIN IMMEDIATE` transaction: SQLite's write lock is
/// held from its first read, so no other connection to the file commits
/// between what it reads and what it writes.
struct SqliteTxn<'a> {
    tx: Transaction<'a>,
}

impl Txn for SqliteTxn<'_> {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        get_item(&self.tx, pk, sk)
    }

    fn last_sequence(&self) -> Result<u64, TableError> {
        let seq: Option<i64> = self
            .tx
            .query_row("SELECT MAX(seq) FROM changes", [], |r| r.get(0))
            .map_err(storage)?;
        Ok(seq.and_then(|s| u64::try_from(s).ok()).unwrap_or(0))
    }

    fn all_items(&self) -> Result<Vec<Item>, TableError> {
        let mut stmt = self
            .tx
            .prepare_cached("SELECT item FROM items")
            .map_err(storage)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(storage)?;
        let texts: Vec<String> = rows.collect::<Result<_, _>>().map_err(storage)?;
        texts.iter().map(|t| decode_item(t)).collect()
    }

    fn apply(
        &mut self,
        writes: Vec<Write>,
        records: Vec<(u64, ChangeRecord)>,
    ) -> Result<(), TableError> {
        let tx = &self.tx;
        for write in &writes {
            match write {
                Write::Put {
                    pk,
                    sk,
                    item,
                    indexes,
                } => {
                    tx.execute(
                        "INSERT OR REPLACE INTO items (pk, sk, item) VALUES (?1, ?2, ?3)",
                        params![pk, sk, encode(item)?],
                    )
                    .map_err(storage)?;
                    tx.execute(
                        "DELETE FROM index_entries WHERE pk = ?1 AND sk = ?2",
                        params![pk, sk],
                    )
                    .map_err(storage)?;
                    for (idx, ipk) in indexes {
                        tx.execute(
                            "INSERT INTO index_entries (idx, ipk, pk, sk) VALUES (?1, ?2, ?3, ?4)",
                            params![idx, ipk, pk, sk],
                        )
                        .map_err(storage)?;
                    }
                }
                Write::Delete { pk, sk } => {
                    tx.execute(
                        "DELETE FROM items WHERE pk = ?1 AND sk = ?2",
                        params![pk, sk],
                    )
                    .map_err(storage)?;
                    tx.execute(
                        "DELETE FROM index_entries WHERE pk = ?1 AND sk = ?2",
                        params![pk, sk],
                    )
                    .map_err(storage)?;
                }
            }
        }
        for (seq, record) in &records {
            let seq = i64::try_from(*seq)
                .map_err(|e| TableError::internal_from("a sequence number is out of range", e))?;
            tx.execute(
                "INSERT INTO changes (seq, record) VALUES (?1, ?2)",
                params![seq, encode(record)?],
            )
            .map_err(storage)?;
        }
        Ok(())
    }
}

impl Store for SqliteStore {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        get_item(&self.conn, pk, sk)
    }

    fn partition(&self, index: Option<&str>, pk: &str) -> Result<Vec<Item>, TableError> {
        let texts: Vec<String> = match index {
            None => {
                let mut stmt = self
                    .conn
                    .prepare_cached("SELECT item FROM items WHERE pk = ?1")
                    .map_err(storage)?;
                let rows = stmt.query_map(params![pk], |r| r.get(0)).map_err(storage)?;
                rows.collect::<Result<_, _>>().map_err(storage)?
            }
            Some(index) => {
                let mut stmt = self
                    .conn
                    .prepare_cached(
                        "SELECT i.item FROM index_entries e JOIN items i ON i.pk = e.pk AND i.sk = e.sk
                         WHERE e.idx = ?1 AND e.ipk = ?2",
                    )
                    .map_err(storage)?;
                let rows = stmt
                    .query_map(params![index, pk], |r| r.get(0))
                    .map_err(storage)?;
                rows.collect::<Result<_, _>>().map_err(storage)?
            }
        };
        texts.iter().map(|t| decode_item(t)).collect()
    }

    /// `BEGIN IMMEDIATE` takes the file's write lock before `work` reads
    /// anything; a second handle (or process) waits for it (up to the busy
    /// timeout) instead of deciding on what it read before.
    fn write(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Txn) -> Result<(), TableError>,
    ) -> Result<(), TableError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(storage)?;
        let mut txn = SqliteTxn { tx };
        work(&mut txn)?; // dropping the transaction rolls it back
        txn.tx.commit().map_err(storage)
    }

    fn changes_after(&self, after: u64, limit: usize) -> Result<Vec<ChangeRecord>, TableError> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare_cached("SELECT record FROM changes WHERE seq > ?1 ORDER BY seq LIMIT ?2")
            .map_err(storage)?;
        let rows = stmt
            .query_map(params![after, limit], |r| r.get::<_, String>(0))
            .map_err(storage)?;
        let texts: Vec<String> = rows.collect::<Result<_, _>>().map_err(storage)?;
        texts
            .iter()
            .map(|t| {
                serde_json::from_str(t).map_err(|e| {
                    TableError::internal_from("a stored change record does not decode", e)
                })
            })
            .collect()
    }

    fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError> {
        self.conn
            .query_row(
                "SELECT seq FROM checkpoints WHERE consumer = ?1",
                params![consumer],
                |r| r.get(0),
            )
            .optional()
            .map_err(storage)
    }

    fn save_checkpoint(&mut self, consumer: &str, sequence: &str) -> Result<(), TableError> {
        self.conn
            .execute(
                "INSERT INTO checkpoints (consumer, seq) VALUES (?1, ?2)
                 ON CONFLICT (consumer) DO UPDATE SET seq = excluded.seq",
                params![consumer, sequence],
            )
            .map(|_| ())
            .map_err(storage)
    }
}
