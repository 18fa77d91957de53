//! The record operations on PostgreSQL rows (see `DESIGN-postgres.md` for
//! the layout), inside one transaction of the caller's.
//!
//! In a write transaction every stream record is loaded `FOR UPDATE`: the
//! rows the engine decides on stay locked until the commit, so two writers
//! of one stream (in any process) take turns, and writers of different
//! streams never wait for each other.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgConnection, Postgres, Row, Transaction};

use super::error::{is_conflict, statement_error};
use super::sql::Sql;
use crate::fork::ForkOrigin;
use crate::record::{expiry_columns, expiry_from_columns, RecordReader, Records, Stored};
use crate::record::{StreamRecord, Sweepable};
use crate::retention::{from_column, to_column};
use crate::rules::{Head, ProducerState};
use crate::touches::Touches;
use crate::{ProducerPosition, StreamConfig, StreamError};

/// Record access inside one transaction. A stream's key is its row id (an
/// identity, so never reused). Loads see this process's TTL touches not
/// stored yet.
pub(crate) struct PgRecords {
    tx: Transaction<'static, Postgres>,
    sql: Arc<Sql>,
    touches: Arc<Touches>,
    /// Whether loads lock the stream rows (write transactions).
    lock: bool,
    /// Whether a statement failed because a concurrent transaction won a
    /// race: the whole call may run again.
    conflicted: bool,
}

impl PgRecords {
    /// Drops up to `max` producers last written at or before `cutoff_ms`,
    /// of stream `key` or of any.
    async fn drop_expired(
        &mut self,
        key: Option<i64>,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let sql = Arc::clone(&self.sql.drop_expired_producers);
        self.counted(query(&sql).bind(cutoff_ms).bind(key).bind(max))
            .await
    }

    /// Whether any producer of any stream last wrote at or before
    /// `cutoff_ms`.
    pub async fn any_expired_producer(&mut self, cutoff_ms: i64) -> Result<bool, StreamError> {
        let sql = Arc::clone(&self.sql.any_expired_producer);
        let Some(row) = self.fetch_optional(query(&sql).bind(cutoff_ms)).await? else {
            return Ok(false);
        };
        row.try_get(0).map_err(|e| self.fail(e))
    }

    /// The count a statement answers in its one row.
    async fn counted(
        &mut self,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64, StreamError> {
        let Some(row) = self.fetch_optional(query).await? else {
            return Ok(0);
        };
        let count: i64 = row.try_get(0).map_err(|e| self.fail(e))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

impl PgRecords {
    /// Records in `tx`; `lock` for a transaction that writes.
    pub fn new(
        tx: Transaction<'static, Postgres>,
        sql: Arc<Sql>,
        touches: Arc<Touches>,
        lock: bool,
    ) -> Self {
        PgRecords {
            tx,
            sql,
            touches,
            lock,
            conflicted: false,
        }
    }

    /// Whether the next loads lock the stream rows (for a write).
    pub fn set_locking(&mut self, lock: bool) {
        self.lock = lock;
    }

    /// Whether a statement lost a race with a concurrent transaction.
    pub fn conflicted(&self) -> bool {
        self.conflicted
    }

    /// The transaction, for statements of the caller's own.
    pub fn transaction(&mut self) -> &mut Transaction<'static, Postgres> {
        &mut self.tx
    }

    /// The transaction, to commit or roll back.
    pub fn into_transaction(self) -> Transaction<'static, Postgres> {
        self.tx
    }

    fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Maps a statement's failure, noting a lost race.
    fn fail(&mut self, err: sqlx::Error) -> StreamError {
        self.conflicted |= is_conflict(&err);
        statement_error(err)
    }

    async fn execute(
        &mut self,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64, StreamError> {
        match query.execute(self.conn()).await {
            Ok(done) => Ok(done.rows_affected()),
            Err(err) => Err(self.fail(err)),
        }
    }

    async fn fetch_all(
        &mut self,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<PgRow>, StreamError> {
        match query.fetch_all(self.conn()).await {
            Ok(rows) => Ok(rows),
            Err(err) => Err(self.fail(err)),
        }
    }

    /// The first column of every row of `query`.
    async fn column<T>(
        &mut self,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<T>, StreamError>
    where
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
    {
        let rows = self.fetch_all(query).await?;
        let values: Result<Vec<T>, _> = rows.iter().map(|row| row.try_get(0)).collect();
        values.map_err(|e| self.fail(e))
    }

    async fn fetch_optional(
        &mut self,
        query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Option<PgRow>, StreamError> {
        match query.fetch_optional(self.conn()).await {
            Ok(row) => Ok(row),
            Err(err) => Err(self.fail(err)),
        }
    }
}

/// A statement of this store.
pub(super) fn query(
    sql: &Arc<str>,
) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
}

/// The first batch of a message read; each next one is four times larger,
/// up to [`MAX_PAGE`], so a read transfers at most a few times its budget
/// however long the stream.
const FIRST_PAGE: i64 = 64;
const MAX_PAGE: i64 = 16_384;

impl RecordReader for PgRecords {
    type Key = i64;

    async fn load(&mut self, path: &str) -> Result<Option<Stored<i64>>, StreamError> {
        let sql = if self.lock {
            &self.sql.load_for_update
        } else {
            &self.sql.load
        };
        let row = self.fetch_optional(query(sql).bind(path)).await?;
        let Some(row) = row else { return Ok(None) };
        let (key, _, mut record) = decode(&row).map_err(|e| self.fail(e))?;
        record.accessed_ms = self.touches.accessed(key, record.accessed_ms);
        Ok(Some(Stored { key, record }))
    }

    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        let sql = Arc::clone(&self.sql.tombstoned);
        let row = self.fetch_optional(query(&sql).bind(path)).await?;
        row.map(|row| row.try_get::<i64, _>(0).map(|i| i as u64))
            .transpose()
            .map_err(|e| self.fail(e))
    }

    async fn forks_of(&mut self, path: &str) -> Result<Vec<String>, StreamError> {
        let sql = Arc::clone(&self.sql.forks_of);
        let rows = self.fetch_all(query(&sql).bind(path)).await?;
        rows.iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(|e| self.fail(e))
    }

    async fn producers(&mut self, key: &i64) -> Result<Vec<(String, ProducerState)>, StreamError> {
        let sql = Arc::clone(&self.sql.producers);
        let rows = self.fetch_all(query(&sql).bind(key)).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<String, _>(0)?,
                    ProducerState {
                        epoch: row.try_get::<i64, _>(1)? as u64,
                        seq: row.try_get::<i64, _>(2)? as u64,
                        last_ms: row.try_get(3)?,
                    },
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.fail(e))
    }

    async fn producer(
        &mut self,
        key: &i64,
        producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        let sql = Arc::clone(&self.sql.producer);
        let row = self
            .fetch_optional(query(&sql).bind(key).bind(producer))
            .await?;
        let Some(row) = row else { return Ok(None) };
        let state = (|| {
            Ok::<_, sqlx::Error>(ProducerState {
                epoch: row.try_get::<i64, _>(0)? as u64,
                seq: row.try_get::<i64, _>(1)? as u64,
                last_ms: row.try_get(2)?,
            })
        })();
        state.map(Some).map_err(|e| self.fail(e))
    }

    async fn producer_count(&mut self, key: &i64) -> Result<u64, StreamError> {
        let sql = Arc::clone(&self.sql.producer_count);
        self.counted(query(&sql).bind(key)).await
    }

    async fn messages_at(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        let sql = Arc::clone(&self.sql.messages);
        let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (mut next, end) = (bound(range.start), bound(range.end));
        let (mut total, mut page) = (0usize, FIRST_PAGE);
        let mut messages = Vec::new();
        while next < end {
            let rows = self
                .fetch_all(query(&sql).bind(key).bind(next).bind(end).bind(page))
                .await?;
            let fetched = rows.len() as i64;
            for row in rows {
                let seq: i64 = row.try_get(0).map_err(|e| self.fail(e))?;
                let data: Vec<u8> = row.try_get(1).map_err(|e| self.fail(e))?;
                total += data.len();
                if !messages.is_empty() && total > max_bytes {
                    return Ok(messages);
                }
                messages.push((seq as u64, Bytes::from(data)));
                // Compaction leaves holes: the next page starts after
                // the last row, not after as many positions as rows.
                next = seq + 1;
            }
            if fetched < page {
                break;
            }
            page = (page * 4).min(MAX_PAGE);
        }
        Ok(messages)
    }

    async fn messages_before(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        let sql = Arc::clone(&self.sql.messages_before);
        let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let rows = self
            .fetch_all(
                query(&sql)
                    .bind(key)
                    .bind(bound(range.start))
                    .bind(bound(range.end))
                    .bind(bound(max)),
            )
            .await?;
        // Newest first: those within the byte budget are kept.
        let (mut messages, mut total) = (Vec::with_capacity(rows.len()), 0usize);
        for row in &rows {
            let seq: i64 = row.try_get(0).map_err(|e| self.fail(e))?;
            let data: Vec<u8> = row.try_get(1).map_err(|e| self.fail(e))?;
            total += data.len();
            if !messages.is_empty() && total > max_bytes {
                break;
            }
            messages.push((seq as u64, Bytes::from(data)));
        }
        messages.reverse();
        Ok(messages)
    }

    async fn sweepable(
        &mut self,
        now_ms: i64,
        below: u64,
        max: usize,
    ) -> Result<Sweepable, StreamError> {
        let below = i64::try_from(below).unwrap_or(i64::MAX);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let sql = Arc::clone(&self.sql.sweepable_streams);
        let streams = self
            .column(query(&sql).bind(now_ms).bind(below).bind(max))
            .await?;
        let sql = Arc::clone(&self.sql.sweepable_tombstones);
        let tombstones = self.column(query(&sql).bind(below).bind(max)).await?;
        let sql = Arc::clone(&self.sql.sweepable_retained);
        let retained = self.column(query(&sql).bind(now_ms).bind(max)).await?;
        Ok(Sweepable {
            streams,
            tombstones,
            retained,
        })
    }

    /// Every size of `range`: PostgreSQL reads a large value's size from
    /// its TOAST pointer, so the window costs a scan of its index entries.
    async fn message_sizes(
        &mut self,
        key: &i64,
        range: Range<u64>,
        _max_bytes: u64,
    ) -> Result<Vec<(u64, u64)>, StreamError> {
        let sql = Arc::clone(&self.sql.message_sizes);
        let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let rows = self
            .fetch_all(
                query(&sql)
                    .bind(key)
                    .bind(bound(range.start))
                    .bind(bound(range.end)),
            )
            .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0).map_err(|e| self.fail(e))?;
                let size: i64 = row.try_get(1).map_err(|e| self.fail(e))?;
                Ok((seq as u64, size as u64))
            })
            .collect()
    }

    async fn list(&mut self, prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        let sql = Arc::clone(&self.sql.list);
        let rows = self.fetch_all(query(&sql).bind(prefix)).await?;
        let touches = &self.touches;
        rows.iter()
            .map(|row| {
                decode(row).map(|(key, path, mut record)| {
                    record.accessed_ms = touches.accessed(key, record.accessed_ms);
                    (path, record)
                })
            })
            .collect::<Result<_, _>>()
            .map_err(|e| self.fail(e))
    }
}

impl Records for PgRecords {
    async fn insert(&mut self, path: &str, record: &StreamRecord) -> Result<i64, StreamError> {
        let sql = Arc::clone(&self.sql.drop_tombstone);
        self.execute(query(&sql).bind(path)).await?;
        let sql = Arc::clone(&self.sql.insert);
        let config = &record.head.config;
        let (ttl, expires_at) = expiry_columns(config.expiry);
        let origin = record.origin.as_ref();
        let row = self
            .fetch_optional(
                query(&sql)
                    .bind(path)
                    .bind(&config.content_type)
                    .bind(ttl)
                    .bind(expires_at)
                    .bind(config.closed)
                    .bind(record.accessed_ms)
                    .bind(origin.map(|o| o.source.as_str()))
                    .bind(origin.map(|o| o.position as i64))
                    .bind(origin.map(|o| o.sub_offset as i64))
                    .bind(record.head.incarnation as i64)
                    .bind(origin.map(|o| o.incarnation as i64)),
            )
            .await?;
        let id = row
            .ok_or_else(|| StreamError::internal("INSERT … RETURNING returned no row"))?
            .try_get(0)
            .map_err(|e| self.fail(e))?;
        // The row is inserted bare; its state columns are the update's.
        self.update(&id, record.clone()).await?;
        Ok(id)
    }

    async fn update(&mut self, key: &i64, record: StreamRecord) -> Result<(), StreamError> {
        let sql = Arc::clone(&self.sql.update);
        let head = &record.head;
        let closer = head.closed_by.as_ref();
        self.execute(
            query(&sql)
                .bind(key)
                .bind(head.closed)
                .bind(head.count as i64)
                .bind(head.bytes as i64)
                .bind(head.last_stream_seq.as_deref())
                .bind(closer.map(|p| p.id.as_str()))
                .bind(closer.map(|p| p.epoch as i64))
                .bind(closer.map(|p| p.seq as i64))
                .bind(record.accessed_ms)
                .bind(record.soft_deleted)
                .bind(to_column(&head.config, &head.retained))
                .bind(record.retention_due_ms()),
        )
        .await?;
        Ok(())
    }

    async fn drop_positions(&mut self, key: &i64, positions: Vec<u64>) -> Result<u64, StreamError> {
        let sql = Arc::clone(&self.sql.drop_positions);
        let positions: Vec<i64> = positions
            .into_iter()
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX))
            .collect();
        let freed: Vec<i64> = self.column(query(&sql).bind(key).bind(positions)).await?;
        Ok(freed.first().map_or(0, |n| *n as u64))
    }

    async fn drop_messages(&mut self, key: &i64, range: Range<u64>) -> Result<(), StreamError> {
        let sql = Arc::clone(&self.sql.drop_messages);
        let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.execute(
            query(&sql)
                .bind(key)
                .bind(bound(range.start))
                .bind(bound(range.end)),
        )
        .await?;
        Ok(())
    }

    async fn insert_messages(
        &mut self,
        key: &i64,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), StreamError> {
        if messages.is_empty() {
            return Ok(());
        }
        let sql = Arc::clone(&self.sql.insert_messages);
        let data: Vec<&[u8]> = messages.iter().map(|m| m.as_ref()).collect();
        self.execute(query(&sql).bind(key).bind(first as i64).bind(data))
            .await?;
        Ok(())
    }

    async fn copy_prefix(&mut self, from: &i64, to: &i64, count: u64) -> Result<u64, StreamError> {
        let sql = Arc::clone(&self.sql.copy_prefix);
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let row = self
            .fetch_optional(query(&sql).bind(from).bind(to).bind(count))
            .await?;
        let bytes: i64 = match row {
            Some(row) => row.try_get(0).map_err(|e| self.fail(e))?,
            None => 0,
        };
        Ok(bytes as u64)
    }

    async fn save_producer(
        &mut self,
        key: &i64,
        producer: &str,
        state: ProducerState,
    ) -> Result<(), StreamError> {
        let sql = Arc::clone(&self.sql.save_producer);
        self.execute(
            query(&sql)
                .bind(key)
                .bind(producer)
                .bind(state.epoch as i64)
                .bind(state.seq as i64)
                .bind(state.last_ms),
        )
        .await?;
        Ok(())
    }

    async fn remove_producer(&mut self, key: &i64, producer: &str) -> Result<bool, StreamError> {
        let sql = Arc::clone(&self.sql.remove_producer);
        let removed = self.counted(query(&sql).bind(key).bind(producer)).await?;
        Ok(removed > 0)
    }

    async fn drop_expired_producers(
        &mut self,
        key: &i64,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        self.drop_expired(Some(*key), cutoff_ms, max).await
    }

    async fn sweep_expired_producers(
        &mut self,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        self.drop_expired(None, cutoff_ms, max).await
    }

    async fn remove(&mut self, key: &i64, _path: &str) -> Result<(), StreamError> {
        let sql = Arc::clone(&self.sql.remove);
        self.execute(query(&sql).bind(key)).await?;
        Ok(())
    }

    async fn slide(&mut self, key: &i64, at_ms: i64) -> Result<(), StreamError> {
        // Debounced, as a read's touch (`PgTransaction::read`): an UPDATE
        // here would make a read wait for the row lock of a writer, in the
        // caller's transaction. The flusher stores it without waiting.
        self.touches.record(*key, at_ms);
        Ok(())
    }

    async fn tombstone(
        &mut self,
        path: &str,
        incarnation: u64,
        now_ms: i64,
    ) -> Result<(), StreamError> {
        let sql = Arc::clone(&self.sql.tombstone);
        self.execute(query(&sql).bind(path).bind(now_ms).bind(incarnation as i64))
            .await?;
        Ok(())
    }

    async fn drop_tombstone(&mut self, path: &str, below: u64) -> Result<bool, StreamError> {
        let below = i64::try_from(below).unwrap_or(i64::MAX);
        let sql = Arc::clone(&self.sql.drop_old_tombstone);
        Ok(self.execute(query(&sql).bind(path).bind(below)).await? > 0)
    }
}

/// The key, path and record in a row selected with
/// [`STREAM_COLUMNS`](super::sql::STREAM_COLUMNS).
pub(super) fn decode(r: &PgRow) -> Result<(i64, String, StreamRecord), sqlx::Error> {
    let closed_by = match r.try_get::<Option<String>, _>(10)? {
        Some(id) => Some(ProducerPosition::new(
            id,
            r.try_get::<i64, _>(11)? as u64,
            r.try_get::<i64, _>(12)? as u64,
        )),
        None => None,
    };
    let origin = match r.try_get::<Option<String>, _>(14)? {
        Some(source) => Some(ForkOrigin {
            source,
            position: r.try_get::<i64, _>(15)? as u64,
            sub_offset: r.try_get::<i64, _>(16)? as u64,
            incarnation: r.try_get::<Option<i64>, _>(19)?.unwrap_or(0) as u64,
        }),
        None => None,
    };
    let column: Option<String> = r.try_get(20)?;
    let (retention, compaction, retained) =
        from_column(column.as_deref()).map_err(|reason| sqlx::Error::ColumnDecode {
            index: "retention".into(),
            source: reason.into(),
        })?;
    let record = StreamRecord {
        head: Head {
            incarnation: r.try_get::<i64, _>(18)? as u64,
            config: Arc::new(StreamConfig {
                content_type: r.try_get(2)?,
                expiry: expiry_from_columns(r.try_get(3)?, r.try_get(4)?),
                closed: r.try_get(5)?,
                retention,
                compaction,
            }),
            closed: r.try_get(6)?,
            count: r.try_get::<i64, _>(7)? as u64,
            bytes: r.try_get::<i64, _>(8)? as u64,
            last_stream_seq: r.try_get(9)?,
            closed_by,
            retained,
        },
        accessed_ms: r.try_get(13)?,
        origin,
        soft_deleted: r.try_get(17)?,
    };
    Ok((r.try_get(0)?, r.try_get(1)?, record))
}
