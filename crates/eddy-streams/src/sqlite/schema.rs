//! The SQLite record layout and the row ↔ head mapping.

use std::time::{Duration, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::unix_ms;
use crate::fork::ForkOrigin;
use crate::rules::{Head, ProducerState};
use crate::{Expiry, ProducerPosition, StreamConfig, StreamError};

/// The schema version this code writes (`PRAGMA user_version`).
const VERSION: i64 = 2;

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

/// Creates the tables or upgrades an older layout, each step in one
/// transaction, or refuses a file written by a newer build.
pub(super) fn migrate(conn: &Connection) -> Result<(), StreamError> {
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
    match version {
        0 => {
            step(SCHEMA, 1)?;
            step(FORKS, 2)
        }
        1 => step(FORKS, 2),
        VERSION => Ok(()),
        other => Err(StreamError::Storage(format!(
            "the database has schema version {other}; this build reads version {VERSION}"
        ))),
    }
}

/// A stream row: its id, head and last access.
pub(super) struct StreamRow {
    pub id: i64,
    pub head: Head,
    pub accessed_ms: i64,
    /// Where the stream was forked from.
    pub origin: Option<ForkOrigin>,
    /// How many forks branch from it.
    pub forks: i64,
    /// Deleted while forks still use it.
    pub soft_deleted: bool,
}

const SELECT_STREAM: &str =
    "SELECT id, content_type, ttl_secs, expires_at_ms, created_closed, closed,
    count, bytes, last_stream_seq, closed_by_id, closed_by_epoch, closed_by_seq, accessed_ms,
    fork_source, fork_position, fork_sub, forks, soft_deleted
    FROM streams WHERE path = ?1";

/// Loads the stream row at `path`, if any.
pub(super) fn load(conn: &Connection, path: &str) -> Result<Option<StreamRow>, StreamError> {
    let mut stmt = conn.prepare_cached(SELECT_STREAM)?;
    let row = stmt
        .query_row([path], |r| {
            let ttl: Option<i64> = r.get(2)?;
            let expires_at: Option<i64> = r.get(3)?;
            let expiry = match (ttl, expires_at) {
                (Some(secs), _) => Expiry::Ttl(u64::try_from(secs).unwrap_or(0)),
                (None, Some(ms)) => Expiry::At(from_unix_ms(ms)),
                (None, None) => Expiry::Never,
            };
            let closed_by_id: Option<String> = r.get(9)?;
            let closed_by = match closed_by_id {
                Some(id) => Some(ProducerPosition::new(
                    id,
                    r.get::<_, i64>(10)? as u64,
                    r.get::<_, i64>(11)? as u64,
                )),
                None => None,
            };
            Ok(StreamRow {
                id: r.get(0)?,
                head: Head {
                    config: StreamConfig {
                        content_type: r.get(1)?,
                        expiry,
                        closed: r.get(4)?,
                    },
                    closed: r.get(5)?,
                    count: r.get::<_, i64>(6)? as u64,
                    bytes: r.get::<_, i64>(7)? as u64,
                    last_stream_seq: r.get(8)?,
                    closed_by,
                },
                accessed_ms: r.get(12)?,
                origin: match r.get::<_, Option<String>>(13)? {
                    Some(source) => Some(ForkOrigin {
                        source,
                        position: r.get::<_, i64>(14)? as u64,
                        sub_offset: r.get::<_, i64>(15)? as u64,
                    }),
                    None => None,
                },
                forks: r.get(16)?,
                soft_deleted: r.get(17)?,
            })
        })
        .optional()?;
    Ok(row)
}

/// Whether `path` names a deleted stream.
pub(super) fn is_tombstoned(conn: &Connection, path: &str) -> Result<bool, StreamError> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM tombstones WHERE path = ?1")?;
    Ok(stmt.exists([path])?)
}

/// Inserts a new stream row and returns its id.
pub(super) fn insert(
    conn: &Connection,
    path: &str,
    head: &Head,
    now_ms: i64,
) -> Result<i64, StreamError> {
    let (ttl, expires_at) = match head.config.expiry {
        Expiry::Never => (None, None),
        Expiry::Ttl(secs) => (Some(i64::try_from(secs).unwrap_or(i64::MAX)), None),
        Expiry::At(at) => (None, Some(unix_ms(at))),
    };
    conn.prepare_cached("DELETE FROM tombstones WHERE path = ?1")?
        .execute([path])?;
    conn.prepare_cached(
        "INSERT INTO streams (path, content_type, ttl_secs, expires_at_ms, created_closed, closed,
            count, bytes, accessed_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, 0, ?6)",
    )?
    .execute(params![
        path,
        head.config.content_type,
        ttl,
        expires_at,
        head.config.closed,
        now_ms
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Writes the mutable part of a head back to its row.
pub(super) fn update(
    conn: &Connection,
    id: i64,
    head: &Head,
    now_ms: i64,
) -> Result<(), StreamError> {
    let closer = head.closed_by.as_ref();
    conn.prepare_cached(
        "UPDATE streams SET closed = ?2, count = ?3, bytes = ?4, last_stream_seq = ?5,
            closed_by_id = ?6, closed_by_epoch = ?7, closed_by_seq = ?8, accessed_ms = ?9
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        head.closed,
        head.count as i64,
        head.bytes as i64,
        head.last_stream_seq,
        closer.map(|p| p.id.as_str()),
        closer.map(|p| p.epoch as i64),
        closer.map(|p| p.seq as i64),
        now_ms
    ])?;
    Ok(())
}

/// Removes a stream and everything it holds; leaves a tombstone when asked.
pub(super) fn remove(
    conn: &Connection,
    id: i64,
    path: &str,
    tombstone: bool,
    now_ms: i64,
) -> Result<(), StreamError> {
    conn.prepare_cached("DELETE FROM messages WHERE stream_id = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM producers WHERE stream_id = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM streams WHERE id = ?1")?
        .execute([id])?;
    if tombstone {
        conn.prepare_cached(
            "INSERT OR REPLACE INTO tombstones (path, deleted_ms) VALUES (?1, ?2)",
        )?
        .execute(params![path, now_ms])?;
    }
    Ok(())
}

/// Stores messages from position `first` on.
pub(super) fn insert_messages(
    conn: &Connection,
    id: i64,
    first: u64,
    messages: &[bytes::Bytes],
) -> Result<(), StreamError> {
    // Whole groups go in one multi-row statement: far fewer statement
    // executions for batched appends; the rest go one by one.
    let mut groups = messages.chunks_exact(ROWS_PER_INSERT);
    let mut seq = first as i64;
    if groups.len() > 0 {
        let mut stmt = conn.prepare_cached(&INSERT_GROUP)?;
        for group in groups.by_ref() {
            for (i, message) in group.iter().enumerate() {
                stmt.raw_bind_parameter(3 * i + 1, id)?;
                stmt.raw_bind_parameter(3 * i + 2, seq + i as i64)?;
                stmt.raw_bind_parameter(3 * i + 3, message.as_ref())?;
            }
            stmt.raw_execute()?;
            seq += ROWS_PER_INSERT as i64;
        }
    }
    let mut stmt =
        conn.prepare_cached("INSERT INTO messages (stream_id, seq, data) VALUES (?1, ?2, ?3)")?;
    for message in groups.remainder() {
        stmt.execute(params![id, seq, message.as_ref()])?;
        seq += 1;
    }
    Ok(())
}

/// Rows per multi-row insert.
const ROWS_PER_INSERT: usize = 32;

/// `INSERT … VALUES (?, ?, ?), …` for [`ROWS_PER_INSERT`] rows.
static INSERT_GROUP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let rows = vec!["(?, ?, ?)"; ROWS_PER_INSERT].join(", ");
    format!("INSERT INTO messages (stream_id, seq, data) VALUES {rows}")
});

/// A producer's stored state on a stream.
pub(super) fn producer(
    conn: &Connection,
    id: i64,
    producer: &str,
) -> Result<Option<ProducerState>, StreamError> {
    let mut stmt = conn.prepare_cached(
        "SELECT epoch, seq FROM producers WHERE stream_id = ?1 AND producer = ?2",
    )?;
    Ok(stmt
        .query_row(params![id, producer], |r| {
            Ok(ProducerState {
                epoch: r.get::<_, i64>(0)? as u64,
                seq: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()?)
}

/// Stores a producer's state.
pub(super) fn save_producer(
    conn: &Connection,
    id: i64,
    producer: &str,
    state: ProducerState,
) -> Result<(), StreamError> {
    conn.prepare_cached(
        "INSERT INTO producers (stream_id, producer, epoch, seq) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (stream_id, producer) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq",
    )?
    .execute(params![id, producer, state.epoch as i64, state.seq as i64])?;
    Ok(())
}

/// Reads messages from position `start`, stopping past `max_bytes` (at
/// least one message).
pub(super) fn read_messages(
    conn: &Connection,
    id: i64,
    start: u64,
    max_bytes: usize,
) -> Result<Vec<bytes::Bytes>, StreamError> {
    let mut stmt = conn.prepare_cached(
        "SELECT data FROM messages WHERE stream_id = ?1 AND seq >= ?2 ORDER BY seq",
    )?;
    let mut rows = stmt.query(params![id, start as i64])?;
    let mut total = 0usize;
    let mut messages = Vec::new();
    while let Some(row) = rows.next()? {
        let data: Vec<u8> = row.get(0)?;
        total += data.len();
        if !messages.is_empty() && total > max_bytes {
            break;
        }
        messages.push(bytes::Bytes::from(data));
    }
    Ok(messages)
}

/// Every live stream row whose path starts with `prefix`.
pub(super) fn list(
    conn: &Connection,
    prefix: &str,
) -> Result<Vec<(String, StreamRow)>, StreamError> {
    let mut stmt = conn
        .prepare("SELECT path FROM streams WHERE substr(path, 1, length(?1)) = ?1 ORDER BY path")?;
    let paths: Vec<String> = stmt
        .query_map([prefix], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::with_capacity(paths.len());
    for path in paths {
        if let Some(row) = load(conn, &path)? {
            rows.push((path, row));
        }
    }
    Ok(rows)
}

fn from_unix_ms(ms: i64) -> std::time::SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// Records where a new fork branched.
pub(super) fn set_origin(
    conn: &Connection,
    id: i64,
    origin: &ForkOrigin,
) -> Result<(), StreamError> {
    conn.prepare_cached(
        "UPDATE streams SET fork_source = ?2, fork_position = ?3, fork_sub = ?4 WHERE id = ?1",
    )?
    .execute(params![
        id,
        origin.source,
        origin.position as i64,
        origin.sub_offset as i64
    ])?;
    Ok(())
}

/// Adds `delta` to the number of forks that branch from a stream.
pub(super) fn add_forks(conn: &Connection, id: i64, delta: i64) -> Result<(), StreamError> {
    conn.prepare_cached("UPDATE streams SET forks = max(forks + ?2, 0) WHERE id = ?1")?
        .execute(params![id, delta])?;
    Ok(())
}

/// Marks a stream deleted while forks still use it.
pub(super) fn soft_delete(conn: &Connection, id: i64) -> Result<(), StreamError> {
    conn.prepare_cached("UPDATE streams SET soft_deleted = 1 WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Copies the first `count` messages of stream `from` into stream `to`.
pub(super) fn copy_messages(
    conn: &Connection,
    from: i64,
    to: i64,
    count: u64,
) -> Result<(), StreamError> {
    conn.prepare_cached(
        "INSERT INTO messages (stream_id, seq, data)
         SELECT ?2, seq, data FROM messages WHERE stream_id = ?1 AND seq < ?3",
    )?
    .execute(params![from, to, count as i64])?;
    Ok(())
}

/// The message at `position` of a stream.
pub(super) fn message_at(
    conn: &Connection,
    id: i64,
    position: u64,
) -> Result<Option<bytes::Bytes>, StreamError> {
    let mut stmt =
        conn.prepare_cached("SELECT data FROM messages WHERE stream_id = ?1 AND seq = ?2")?;
    Ok(stmt
        .query_row(params![id, position as i64], |r| r.get::<_, Vec<u8>>(0))
        .optional()?
        .map(bytes::Bytes::from))
}

/// The number of messages and bytes a stream holds.
pub(super) fn size(conn: &Connection, id: i64) -> Result<(u64, u64), StreamError> {
    let mut stmt = conn.prepare_cached(
        "SELECT count(*), coalesce(sum(length(data)), 0) FROM messages WHERE stream_id = ?1",
    )?;
    Ok(stmt.query_row([id], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
    })?)
}
