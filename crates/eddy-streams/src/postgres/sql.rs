//! The statements of one store, with its schema's name in every table
//! name: eddy never changes a connection's `search_path`, so SQL of the
//! application's own on the same connection (in a host's transaction)
//! resolves names as it always does.

use std::sync::Arc;

use super::schema::quote;

/// The columns [`decode`](super::records) reads, in order.
pub(super) const STREAM_COLUMNS: &str = "id, path, content_type, ttl_secs, expires_at_ms,
    created_closed, closed, count, bytes, last_stream_seq, closed_by_id, closed_by_epoch,
    closed_by_seq, accessed_ms, fork_source, fork_position, fork_sub, soft_deleted";

/// Every statement of a store on one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub load: Arc<str>,
    pub load_for_update: Arc<str>,
    pub is_tombstoned: Arc<str>,
    pub forks_of: Arc<str>,
    pub producer: Arc<str>,
    pub producers: Arc<str>,
    pub producer_count: Arc<str>,
    pub messages: Arc<str>,
    pub list: Arc<str>,
    pub drop_tombstone: Arc<str>,
    pub insert: Arc<str>,
    pub update: Arc<str>,
    pub insert_messages: Arc<str>,
    pub copy_prefix: Arc<str>,
    pub save_producer: Arc<str>,
    pub remove_producer: Arc<str>,
    pub remove: Arc<str>,
    pub slide: Arc<str>,
    pub tombstone: Arc<str>,
}

impl Sql {
    /// The statements on the tables of `schema`.
    pub fn new(schema: &str) -> Self {
        let s = quote(schema);
        let sql = |text: String| -> Arc<str> { text.into() };
        Sql {
            load: sql(format!(
                "SELECT {STREAM_COLUMNS} FROM {s}.streams WHERE path = $1"
            )),
            load_for_update: sql(format!(
                "SELECT {STREAM_COLUMNS} FROM {s}.streams WHERE path = $1 FOR UPDATE"
            )),
            is_tombstoned: sql(format!("SELECT 1 FROM {s}.tombstones WHERE path = $1")),
            forks_of: sql(format!(
                "SELECT path FROM {s}.streams WHERE fork_source = $1"
            )),
            producer: sql(format!(
                "SELECT epoch, seq FROM {s}.producers WHERE stream_id = $1 AND producer = $2"
            )),
            producers: sql(format!(
                "SELECT producer, epoch, seq FROM {s}.producers WHERE stream_id = $1 ORDER BY producer"
            )),
            producer_count: sql(format!(
                "SELECT count(*) FROM {s}.producers WHERE stream_id = $1"
            )),
            messages: sql(format!(
                "SELECT data FROM {s}.messages WHERE stream_id = $1 AND seq >= $2 AND seq < $3
                 ORDER BY seq LIMIT $4"
            )),
            list: sql(format!(
                "SELECT {STREAM_COLUMNS} FROM {s}.streams WHERE starts_with(path, $1) ORDER BY path"
            )),
            drop_tombstone: sql(format!("DELETE FROM {s}.tombstones WHERE path = $1")),
            insert: sql(format!(
                "INSERT INTO {s}.streams (path, content_type, ttl_secs, expires_at_ms,
                    created_closed, closed, count, bytes, accessed_ms, fork_source,
                    fork_position, fork_sub, soft_deleted)
                 VALUES ($1, $2, $3, $4, $5, $5, 0, 0, $6, $7, $8, $9, false)
                 RETURNING id"
            )),
            update: sql(format!(
                "UPDATE {s}.streams SET closed = $2, count = $3, bytes = $4,
                    last_stream_seq = $5, closed_by_id = $6, closed_by_epoch = $7,
                    closed_by_seq = $8, accessed_ms = $9, soft_deleted = $10
                 WHERE id = $1"
            )),
            insert_messages: sql(format!(
                "INSERT INTO {s}.messages (stream_id, seq, data)
                 SELECT $1, $2 + m.ord - 1, m.data
                 FROM unnest($3::bytea[]) WITH ORDINALITY AS m(data, ord)"
            )),
            copy_prefix: sql(format!(
                "WITH copied AS (
                    INSERT INTO {s}.messages (stream_id, seq, data)
                    SELECT $2, seq, data FROM {s}.messages WHERE stream_id = $1 AND seq < $3
                    RETURNING length(data) AS size)
                 SELECT coalesce(sum(size), 0)::bigint FROM copied"
            )),
            remove_producer: sql(format!(
                "DELETE FROM {s}.producers WHERE stream_id = $1 AND producer = $2"
            )),
            save_producer: sql(format!(
                "INSERT INTO {s}.producers (stream_id, producer, epoch, seq) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (stream_id, producer)
                 DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq"
            )),
            remove: sql(format!(
                "WITH m AS (DELETE FROM {s}.messages WHERE stream_id = $1),
                      p AS (DELETE FROM {s}.producers WHERE stream_id = $1)
                 DELETE FROM {s}.streams WHERE id = $1"
            )),
            // The touches of one flush, one row each: a later stored
            // access (another process's) is never moved back. Background
            // bookkeeping never waits for a row lock (nor deadlocks with a
            // caller's transaction): rows another transaction holds are
            // skipped, and their ids returned, to stay pending; a stream
            // removed meanwhile is neither locked nor returned.
            slide: sql(format!(
                "WITH due AS (
                     SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS t(id, at_ms)
                 ), locked AS MATERIALIZED (
                     SELECT s.id FROM {s}.streams AS s JOIN due ON s.id = due.id
                     FOR NO KEY UPDATE OF s SKIP LOCKED
                 ), slid AS (
                     UPDATE {s}.streams AS s SET accessed_ms = due.at_ms
                     FROM locked JOIN due ON due.id = locked.id
                     WHERE s.id = locked.id AND s.accessed_ms < due.at_ms
                 )
                 SELECT due.id FROM due JOIN {s}.streams AS s ON s.id = due.id
                 WHERE NOT EXISTS (SELECT 1 FROM locked WHERE locked.id = due.id)"
            )),
            tombstone: sql(format!(
                "INSERT INTO {s}.tombstones (path, deleted_ms) VALUES ($1, $2)
                 ON CONFLICT (path) DO UPDATE SET deleted_ms = excluded.deleted_ms"
            )),
        }
    }
}
