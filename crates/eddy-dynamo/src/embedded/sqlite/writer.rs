//! The writer thread of a SQLite table: it owns the write connection and
//! commits the works queued since its last commit in one transaction (group
//! commit), each work inside its own savepoint, so one fsync makes many
//! independent writes durable and a failed work leaves nothing.

use std::sync::mpsc::{Receiver, Sender};

use rusqlite::{params, Connection, OptionalExtension};

use super::{decode_item, encode, storage};
use crate::embedded::memory::Refused;
use crate::embedded::store::{Completion, LoggedChange, Txn, Work, Write};
use crate::error::TableError;
use crate::item::Item;

/// The most works one transaction groups.
pub(crate) const GROUP: usize = 256;

/// Starts the writer thread on `conn`; it stops when every sender is gone.
pub(super) fn spawn(conn: Connection) -> Result<Sender<Work>, TableError> {
    let (sender, receiver) = std::sync::mpsc::channel::<Work>();
    std::thread::Builder::new()
        .name("eddy-dynamo-sqlite-writer".into())
        .spawn(move || run(conn, receiver))
        .map_err(|e| TableError::internal_from("the SQLite writer thread did not start", e))?;
    Ok(sender)
}

fn run(conn: Connection, works: Receiver<Work>) {
    // After a failed COMMIT the file's state is unknown to this handle:
    // refuse every later write until the table is reopened.
    let mut poisoned: Option<String> = None;
    while let Ok(first) = works.recv() {
        let mut group = vec![first];
        // Writers that queue a work as this one wakes (rows of one batch)
        // get the CPU first, so their works join this commit instead of
        // each waiting for a commit of its own.
        std::thread::yield_now();
        while group.len() < GROUP {
            match works.try_recv() {
                Ok(work) => group.push(work),
                Err(_) => break,
            }
        }
        if let Some(reason) = &poisoned {
            refuse(group, reason);
            continue;
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            refuse(
                group,
                &format!("the SQLite table could not begin a write: {e}"),
            );
            continue;
        }
        let mut done: Vec<Completion> = Vec::with_capacity(group.len());
        for work in group {
            if let Err(e) = conn.execute_batch("SAVEPOINT work") {
                let _ = work(&mut Refused(format!("the SQLite table failed: {e}")));
                continue;
            }
            match work(&mut SqliteTxn { conn: &conn }) {
                Ok(completion) => {
                    let _ = conn.execute_batch("RELEASE work");
                    done.push(completion);
                }
                Err(()) => {
                    let _ = conn.execute_batch("ROLLBACK TO work; RELEASE work");
                }
            }
        }
        match conn.execute_batch("COMMIT") {
            Ok(()) => done.into_iter().for_each(|d| d(Ok(()))),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                let reason = format!(
                    "a commit of the SQLite table failed ({e}); it refuses writes until reopened"
                );
                for d in done {
                    d(Err(TableError::internal(&reason)));
                }
                poisoned = Some(reason);
            }
        }
    }
}

fn refuse(group: Vec<Work>, reason: &str) {
    for work in group {
        let _ = work(&mut Refused(reason.to_owned()));
    }
}

/// The inside of the writer's transaction. SQLite's write lock is held
/// from `BEGIN IMMEDIATE`, so no other connection to the file commits
/// between what a work reads and what it writes.
struct SqliteTxn<'a> {
    conn: &'a Connection,
}

impl Txn for SqliteTxn<'_> {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        super::get_item(self.conn, pk, sk)
    }

    fn last_sequence(&self) -> Result<u64, TableError> {
        let last: Option<i64> = self
            .conn
            .prepare_cached("SELECT MAX(seq) FROM changes")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(storage)?;
        let last = last.and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
        Ok(last.max(self.trimmed_through()?))
    }

    fn items_after(
        &self,
        after: Option<&(String, String)>,
        limit: usize,
    ) -> Result<Vec<(String, String, Item)>, TableError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // The primary key's order: one range step of its index.
        let mut stmt;
        let mut rows = match after {
            Some((pk, sk)) => {
                stmt = self
                    .conn
                    .prepare_cached(
                        "SELECT pk, sk, item FROM items WHERE (pk, sk) > (?1, ?2) ORDER BY pk, sk LIMIT ?3",
                    )
                    .map_err(storage)?;
                stmt.query(rusqlite::params![pk, sk, limit])
            }
            None => {
                stmt = self
                    .conn
                    .prepare_cached("SELECT pk, sk, item FROM items ORDER BY pk, sk LIMIT ?1")
                    .map_err(storage)?;
                stmt.query(rusqlite::params![limit])
            }
        }
        .map_err(storage)?;
        let mut items = Vec::new();
        while let Some(row) = rows.next().map_err(storage)? {
            let (pk, sk): (String, String) =
                (row.get(0).map_err(storage)?, row.get(1).map_err(storage)?);
            items.push((
                pk,
                sk,
                decode_item(&row.get::<_, String>(2).map_err(storage)?)?,
            ));
        }
        Ok(items)
    }

    fn apply(&mut self, writes: Vec<Write>, records: Vec<LoggedChange>) -> Result<(), TableError> {
        let conn = self.conn;
        for write in &writes {
            let (pk, sk) = match write {
                Write::Put { pk, sk, .. } | Write::Delete { pk, sk } => (pk, sk),
            };
            conn.prepare_cached("DELETE FROM index_entries WHERE pk = ?1 AND sk = ?2")
                .and_then(|mut s| s.execute(params![pk, sk]))
                .map_err(storage)?;
            match write {
                Write::Put { item, indexes, .. } => {
                    let text = encode(item)?;
                    conn.prepare_cached(
                        "INSERT OR REPLACE INTO items (pk, sk, item) VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut s| s.execute(params![pk, sk, text]))
                    .map_err(storage)?;
                    for (idx, ipk, isk) in indexes {
                        conn.prepare_cached(
                            "INSERT INTO index_entries (idx, ipk, isk, pk, sk) VALUES (?1, ?2, ?3, ?4, ?5)",
                        )
                        .and_then(|mut s| s.execute(params![idx, ipk, isk, pk, sk]))
                        .map_err(storage)?;
                    }
                }
                Write::Delete { .. } => {
                    conn.prepare_cached("DELETE FROM items WHERE pk = ?1 AND sk = ?2")
                        .and_then(|mut s| s.execute(params![pk, sk]))
                        .map_err(storage)?;
                }
            }
        }
        for change in &records {
            let seq = i64::try_from(change.seq)
                .map_err(|e| TableError::internal_from("a sequence number is out of range", e))?;
            let text = encode(&change.record)?;
            conn.prepare_cached("INSERT INTO changes (seq, created, record) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![seq, change.created, text]))
                .map_err(storage)?;
        }
        Ok(())
    }

    fn save_checkpoint(&mut self, consumer: &str, sequence: u64) -> Result<(), TableError> {
        let seq = i64::try_from(sequence)
            .map_err(|e| TableError::internal_from("a sequence number is out of range", e))?;
        self.conn
            .prepare_cached(
                "INSERT INTO checkpoints (consumer, seq) VALUES (?1, ?2)
                 ON CONFLICT (consumer) DO UPDATE SET seq = excluded.seq",
            )
            .and_then(|mut s| s.execute(params![consumer, seq]))
            .map_err(storage)?;
        Ok(())
    }

    fn checkpoints(&self) -> Result<Vec<u64>, TableError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq FROM checkpoints")
            .map_err(storage)?;
        let rows = stmt
            .query_map([], |r| r.get::<_, i64>(0))
            .map_err(storage)?;
        let seqs: Vec<i64> = rows.collect::<Result<_, _>>().map_err(storage)?;
        Ok(seqs
            .into_iter()
            .filter_map(|s| u64::try_from(s).ok())
            .collect())
    }

    fn trimmed_through(&self) -> Result<u64, TableError> {
        super::trimmed_through(self.conn)
    }

    fn oldest(&self, limit: usize) -> Result<Vec<(u64, i64)>, TableError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq, created FROM changes ORDER BY seq LIMIT ?1")
            .map_err(storage)?;
        let rows = stmt
            .query_map(params![limit], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(storage)?;
        let rows: Vec<(i64, i64)> = rows.collect::<Result<_, _>>().map_err(storage)?;
        Ok(rows
            .into_iter()
            .filter_map(|(seq, created)| Some((u64::try_from(seq).ok()?, created)))
            .collect())
    }

    fn trim_through(&mut self, seq: u64) -> Result<(), TableError> {
        let seq = i64::try_from(seq)
            .map_err(|e| TableError::internal_from("a sequence number is out of range", e))?;
        self.conn
            .prepare_cached("DELETE FROM changes WHERE seq <= ?1")
            .and_then(|mut s| s.execute(params![seq]))
            .map_err(storage)?;
        let kept: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'trimmed'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(storage)?;
        let previous = kept.and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES ('trimmed', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![seq.max(previous).to_string()],
            )
            .map_err(storage)?;
        Ok(())
    }

    fn table_schema(&self, name: &str) -> Result<Option<String>, TableError> {
        self.conn
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                params![format!("table:{name}")],
                |r| r.get(0),
            )
            .optional()
            .map_err(storage)
    }

    fn save_table_schema(&mut self, name: &str, schema: &str) -> Result<(), TableError> {
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![format!("table:{name}"), schema],
            )
            .map_err(storage)?;
        Ok(())
    }
}
