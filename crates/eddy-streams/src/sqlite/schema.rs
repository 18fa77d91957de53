//! The SQLite record layout and its migrations. See `DESIGN-sqlite.md`.

use rusqlite::Connection;

use crate::StreamError;

/// The schema version this code writes (`PRAGMA user_version`).
const VERSION: i64 = 9;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS streams (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    path            TEXT    NOT NULL UNIQUE,
    content_type    TEXT    NOT NULL,
    ttl_secs        INTEGER,
    expires_at_ms   INTEGER,
    created_closed  INTEGER NOT NULL,
    closed          INTEGER NOT NULL,
    count           INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    last_stream_seq TEXT,
    closed_by_id    TEXT,
    closed_by_epoch INTEGER,
    closed_by_seq   INTEGER,
    accessed_ms     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    stream_id INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    data      BLOB    NOT NULL,
    PRIMARY KEY (stream_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS producers (
    stream_id INTEGER NOT NULL,
    producer  TEXT    NOT NULL,
    epoch     INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (stream_id, producer)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tombstones (
    path       TEXT    PRIMARY KEY,
    deleted_ms INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Version 2 adds forks: where a stream branched, how many forks branch
/// from it, and whether it was deleted while forks still use it.
const FORKS: &str = "
ALTER TABLE streams ADD COLUMN fork_source   TEXT;
ALTER TABLE streams ADD COLUMN fork_position INTEGER;
ALTER TABLE streams ADD COLUMN fork_sub      INTEGER;
ALTER TABLE streams ADD COLUMN forks         INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN soft_deleted  INTEGER NOT NULL DEFAULT 0;
";

/// Version 3 finds forks by their source instead of counting them: the
/// count drifted from the forks that actually exist when forks expired.
const FORKS_BY_SOURCE: &str = "
CREATE INDEX streams_by_fork_source ON streams (fork_source) WHERE fork_source IS NOT NULL;
ALTER TABLE streams DROP COLUMN forks;
";

/// Version 4 adds the checkpoints of projections that commit in the
/// store's own transactions (`Commit::transaction`): one row per binding,
/// moved by compare-and-set on its save counter.
const PROJECTION_CHECKPOINTS: &str = "
CREATE TABLE projection_checkpoints (
    projection TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    params     TEXT    NOT NULL,
    saves      INTEGER NOT NULL,
    checkpoint TEXT,
    PRIMARY KEY (projection, version, params)
) WITHOUT ROWID;
";

/// Version 5 adds the durable wake-up marks of attached projections:
/// one row per marked binding, written in the transaction of each commit
/// that touches it, deleted by the binding once it caught up.
const WAKE_MARKS: &str = "
CREATE TABLE wake_marks (
    projection TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    params     TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    commits    INTEGER NOT NULL,
    attempts   INTEGER NOT NULL,
    due_ms     INTEGER NOT NULL,
    PRIMARY KEY (projection, version, params)
) WITHOUT ROWID;
";

/// Version 6 adds stream incarnations: each stream's own, its fork
/// source's, and a deleted stream's in its tombstone. Streams and
/// tombstones from before keep incarnation 0, so the offsets they handed
/// out stay valid; every stream created later gets a new one.
const INCARNATIONS: &str = "
ALTER TABLE streams ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN fork_incarnation INTEGER;
ALTER TABLE tombstones ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
";

/// Version 7 adds the shared documents (`Documents`): one row per key,
/// replaced or deleted only by compare-and-set on its version.
const DOCUMENTS: &str = "
CREATE TABLE documents (
    key     TEXT    NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL,
    body    BLOB    NOT NULL
) WITHOUT ROWID;
";

/// Version 8 keeps when each producer last had a write accepted (unix
/// ms), indexed so that expired producers are found without reading the
/// others, and each stream's producer count in its row, so that the cap
/// costs no count of a million rows. Producers from before count as
/// written at the upgrade (`{now}`): each keeps a whole expiry window.
const PRODUCER_LAST_WRITE: &str = "
ALTER TABLE producers ADD COLUMN last_ms INTEGER NOT NULL DEFAULT 0;
UPDATE producers SET last_ms = {now};
CREATE INDEX producers_by_last_write ON producers (last_ms);
ALTER TABLE streams ADD COLUMN producer_count INTEGER NOT NULL DEFAULT 0;
UPDATE streams SET producer_count =
    (SELECT count(*) FROM producers WHERE producers.stream_id = streams.id);
";

/// Version 9 adds retention: each stream's policy with where its kept
/// messages start (JSON, NULL for a stream without a policy), and when the
/// sweep should next drop some of its messages, indexed so that the
/// sweep finds the streams due without reading the others.
const RETENTION: &str = "
ALTER TABLE streams ADD COLUMN retention TEXT;
ALTER TABLE streams ADD COLUMN retention_due_ms INTEGER;
CREATE INDEX streams_by_retention_due ON streams (retention_due_ms)
    WHERE retention_due_ms IS NOT NULL;
";

/// Creates the tables or upgrades an older layout, each step in one
/// transaction, or refuses a file written by a newer build. `now_ms` is
/// the upgrade's time, for what it stamps.
pub(super) fn migrate(conn: &Connection, now_ms: i64) -> Result<(), StreamError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let step = |sql: &str, to: i64| -> Result<(), StreamError> {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {sql} PRAGMA user_version = {to}; COMMIT;"
        ))
        .map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            StreamError::from(e)
        })
    };
    if version > VERSION {
        return Err(StreamError::internal(format!(
            "the database has schema version {version}; this build reads version {VERSION}"
        )));
    }
    let steps = [
        (SCHEMA, 1),
        (FORKS, 2),
        (FORKS_BY_SOURCE, 3),
        (PROJECTION_CHECKPOINTS, 4),
        (WAKE_MARKS, 5),
        (INCARNATIONS, 6),
        (DOCUMENTS, 7),
        (PRODUCER_LAST_WRITE, 8),
        (RETENTION, 9),
    ];
    for (sql, to) in steps {
        if version < to {
            step(&sql.replace("{now}", &now_ms.to_string()), to)?;
        }
    }
    Ok(())
}
