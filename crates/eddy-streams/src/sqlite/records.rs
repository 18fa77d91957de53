//! The record operations on SQLite rows (see `DESIGN-sqlite.md` for the
//! layout). The writer runs them inside its savepoints, the readers inside
//! read transactions; each answers at once, so its future is ready.

use std::collections::HashMap;
use std::future::ready;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::heads::Heads;
use crate::cache::{Cache, Change};
use crate::fork::ForkOrigin;
use crate::record::{
    expiry_columns, expiry_from_columns, Op, RecordReader, Records, Stored, StreamRecord, Sweepable,
};
use crate::retention::{from_column, to_column};
use crate::rules::{Head, ProducerState};
use crate::touches::Touches;
use crate::{ProducerPosition, StreamConfig, StreamError};

/// Record access through one connection. A stream's key is its row id
/// (`AUTOINCREMENT`, so never reused). Loaded records include the TTL
/// touches not stored yet. In the writer it also logs its record writes
/// for the [cache](super::cache), which learns them after the commit; a
/// reader takes the messages the cache holds from it.
pub(super) struct SqliteRecords<'c> {
    conn: &'c Connection,
    touches: &'c Touches,
    /// Where a reader finds recent messages without reading their rows.
    cache: Option<&'c Cache>,
    /// The writer's copy of the records, kept in step with its writes.
    heads: Option<&'c mut Heads>,
    /// The writes so far, when logging.
    log: Option<Vec<Change>>,
    /// The path of each stream loaded or inserted, for the log.
    paths: HashMap<i64, String>,
    /// Whether a statement that writes has run (or begun to).
    wrote: bool,
}

impl<'c> SqliteRecords<'c> {
    /// Records for reading.
    pub fn new(conn: &'c Connection, touches: &'c Touches) -> Self {
        SqliteRecords {
            conn,
            touches,
            cache: None,
            heads: None,
            log: None,
            paths: HashMap::new(),
            wrote: false,
        }
    }

    /// Records for reading that take recent messages from `cache`.
    pub fn cached(conn: &'c Connection, touches: &'c Touches, cache: &'c Cache) -> Self {
        SqliteRecords {
            cache: Some(cache),
            ..SqliteRecords::new(conn, touches)
        }
    }

    /// Records for writing, logging each write.
    pub fn logging(conn: &'c Connection, touches: &'c Touches) -> Self {
        SqliteRecords {
            log: Some(Vec::new()),
            ..SqliteRecords::new(conn, touches)
        }
    }

    /// These records, finding records in `heads` and keeping it in step
    /// with every write.
    pub fn with_heads(self, heads: &'c mut Heads) -> Self {
        SqliteRecords {
            heads: Some(heads),
            ..self
        }
    }

    /// The connection, for statements on tables other than the streams'.
    pub fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// Whether a statement that writes has run, or begun to: a write the
    /// writer's copy took instead of the row does not count.
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    /// The writes logged so far.
    pub fn take_log(&mut self) -> Vec<Change> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn log(&mut self, change: impl FnOnce(&HashMap<i64, String>) -> Change) {
        if let Some(log) = &mut self.log {
            log.push(change(&self.paths));
        }
    }

    /// Logs a write to stream `key`: as `change` when its path is known,
    /// else as its removal (the cache then forgets it).
    fn log_write(&mut self, key: i64, change: impl FnOnce(String) -> Change) {
        self.log(|paths| match paths.get(&key) {
            Some(path) => change(path.clone()),
            None => Change::Removed { key },
        });
    }

    fn load(&mut self, path: &str) -> Result<Option<Stored<i64>>, StreamError> {
        if let Some((key, mut record)) = self.heads.as_ref().and_then(|heads| heads.get(path)) {
            record.accessed_ms = self.touches.accessed(key, record.accessed_ms);
            self.paths.insert(key, path.to_owned());
            return Ok(Some(Stored { key, record }));
        }
        let sql = format!("SELECT {STREAM_COLUMNS} FROM streams WHERE path = ?1");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt.query_row([path], |r| self.record(r)).optional()?;
        if let Some((_, key, record)) = &row {
            self.paths.insert(*key, path.to_owned());
            if let Some(heads) = &mut self.heads {
                heads.keep(path, *key, record.clone());
            }
        }
        Ok(row.map(|(_, key, record)| Stored { key, record }))
    }

    fn list(&mut self, prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        if let Some(heads) = &mut self.heads {
            self.wrote = true;
            heads.flush(self.conn)?;
        }
        let sql = format!(
            "SELECT {STREAM_COLUMNS} FROM streams
             WHERE substr(path, 1, length(?1)) = ?1 ORDER BY path"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map([prefix], |r| {
            self.record(r).map(|(path, _, record)| (path, record))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The path, key and record in a row selected with [`STREAM_COLUMNS`].
    fn record(&self, r: &Row<'_>) -> rusqlite::Result<(String, i64, StreamRecord)> {
        let key = r.get(0)?;
        let mut record = record(r)?;
        record.accessed_ms = self.touches.accessed(key, record.accessed_ms);
        Ok((r.get(1)?, key, record))
    }
}

impl RecordReader for SqliteRecords<'_> {
    type Key = i64;

    fn load(&mut self, path: &str) -> impl Op<Option<Stored<i64>>> {
        ready(SqliteRecords::load(self, path))
    }

    fn tombstoned(&mut self, path: &str) -> impl Op<Option<u64>> {
        ready(tombstoned(self.conn, path))
    }

    fn forks_of(&mut self, path: &str) -> impl Op<Vec<String>> {
        ready(forks_of(self.conn, path))
    }

    fn producers(&mut self, key: &i64) -> impl Op<Vec<(String, ProducerState)>> {
        ready(producer_states(self.conn, *key))
    }

    fn producer(&mut self, key: &i64, producer: &str) -> impl Op<Option<ProducerState>> {
        ready(producer_state(self.conn, *key, producer))
    }

    fn producer_count(&mut self, key: &i64) -> impl Op<u64> {
        ready(producer_count(self.conn, *key))
    }

    fn messages(&mut self, key: &i64, range: Range<u64>, max_bytes: usize) -> impl Op<Vec<Bytes>> {
        let cached = self
            .cache
            .and_then(|cache| cache.messages(*key, range.clone(), max_bytes));
        ready(cached.map_or_else(|| messages(self.conn, *key, range, max_bytes), Ok))
    }

    fn messages_at(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max_bytes: usize,
    ) -> impl Op<Vec<(u64, Bytes)>> {
        let start = range.start;
        let cached = self
            .cache
            .and_then(|cache| cache.messages(*key, range.clone(), max_bytes))
            .map(|messages| (start..).zip(messages).collect());
        ready(cached.map_or_else(
            || messages_at(self.conn, *key, range, max_bytes, Order::Ascending),
            Ok,
        ))
    }

    fn messages_before(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> impl Op<Vec<(u64, Bytes)>> {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        ready(
            messages_at(self.conn, *key, range, max_bytes, Order::LastFirst(max)).map(
                |mut last| {
                    last.reverse();
                    last
                },
            ),
        )
    }

    fn message_sizes(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max_bytes: u64,
    ) -> impl Op<Vec<(u64, u64)>> {
        ready(message_sizes(self.conn, *key, range, max_bytes))
    }

    fn list(&mut self, prefix: &str) -> impl Op<Vec<(String, StreamRecord)>> {
        ready(SqliteRecords::list(self, prefix))
    }

    fn sweepable(&mut self, now_ms: i64, below: u64, max: usize) -> impl Op<Sweepable> {
        ready(sweepable(self.conn, now_ms, below, max))
    }
}

impl Records for SqliteRecords<'_> {
    fn insert(&mut self, path: &str, record: &StreamRecord) -> impl Op<i64> {
        self.wrote = true;
        let inserted = insert(self.conn, path, record);
        if let Some(heads) = &mut self.heads {
            // The new row is kept once its record is written (`update`).
            heads.forget_path(path);
        }
        if let Ok(key) = inserted {
            self.paths.insert(key, path.to_owned());
            self.log_write(key, |path| Change::Record {
                key,
                path,
                record: record.clone(),
            });
        }
        ready(inserted)
    }

    fn update(&mut self, key: &i64, record: StreamRecord) -> impl Op<()> {
        let key = *key;
        // The writer's copy takes the record, and the group writes the row
        // once (see `heads`); without a copy, the row is written now.
        let updated = match (&mut self.heads, self.paths.get(&key)) {
            (Some(heads), Some(path)) => {
                heads.write(path, key, record.clone());
                Ok(())
            }
            (heads, _) => {
                if let Some(heads) = heads {
                    heads.forget(key);
                }
                self.wrote = true;
                update(self.conn, key, &record)
            }
        };
        self.log_write(key, |path| Change::Record { key, path, record });
        ready(updated)
    }

    fn insert_messages(&mut self, key: &i64, first: u64, messages: Vec<Bytes>) -> impl Op<()> {
        let key = *key;
        self.wrote = true;
        let inserted = insert_messages(self.conn, key, first, &messages);
        self.log_write(key, |path| Change::Messages {
            key,
            path,
            first,
            messages,
        });
        ready(inserted)
    }

    fn copy_prefix(&mut self, from: &i64, to: &i64, count: u64) -> impl Op<u64> {
        self.wrote = true;
        ready(copy_prefix(self.conn, *from, *to, count))
    }

    fn save_producer(&mut self, key: &i64, producer: &str, state: ProducerState) -> impl Op<()> {
        self.wrote = true;
        ready(save_producer(self.conn, *key, producer, state))
    }

    fn remove_producer(&mut self, key: &i64, producer: &str) -> impl Op<bool> {
        self.wrote = true;
        ready(remove_producer(self.conn, *key, producer))
    }

    fn drop_expired_producers(&mut self, key: &i64, cutoff_ms: i64, max: usize) -> impl Op<u64> {
        let dropped = drop_expired_producers(self.conn, Some(*key), cutoff_ms, max);
        // Dropping none wrote nothing: a refusal after it is clean.
        self.wrote |= !matches!(dropped, Ok(0));
        ready(dropped)
    }

    fn sweep_expired_producers(&mut self, cutoff_ms: i64, max: usize) -> impl Op<u64> {
        let dropped = drop_expired_producers(self.conn, None, cutoff_ms, max);
        self.wrote |= !matches!(dropped, Ok(0));
        ready(dropped)
    }

    fn drop_messages(&mut self, key: &i64, range: Range<u64>) -> impl Op<()> {
        self.wrote = true;
        ready(drop_messages(self.conn, *key, range))
    }

    fn drop_positions(&mut self, key: &i64, positions: Vec<u64>) -> impl Op<u64> {
        let key = *key;
        self.wrote = true;
        self.log(|_| Change::Compacted { key });
        ready(drop_positions(self.conn, key, &positions))
    }

    fn remove(&mut self, key: &i64, _path: &str) -> impl Op<()> {
        let key = *key;
        self.wrote = true;
        self.log(|_| Change::Removed { key });
        if let Some(heads) = &mut self.heads {
            heads.forget(key);
        }
        ready(remove(self.conn, key))
    }

    fn slide(&mut self, key: &i64, at_ms: i64) -> impl Op<()> {
        let key = *key;
        self.wrote = true;
        self.log(|_| Change::Slide { key, at_ms });
        if let Some(heads) = &mut self.heads {
            heads.slide(key, at_ms);
        }
        ready(slide(self.conn, key, at_ms))
    }

    fn tombstone(&mut self, path: &str, incarnation: u64, now_ms: i64) -> impl Op<()> {
        self.wrote = true;
        ready(tombstone(self.conn, path, incarnation, now_ms))
    }

    fn drop_tombstone(&mut self, path: &str, below: u64) -> impl Op<bool> {
        self.wrote = true;
        ready(drop_tombstone(self.conn, path, below))
    }
}

const STREAM_COLUMNS: &str = "id, path, content_type, ttl_secs, expires_at_ms, created_closed,
    closed, count, bytes, last_stream_seq, closed_by_id, closed_by_epoch, closed_by_seq,
    accessed_ms, fork_source, fork_position, fork_sub, soft_deleted, incarnation,
    fork_incarnation, retention";

/// The stored record in a row selected with [`STREAM_COLUMNS`].
fn record(r: &Row<'_>) -> rusqlite::Result<StreamRecord> {
    let expiry = expiry_from_columns(r.get(3)?, r.get(4)?);
    let closed_by = match r.get::<_, Option<String>>(10)? {
        Some(id) => Some(ProducerPosition::new(
            id,
            r.get::<_, i64>(11)? as u64,
            r.get::<_, i64>(12)? as u64,
        )),
        None => None,
    };
    let origin = match r.get::<_, Option<String>>(14)? {
        Some(source) => Some(ForkOrigin {
            source,
            position: r.get::<_, i64>(15)? as u64,
            sub_offset: r.get::<_, i64>(16)? as u64,
            incarnation: r.get::<_, Option<i64>>(19)?.unwrap_or(0) as u64,
        }),
        None => None,
    };
    let column: Option<String> = r.get(20)?;
    let (retention, compaction, retained) = from_column(column.as_deref()).map_err(|reason| {
        rusqlite::Error::FromSqlConversionFailure(20, rusqlite::types::Type::Text, reason.into())
    })?;
    Ok(StreamRecord {
        head: Head {
            incarnation: r.get::<_, i64>(18)? as u64,
            config: Arc::new(StreamConfig {
                content_type: r.get(2)?,
                expiry,
                closed: r.get(5)?,
                retention,
                compaction,
            }),
            closed: r.get(6)?,
            count: r.get::<_, i64>(7)? as u64,
            bytes: r.get::<_, i64>(8)? as u64,
            last_stream_seq: r.get(9)?,
            closed_by,
            retained,
        },
        accessed_ms: r.get(13)?,
        origin,
        soft_deleted: r.get(17)?,
    })
}

/// What may be swept (see [`RecordReader::sweepable`]). Run on a reader:
/// both scans read whole tables, and stall no writer there.
fn sweepable(
    conn: &Connection,
    now_ms: i64,
    below: u64,
    max: usize,
) -> Result<Sweepable, StreamError> {
    let below = i64::try_from(below).unwrap_or(i64::MAX);
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT path FROM streams
         WHERE soft_deleted = 0 AND incarnation < ?2
           AND ((ttl_secs IS NOT NULL AND accessed_ms + ttl_secs * 1000 <= ?1)
                OR (expires_at_ms IS NOT NULL AND expires_at_ms <= ?1))
         LIMIT ?3",
    )?;
    let streams = stmt
        .query_map(rusqlite::params![now_ms, below, max], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut stmt =
        conn.prepare_cached("SELECT path FROM tombstones WHERE incarnation < ?1 LIMIT ?2")?;
    let tombstones = stmt
        .query_map(rusqlite::params![below, max], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT path FROM streams WHERE retention_due_ms <= ?1 ORDER BY retention_due_ms LIMIT ?2",
    )?;
    let retained = stmt
        .query_map(rusqlite::params![now_ms, max], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(Sweepable {
        streams,
        tombstones,
        retained,
    })
}

fn drop_tombstone(conn: &Connection, path: &str, below: u64) -> Result<bool, StreamError> {
    let below = i64::try_from(below).unwrap_or(i64::MAX);
    let mut stmt =
        conn.prepare_cached("DELETE FROM tombstones WHERE path = ?1 AND incarnation < ?2")?;
    Ok(stmt.execute(rusqlite::params![path, below])? > 0)
}

fn tombstoned(conn: &Connection, path: &str) -> Result<Option<u64>, StreamError> {
    let mut stmt = conn.prepare_cached("SELECT incarnation FROM tombstones WHERE path = ?1")?;
    let incarnation = stmt.query_row([path], |r| r.get::<_, i64>(0)).optional()?;
    Ok(incarnation.map(|i| i as u64))
}

fn forks_of(conn: &Connection, path: &str) -> Result<Vec<String>, StreamError> {
    let mut stmt = conn.prepare_cached("SELECT path FROM streams WHERE fork_source = ?1")?;
    let paths = stmt.query_map([path], |r| r.get(0))?;
    Ok(paths.collect::<Result<_, _>>()?)
}

fn insert(conn: &Connection, path: &str, record: &StreamRecord) -> Result<i64, StreamError> {
    let config = &record.head.config;
    let (ttl, expires_at) = expiry_columns(config.expiry);
    let origin = record.origin.as_ref();
    conn.prepare_cached("DELETE FROM tombstones WHERE path = ?1")?
        .execute([path])?;
    conn.prepare_cached(
        "INSERT INTO streams (path, content_type, ttl_secs, expires_at_ms, created_closed, closed,
            count, bytes, accessed_ms, fork_source, fork_position, fork_sub, soft_deleted,
            incarnation, fork_incarnation)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, 0, ?6, ?7, ?8, ?9, 0, ?10, ?11)",
    )?
    .execute(params![
        path,
        config.content_type,
        ttl,
        expires_at,
        config.closed,
        record.accessed_ms,
        origin.map(|o| o.source.as_str()),
        origin.map(|o| o.position as i64),
        origin.map(|o| o.sub_offset as i64),
        record.head.incarnation as i64,
        origin.map(|o| o.incarnation as i64),
    ])?;
    let id = conn.last_insert_rowid();
    update(conn, id, record)?;
    Ok(id)
}

pub(super) fn update(conn: &Connection, id: i64, record: &StreamRecord) -> Result<(), StreamError> {
    let head = &record.head;
    let closer = head.closed_by.as_ref();
    conn.prepare_cached(
        "UPDATE streams SET closed = ?2, count = ?3, bytes = ?4, last_stream_seq = ?5,
            closed_by_id = ?6, closed_by_epoch = ?7, closed_by_seq = ?8, accessed_ms = ?9,
            soft_deleted = ?10, retention = ?11, retention_due_ms = ?12
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
        record.accessed_ms,
        record.soft_deleted,
        to_column(&head.config, &head.retained),
        record.retention_due_ms(),
    ])?;
    Ok(())
}

fn drop_messages(conn: &Connection, id: i64, range: Range<u64>) -> Result<(), StreamError> {
    let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.prepare_cached("DELETE FROM messages WHERE stream_id = ?1 AND seq >= ?2 AND seq < ?3")?
        .execute(params![id, bound(range.start), bound(range.end)])?;
    Ok(())
}

/// Deletes the messages at `positions`; the bytes of those that were there.
fn drop_positions(conn: &Connection, id: i64, positions: &[u64]) -> Result<u64, StreamError> {
    let mut stmt = conn.prepare_cached(
        "DELETE FROM messages WHERE stream_id = ?1 AND seq = ?2 RETURNING length(data)",
    )?;
    let mut freed = 0;
    for position in positions {
        let seq = i64::try_from(*position).unwrap_or(i64::MAX);
        let size: Option<i64> = stmt.query_row(params![id, seq], |r| r.get(0)).optional()?;
        freed += size.map_or(0, |n| n as u64);
    }
    Ok(freed)
}

/// Stepped lazily: the rows past `max_bytes` are never read. Weighing the
/// whole window (a thousand large messages, for the few a step drops)
/// held the writer for up to 90 ms once the pages were scattered.
fn message_sizes(
    conn: &Connection,
    id: i64,
    range: Range<u64>,
    max_bytes: u64,
) -> Result<Vec<(u64, u64)>, StreamError> {
    let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT seq, length(data) FROM messages WHERE stream_id = ?1 AND seq >= ?2 AND seq < ?3
         ORDER BY seq",
    )?;
    let sizes = stmt.query_map(params![id, bound(range.start), bound(range.end)], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
    })?;
    Ok(crate::retention::within_bytes(sizes, max_bytes)?)
}

fn remove(conn: &Connection, id: i64) -> Result<(), StreamError> {
    for table in ["messages", "producers"] {
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE stream_id = ?1"))?
            .execute([id])?;
    }
    conn.prepare_cached("DELETE FROM streams WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

pub(super) fn slide(conn: &Connection, id: i64, at_ms: i64) -> Result<(), StreamError> {
    conn.prepare_cached("UPDATE streams SET accessed_ms = max(accessed_ms, ?2) WHERE id = ?1")?
        .execute(params![id, at_ms])?;
    Ok(())
}

fn tombstone(
    conn: &Connection,
    path: &str,
    incarnation: u64,
    now_ms: i64,
) -> Result<(), StreamError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO tombstones (path, deleted_ms, incarnation) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![path, now_ms, incarnation as i64])?;
    Ok(())
}

/// Rows per multi-row insert.
const ROWS_PER_INSERT: usize = 32;

/// `INSERT … VALUES (?, ?, ?), …` for [`ROWS_PER_INSERT`] rows.
static INSERT_GROUP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let rows = vec!["(?, ?, ?)"; ROWS_PER_INSERT].join(", ");
    format!("INSERT INTO messages (stream_id, seq, data) VALUES {rows}")
});

fn insert_messages(
    conn: &Connection,
    id: i64,
    first: u64,
    messages: &[Bytes],
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

fn copy_prefix(conn: &Connection, from: i64, to: i64, count: u64) -> Result<u64, StreamError> {
    conn.prepare_cached(
        "INSERT INTO messages (stream_id, seq, data)
         SELECT ?2, seq, data FROM messages WHERE stream_id = ?1 AND seq < ?3",
    )?
    .execute(params![from, to, count as i64])?;
    let mut stmt = conn.prepare_cached(
        "SELECT coalesce(sum(length(data)), 0) FROM messages WHERE stream_id = ?1",
    )?;
    Ok(stmt.query_row([to], |r| r.get::<_, i64>(0))? as u64)
}

fn producer_states(
    conn: &Connection,
    id: i64,
) -> Result<Vec<(String, ProducerState)>, StreamError> {
    let mut stmt = conn.prepare_cached(
        "SELECT producer, epoch, seq, last_ms FROM producers WHERE stream_id = ?1
         ORDER BY producer",
    )?;
    let rows = stmt.query_map(params![id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            ProducerState {
                epoch: r.get::<_, i64>(1)? as u64,
                seq: r.get::<_, i64>(2)? as u64,
                last_ms: r.get(3)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn producer_state(
    conn: &Connection,
    id: i64,
    producer: &str,
) -> Result<Option<ProducerState>, StreamError> {
    let mut stmt = conn.prepare_cached(
        "SELECT epoch, seq, last_ms FROM producers WHERE stream_id = ?1 AND producer = ?2",
    )?;
    Ok(stmt
        .query_row(params![id, producer], |r| {
            Ok(ProducerState {
                epoch: r.get::<_, i64>(0)? as u64,
                seq: r.get::<_, i64>(1)? as u64,
                last_ms: r.get(2)?,
            })
        })
        .optional()?)
}

/// A stream's producer count, kept in its row: counting the producers'
/// rows would read all of them on every new producer.
fn producer_count(conn: &Connection, id: i64) -> Result<u64, StreamError> {
    let mut stmt = conn.prepare_cached("SELECT producer_count FROM streams WHERE id = ?1")?;
    let count: Option<i64> = stmt.query_row([id], |r| r.get(0)).optional()?;
    Ok(count.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
}

/// Moves stream `id`'s producer count by `by`.
fn count_producers(conn: &Connection, id: i64, by: i64) -> Result<(), StreamError> {
    conn.prepare_cached("UPDATE streams SET producer_count = producer_count + ?2 WHERE id = ?1")?
        .execute(params![id, by])?;
    Ok(())
}

fn remove_producer(conn: &Connection, id: i64, producer: &str) -> Result<bool, StreamError> {
    let removed = conn
        .prepare_cached("DELETE FROM producers WHERE stream_id = ?1 AND producer = ?2")?
        .execute(params![id, producer])?;
    if removed > 0 {
        count_producers(conn, id, -1)?;
    }
    Ok(removed > 0)
}

fn save_producer(
    conn: &Connection,
    id: i64,
    producer: &str,
    state: ProducerState,
) -> Result<(), StreamError> {
    let (epoch, seq) = (state.epoch as i64, state.seq as i64);
    let updated = conn
        .prepare_cached(
            "UPDATE producers SET epoch = ?3, seq = ?4, last_ms = ?5
             WHERE stream_id = ?1 AND producer = ?2",
        )?
        .execute(params![id, producer, epoch, seq, state.last_ms])?;
    if updated == 0 {
        conn.prepare_cached(
            "INSERT INTO producers (stream_id, producer, epoch, seq, last_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![id, producer, epoch, seq, state.last_ms])?;
        count_producers(conn, id, 1)?;
    }
    Ok(())
}

/// Drops up to `max` producers last written at or before `cutoff_ms`, of
/// stream `id` or of any, and lowers their streams' counts. Found through
/// the index by last write (`+` keeps the planner off the primary key,
/// which would read every producer of a large stream): it reads the
/// expired producers of every stream up to the stream's, which the sweep
/// keeps few.
fn drop_expired_producers(
    conn: &Connection,
    id: Option<i64>,
    cutoff_ms: i64,
    max: usize,
) -> Result<u64, StreamError> {
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "DELETE FROM producers WHERE (stream_id, producer) IN (
             SELECT stream_id, producer FROM producers INDEXED BY producers_by_last_write
             WHERE last_ms <= ?1 AND (?2 IS NULL OR +stream_id = ?2)
             ORDER BY last_ms LIMIT ?3)
         RETURNING stream_id",
    )?;
    let streams = stmt
        .query_map(params![cutoff_ms, id, max], |r| r.get::<_, i64>(0))?
        .collect::<Result<Vec<i64>, _>>()?;
    let mut counts: std::collections::BTreeMap<i64, i64> = Default::default();
    for stream in &streams {
        *counts.entry(*stream).or_default() += 1;
    }
    for (stream, dropped) in counts {
        count_producers(conn, stream, -dropped)?;
    }
    Ok(streams.len() as u64)
}

fn messages(
    conn: &Connection,
    id: i64,
    range: Range<u64>,
    max_bytes: usize,
) -> Result<Vec<Bytes>, StreamError> {
    let read = messages_at(conn, id, range, max_bytes, Order::Ascending)?;
    Ok(read.into_iter().map(|(_, message)| message).collect())
}

/// Which messages of a range [`messages_at`] reads.
enum Order {
    /// From the first on.
    Ascending,
    /// At most this many, from the last back (returned last first).
    LastFirst(usize),
}

/// The messages kept at positions `range` with their positions.
fn messages_at(
    conn: &Connection,
    id: i64,
    range: Range<u64>,
    max_bytes: usize,
    order: Order,
) -> Result<Vec<(u64, Bytes)>, StreamError> {
    let (sql, limit) = match order {
        Order::Ascending => (
            "SELECT seq, data FROM messages WHERE stream_id = ?1 AND seq >= ?2 AND seq < ?3
             ORDER BY seq LIMIT ?4",
            -1,
        ),
        Order::LastFirst(max) => (
            "SELECT seq, data FROM messages WHERE stream_id = ?1 AND seq >= ?2 AND seq < ?3
             ORDER BY seq DESC LIMIT ?4",
            i64::try_from(max).unwrap_or(i64::MAX),
        ),
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![id, bound(range.start), bound(range.end), limit])?;
    // The rows' bytes go into one buffer and the messages are slices of
    // it: one allocation per read instead of one per message (a catch-up
    // read of small messages spent a tenth of its time in the allocator).
    let mut data = Vec::new();
    let mut ends = Vec::new();
    while let Some(row) = rows.next()? {
        let message = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        if !ends.is_empty() && data.len() + message.len() > max_bytes {
            break;
        }
        data.extend_from_slice(message);
        ends.push((row.get::<_, i64>(0)? as u64, data.len()));
    }
    let data = Bytes::from(data);
    let mut start = 0;
    Ok(ends
        .into_iter()
        .map(|(position, end)| {
            let message = data.slice(start..end);
            start = end;
            (position, message)
        })
        .collect())
}

impl From<rusqlite::Error> for StreamError {
    /// A busy, locked, full or unreadable database is unavailable (retry
    /// later); anything else is internal.
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match err.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StreamError::unavailable_from("the SQLite database is busy", err)
            }
            Some(
                ErrorCode::DiskFull
                | ErrorCode::OutOfMemory
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::OperationInterrupted,
            ) => StreamError::unavailable_from("the SQLite database cannot serve the call", err),
            _ => StreamError::internal_from("the SQLite database failed", err),
        }
    }
}
