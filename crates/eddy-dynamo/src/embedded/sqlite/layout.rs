//! The record layout of a SQLite table file, its version, and what opening
//! a file does: create it, upgrade an older layout, and bring its indexes in
//! line with the schema it is opened with (backfilling added ones).

use rusqlite::{params, Connection, OptionalExtension};

use super::{decode_item, encode, storage};
use crate::embedded::engine::index_entry;
use crate::embedded::keys::encode_key;
use crate::embedded::tables::Namespace;
use crate::error::TableError;
use crate::key_schema::{IndexDefinition, TableSchema};

/// The layout this build writes (`PRAGMA user_version`). Version 1 (files
/// without a version) had no index sort keys, no record times, and numbers
/// in keys encoded in a way that does not sort.
pub(super) const LAYOUT: i64 = 2;

const TABLES: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE items (
    pk TEXT NOT NULL, sk TEXT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (pk, sk)) WITHOUT ROWID;
CREATE TABLE index_entries (
    idx TEXT NOT NULL, ipk TEXT NOT NULL, isk TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL,
    PRIMARY KEY (idx, ipk, isk, pk, sk)) WITHOUT ROWID;
CREATE INDEX index_entries_by_item ON index_entries (pk, sk);
CREATE TABLE changes (seq INTEGER PRIMARY KEY, created INTEGER NOT NULL, record TEXT NOT NULL);
CREATE TABLE checkpoints (consumer TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
";

/// Version 1 to 2: the old tables are renamed, the new ones created, and
/// every item re-keyed (below). Records keep their sequence numbers and
/// count as committed now for the retention window.
const UPGRADE_FROM_1: &str = "
ALTER TABLE meta RENAME TO meta_v1;
ALTER TABLE items RENAME TO items_v1;
ALTER TABLE changes RENAME TO changes_v1;
ALTER TABLE checkpoints RENAME TO checkpoints_v1;
DROP TABLE index_entries;
";

const COPY_FROM_1: &str = "
INSERT INTO meta SELECT key, value FROM meta_v1;
INSERT INTO changes SELECT seq, CAST(strftime('%s', 'now') AS INTEGER), record FROM changes_v1;
INSERT INTO checkpoints SELECT consumer, CAST(seq AS INTEGER) FROM checkpoints_v1;
DROP TABLE meta_v1;
DROP TABLE changes_v1;
DROP TABLE checkpoints_v1;
";

/// Creates, upgrades and checks the file, in one write transaction: after
/// it the file has this build's layout and `schema`'s indexes.
pub(super) fn prepare(
    conn: &mut Connection,
    schema: &TableSchema,
    path: &str,
) -> Result<(), TableError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(storage)?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(storage)?;
    let has_items: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'items')",
            [],
            |r| r.get(0),
        )
        .map_err(storage)?;
    match (version, has_items) {
        (0, false) => {
            tx.execute_batch(TABLES).map_err(storage)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                params![encode(schema)?],
            )
            .map_err(storage)?;
        }
        (0, true) => upgrade_from_1(&tx)?,
        (LAYOUT, _) => {}
        (other, _) => {
            return Err(TableError::Misconfigured {
                message: format!(
                    "{path} has table layout {other}; this build reads layout {LAYOUT}: open it with a newer eddy"
                ),
            })
        }
    }
    tx.pragma_update(None, "user_version", LAYOUT)
        .map_err(storage)?;
    reconcile(&tx, schema, path)?;
    tx.commit().map_err(storage)
}

fn upgrade_from_1(tx: &Connection) -> Result<(), TableError> {
    tx.execute_batch(UPGRADE_FROM_1).map_err(storage)?;
    tx.execute_batch(TABLES).map_err(storage)?;
    tx.execute_batch(COPY_FROM_1).map_err(storage)?;
    let stored = stored_schema(tx)?
        .ok_or_else(|| TableError::internal("a layout 1 table file has no schema"))?;
    {
        let mut read = tx.prepare("SELECT item FROM items_v1").map_err(storage)?;
        let mut rows = read.query([]).map_err(storage)?;
        while let Some(row) = rows.next().map_err(storage)? {
            let item = decode_item(&row.get::<_, String>(0).map_err(storage)?)?;
            let (pk, sk) = encode_key(&stored.key, &item)
                .ok_or_else(|| TableError::internal("a stored item lacks its key"))?;
            tx.execute(
                "INSERT INTO items (pk, sk, item) VALUES (?1, ?2, ?3)",
                params![pk, sk, encode(&item)?],
            )
            .map_err(storage)?;
            for index in &stored.indexes {
                insert_entry(tx, index, &item, &pk, &sk)?;
            }
        }
    }
    tx.execute_batch("DROP TABLE items_v1;").map_err(storage)
}

fn stored_schema(conn: &Connection) -> Result<Option<TableSchema>, TableError> {
    let text: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(storage)?;
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| TableError::internal_from("the stored schema does not decode", e))
    })
    .transpose()
}

/// Brings the file in line with `schema`: the same name and key are
/// required; an index added is backfilled from every item, one removed is
/// dropped, a changed TTL attribute is recorded.
fn reconcile(tx: &Connection, schema: &TableSchema, path: &str) -> Result<(), TableError> {
    let stored =
        stored_schema(tx)?.ok_or_else(|| TableError::internal("the table file has no schema"))?;
    if stored == *schema {
        return Ok(());
    }
    if stored.name != schema.name || stored.key != schema.key {
        return Err(TableError::Misconfigured {
            message: format!(
                "{path} holds table {} with key {:?}, not {} with key {:?}; open it with its own schema",
                stored.name, stored.key, schema.name, schema.key
            ),
        });
    }
    for index in &stored.indexes {
        if !schema.indexes.contains(index) {
            tx.execute(
                "DELETE FROM index_entries WHERE idx = ?1",
                params![index.name],
            )
            .map_err(storage)?;
        }
    }
    let added: Vec<&IndexDefinition> = schema
        .indexes
        .iter()
        .filter(|i| !stored.indexes.contains(i))
        .collect();
    if !added.is_empty() {
        let mut read = tx
            .prepare("SELECT pk, sk, item FROM items")
            .map_err(storage)?;
        let mut rows = read.query([]).map_err(storage)?;
        let first_table = Namespace::default();
        while let Some(row) = rows.next().map_err(storage)? {
            let (pk, sk): (String, String) =
                (row.get(0).map_err(storage)?, row.get(1).map_err(storage)?);
            if !first_table.owns(&pk) {
                continue; // another table's item: its indexes are its own
            }
            let item = decode_item(&row.get::<_, String>(2).map_err(storage)?)?;
            for index in &added {
                insert_entry(tx, index, &item, &pk, &sk)?;
            }
        }
    }
    tx.execute(
        "UPDATE meta SET value = ?1 WHERE key = 'schema'",
        params![encode(schema)?],
    )
    .map_err(storage)?;
    Ok(())
}

fn insert_entry(
    tx: &Connection,
    index: &IndexDefinition,
    item: &crate::item::Item,
    pk: &str,
    sk: &str,
) -> Result<(), TableError> {
    if let Some((idx, ipk, isk)) = index_entry(index, item) {
        tx.execute(
            "INSERT INTO index_entries (idx, ipk, isk, pk, sk) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![idx, ipk, isk, pk, sk],
        )
        .map_err(storage)?;
    }
    Ok(())
}
