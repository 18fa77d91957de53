//! The statements of one store, with its schema's name in every table
//! name: eddy never changes a connection's `search_path`, so SQL of the
//! application's own on the same connection (in a host's transaction)
//! resolves names as it always does.

use std::sync::Arc;

use super::schema::quote;

/// The columns [`decode`](super::records) reads, in order.
pub(super) const STREAM_COLUMNS: &str = "id, path, content_type, ttl_secs, expires_at_ms,
    created_closed, closed, count, bytes, last_stream_seq, closed_by_id, closed_by_epoch,
    closed_by_seq, accessed_ms, fork_source, fork_position, fork_sub, soft_deleted, incarnation,
    fork_incarnation, retention";

/// How many columns [`STREAM_COLUMNS`] selects: a statement's own columns
/// after them start at this index.
pub(super) const STREAM_COLUMN_COUNT: usize = 21;

/// The parts of a group's commit statement that insert the streams it
/// creates ($41–$59), as `created` (key, id).
fn group_creates(s: &str) -> String {
    format!(
        "), c AS (
             SELECT * FROM unnest($41::bigint[], $42::text[], $43::text[], $44::bigint[],
                 $45::bigint[], $46::bool[], $47::bool[], $48::bigint[], $49::bigint[],
                 $50::text[], $51::text[], $52::bigint[], $53::bigint[], $54::bigint[],
                 $55::bigint[], $56::bigint[], $57::bigint[], $58::text[], $59::bigint[])
             AS c(key, path, content_type, ttl_secs, expires_at_ms, created_closed, closed,
                 count, bytes, last_stream_seq, closed_by_id, closed_by_epoch, closed_by_seq,
                 accessed_ms, incarnation, producer_count, tombstone, retention,
                 retention_due_ms)
         ), made AS (
             INSERT INTO {s}.streams (path, content_type, ttl_secs, expires_at_ms,
                 created_closed, closed, count, bytes, last_stream_seq, closed_by_id,
                 closed_by_epoch, closed_by_seq, accessed_ms, soft_deleted, incarnation,
                 producer_count, retention, retention_due_ms)
             SELECT c.path, c.content_type, c.ttl_secs, c.expires_at_ms, c.created_closed,
                 c.closed, c.count, c.bytes, c.last_stream_seq, c.closed_by_id,
                 c.closed_by_epoch, c.closed_by_seq, c.accessed_ms, false, c.incarnation,
                 c.producer_count, c.retention, c.retention_due_ms
             FROM c
             WHERE coalesce((SELECT t.incarnation FROM {s}.tombstones AS t
                 WHERE t.path = c.path), 0) = c.tombstone
             ORDER BY c.path
             ON CONFLICT (path) DO NOTHING
             RETURNING id, path
         ), created AS (
             SELECT c.key, made.id FROM c JOIN made ON made.path = c.path
         ), unburied AS (
             DELETE FROM {s}.tombstones AS t USING made WHERE t.path = made.path"
    )
}

/// A group commit in one statement (see `group/statement.rs`). Each
/// stream of the group ($1) is checked at the version the group decided
/// on: its count ($2), close ($3) and retention state ($38: the sweep's
/// drops change nothing else), not soft-deleted, the producer
/// states it read ($32–$35) unchanged, and none of the producers it took
/// as absent ($20, $21) present (a group never refuses a producer at the
/// cap: the stream's expired producers must go first, which only a
/// transaction does, so such an append goes back to its caller). A stream
/// it writes ($4) is locked first,
/// in id order (so that two groups never wait for each other in a cycle),
/// and so are the producer rows it read, and it is checked once locked;
/// then its record ($5–$12, $39, $40; $37 the producers it adds to its
/// count: those it saved that it took as absent), messages ($13–$15), producers
/// ($16–$19, $36) and
/// wake-up marks ($26–$31) are written and its notification lines ($24,
/// $25) sent on channel $22, prefixed with $23, in notifications of at
/// most ~7 KB. The streams the group creates ($41–$59, under keys of the
/// group's own, which its messages, producers, marks and lines use too)
/// are inserted where their path holds no row and its tombstone is still
/// the one the group saw ($57, 0: none), which goes. Returns the key and
/// row id of every stream that passed its check or was inserted, and
/// nulls per notification. A group without creates runs it without
/// their parts (`creating`), and binds $1–$40 only.
fn group_commit(s: &str, creating: bool) -> String {
    let creating = if creating {
        let created = group_creates(s);
        format!(
            "{created}
         ), ids AS (
             SELECT id AS key, id FROM written UNION ALL SELECT key, id FROM created"
        )
    } else {
        // A group without creates runs the statement without their parts
        // (and parameters): planning and running them cost every group.
        "         ), ids AS (
             SELECT id AS key, id FROM written"
            .to_owned()
    };
    format!(
        "WITH g AS (
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::bool[],
                 $5::bigint[], $6::bigint[], $7::bool[], $8::text[], $9::text[],
                 $10::bigint[], $11::bigint[], $12::bigint[], $37::bigint[], $38::text[],
                 $39::text[], $40::bigint[])
             AS g(id, was_count, was_closed, write, count, bytes, closed, last_stream_seq,
                 closed_by_id, closed_by_epoch, closed_by_seq, accessed_ms, new_producers,
                 was_retention, retention, retention_due_ms)
         ), relied AS (
             SELECT * FROM unnest($32::bigint[], $33::text[], $34::bigint[], $35::bigint[])
                 AS r(id, producer, epoch, seq)
         ), held AS MATERIALIZED (
             SELECT s.id FROM {s}.streams AS s JOIN g ON g.id = s.id
             WHERE g.write AND s.count = g.was_count AND s.closed = g.was_closed
                 AND s.retention IS NOT DISTINCT FROM g.was_retention
                 AND NOT s.soft_deleted
             ORDER BY s.id
             FOR NO KEY UPDATE OF s
         ), kept AS MATERIALIZED (
             SELECT p.stream_id AS id, p.producer FROM {s}.producers AS p
             JOIN relied AS r ON p.stream_id = r.id AND p.producer = r.producer
             WHERE p.epoch = r.epoch AND p.seq = r.seq AND p.stream_id IN (SELECT id FROM held)
             ORDER BY p.stream_id, p.producer
             FOR KEY SHARE OF p
         ), unsure AS (
             SELECT a.id FROM unnest($20::bigint[], $21::text[]) AS a(id, producer)
             JOIN {s}.producers AS p ON p.stream_id = a.id AND p.producer = a.producer
             UNION
             SELECT r.id FROM relied AS r
             WHERE r.id IN (SELECT id FROM held) AND NOT EXISTS (
                 SELECT 1 FROM kept AS k WHERE k.id = r.id AND k.producer = r.producer)
             UNION
             SELECT r.id FROM relied AS r
             WHERE r.id NOT IN (SELECT id FROM held) AND NOT EXISTS (
                 SELECT 1 FROM {s}.producers AS p WHERE p.stream_id = r.id
                     AND p.producer = r.producer AND p.epoch = r.epoch AND p.seq = r.seq)
         ), written AS (
             UPDATE {s}.streams AS s SET count = g.count, bytes = g.bytes, closed = g.closed,
                 last_stream_seq = g.last_stream_seq, closed_by_id = g.closed_by_id,
                 closed_by_epoch = g.closed_by_epoch, closed_by_seq = g.closed_by_seq,
                 accessed_ms = greatest(s.accessed_ms, g.accessed_ms),
                 producer_count = s.producer_count + g.new_producers,
                 retention = g.retention, retention_due_ms = g.retention_due_ms
             FROM g JOIN held ON held.id = g.id
             WHERE s.id = g.id AND s.id NOT IN (SELECT id FROM unsure)
             RETURNING s.id
{creating}
         ), checked AS (
             SELECT s.id FROM {s}.streams AS s JOIN g ON g.id = s.id
             WHERE NOT g.write AND s.count = g.was_count AND s.closed = g.was_closed
                 AND s.retention IS NOT DISTINCT FROM g.was_retention
                 AND NOT s.soft_deleted AND s.id NOT IN (SELECT id FROM unsure)
         ), messages AS (
             INSERT INTO {s}.messages (stream_id, seq, data)
             SELECT ids.id, m.seq, m.data
             FROM unnest($13::bigint[], $14::bigint[], $15::bytea[]) AS m(key, seq, data)
             JOIN ids ON ids.key = m.key
         ), producers AS (
             INSERT INTO {s}.producers (stream_id, producer, epoch, seq, last_ms)
             SELECT ids.id, p.producer, p.epoch, p.seq, p.last_ms
             FROM unnest($16::bigint[], $17::text[], $18::bigint[], $19::bigint[],
                 $36::bigint[])
                 AS p(key, producer, epoch, seq, last_ms)
             JOIN ids ON ids.key = p.key
             ON CONFLICT (stream_id, producer)
             DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, last_ms = excluded.last_ms
         ), marks AS (
             INSERT INTO {s}.wake_marks
                 (projection, version, params, path, commits, attempts, due_ms)
             SELECT k.projection, k.version, k.params, (array_agg(k.path ORDER BY k.ord DESC))[1],
                 sum(k.commits)::bigint, 0, 0
             FROM unnest($26::bigint[], $27::text[], $28::bigint[], $29::text[], $30::text[],
                 $31::bigint[]) WITH ORDINALITY AS k(id, projection, version, params, path, commits, ord)
             WHERE k.id IN (SELECT key FROM ids)
             GROUP BY k.projection, k.version, k.params
             ORDER BY k.projection, k.version, k.params
             ON CONFLICT (projection, version, params)
             DO UPDATE SET commits = wake_marks.commits + excluded.commits, path = excluded.path
         ), noted AS (
             SELECT pg_notify($22, $23 || string_agg(n.line, E'\\n' ORDER BY n.ord))
             FROM (
                 SELECT n.line, n.ord,
                     sum(octet_length(n.line) + 1) OVER (ORDER BY n.ord) / 6000 AS part
                 FROM unnest($24::bigint[], $25::text[]) WITH ORDINALITY AS n(id, line, ord)
                 WHERE n.id IN (SELECT key FROM ids)
             ) AS n
             GROUP BY n.part
         )
         SELECT key, id FROM ids
         UNION ALL SELECT id, id FROM checked
         UNION ALL SELECT NULL::bigint, NULL::bigint FROM noted"
    )
}

/// The most message rows [`Sql::read`] takes, from a read's byte budget
/// and the stream `s`'s average message size.
const READ_CAP: &str =
    "least(16384, greatest(64, 2 * (q.budget / greatest(s.bytes / greatest(s.count, 1), 1)) + 1))";

/// [`STREAM_COLUMNS`] of the table named `alias`.
fn qualified(alias: &str) -> String {
    STREAM_COLUMNS
        .split(',')
        .map(|column| format!("{alias}.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every statement of a store on one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    pub load: Arc<str>,
    pub load_for_update: Arc<str>,
    pub tombstoned: Arc<str>,
    pub forks_of: Arc<str>,
    pub producer: Arc<str>,
    pub producers: Arc<str>,
    pub producer_count: Arc<str>,
    pub messages: Arc<str>,
    pub list: Arc<str>,
    pub drop_tombstone: Arc<str>,
    pub sweepable_streams: Arc<str>,
    pub sweepable_tombstones: Arc<str>,
    pub sweepable_retained: Arc<str>,
    pub message_sizes: Arc<str>,
    pub drop_messages: Arc<str>,
    pub messages_before: Arc<str>,
    pub drop_positions: Arc<str>,
    pub drop_old_tombstone: Arc<str>,
    pub insert: Arc<str>,
    pub update: Arc<str>,
    pub insert_messages: Arc<str>,
    pub copy_prefix: Arc<str>,
    pub save_producer: Arc<str>,
    pub remove_producer: Arc<str>,
    pub drop_expired_producers: Arc<str>,
    pub any_expired_producer: Arc<str>,
    pub remove: Arc<str>,
    pub slide: Arc<str>,
    pub tombstone: Arc<str>,
    pub read: Arc<str>,
    pub heads: Arc<str>,
    pub group_load: Arc<str>,
    pub group_commit: Arc<str>,
    pub group_commit_creating: Arc<str>,
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
            tombstoned: sql(format!(
                "SELECT incarnation FROM {s}.tombstones WHERE path = $1"
            )),
            forks_of: sql(format!(
                "SELECT path FROM {s}.streams WHERE fork_source = $1"
            )),
            producer: sql(format!(
                "SELECT epoch, seq, last_ms FROM {s}.producers WHERE stream_id = $1 AND producer = $2"
            )),
            producers: sql(format!(
                "SELECT producer, epoch, seq, last_ms FROM {s}.producers WHERE stream_id = $1
                 ORDER BY producer"
            )),
            // Kept in the stream's row: counting the producers' rows would
            // read all of them on every new producer.
            producer_count: sql(format!(
                "SELECT producer_count FROM {s}.streams WHERE id = $1"
            )),
            messages: sql(format!(
                "SELECT seq, data FROM {s}.messages WHERE stream_id = $1 AND seq >= $2 AND seq < $3
                 ORDER BY seq LIMIT $4"
            )),
            messages_before: sql(format!(
                "SELECT seq, data FROM {s}.messages WHERE stream_id = $1 AND seq >= $2 AND seq < $3
                 ORDER BY seq DESC LIMIT $4"
            )),
            drop_positions: sql(format!(
                "WITH gone AS (
                     DELETE FROM {s}.messages WHERE stream_id = $1 AND seq = ANY($2)
                     RETURNING octet_length(data)::bigint AS size
                 )
                 SELECT coalesce(sum(size), 0)::bigint FROM gone"
            )),
            list: sql(format!(
                "SELECT {STREAM_COLUMNS} FROM {s}.streams WHERE starts_with(path, $1) ORDER BY path"
            )),
            drop_tombstone: sql(format!("DELETE FROM {s}.tombstones WHERE path = $1")),
            sweepable_streams: sql(format!(
                "SELECT path FROM {s}.streams
                 WHERE NOT soft_deleted AND incarnation < $2
                   AND ((ttl_secs IS NOT NULL AND accessed_ms + ttl_secs * 1000 <= $1)
                        OR (expires_at_ms IS NOT NULL AND expires_at_ms <= $1))
                 LIMIT $3"
            )),
            sweepable_tombstones: sql(format!(
                "SELECT path FROM {s}.tombstones WHERE incarnation < $1 LIMIT $2"
            )),
            sweepable_retained: sql(format!(
                "SELECT path FROM {s}.streams WHERE retention_due_ms <= $1
                 ORDER BY retention_due_ms LIMIT $2"
            )),
            message_sizes: sql(format!(
                "SELECT seq, octet_length(data)::bigint FROM {s}.messages
                 WHERE stream_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq"
            )),
            drop_messages: sql(format!(
                "DELETE FROM {s}.messages WHERE stream_id = $1 AND seq >= $2 AND seq < $3"
            )),
            drop_old_tombstone: sql(format!(
                "DELETE FROM {s}.tombstones WHERE path = $1 AND incarnation < $2"
            )),
            insert: sql(format!(
                "INSERT INTO {s}.streams (path, content_type, ttl_secs, expires_at_ms,
                    created_closed, closed, count, bytes, accessed_ms, fork_source,
                    fork_position, fork_sub, soft_deleted, incarnation, fork_incarnation)
                 VALUES ($1, $2, $3, $4, $5, $5, 0, 0, $6, $7, $8, $9, false, $10, $11)
                 RETURNING id"
            )),
            update: sql(format!(
                "UPDATE {s}.streams SET closed = $2, count = $3, bytes = $4,
                    last_stream_seq = $5, closed_by_id = $6, closed_by_epoch = $7,
                    closed_by_seq = $8, accessed_ms = $9, soft_deleted = $10,
                    retention = $11, retention_due_ms = $12
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
            // Whether it removed one; the stream's count follows.
            remove_producer: sql(format!(
                "WITH d AS (
                     DELETE FROM {s}.producers WHERE stream_id = $1 AND producer = $2
                     RETURNING stream_id
                 ), c AS (
                     UPDATE {s}.streams SET producer_count = producer_count - 1
                     WHERE id IN (SELECT stream_id FROM d)
                 )
                 SELECT count(*) FROM d"
            )),
            // A new producer (inserted, `xmax = 0`) counts on its stream.
            save_producer: sql(format!(
                "WITH p AS (
                     INSERT INTO {s}.producers (stream_id, producer, epoch, seq, last_ms)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (stream_id, producer)
                     DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq,
                         last_ms = excluded.last_ms
                     RETURNING (xmax = 0) AS inserted
                 )
                 UPDATE {s}.streams SET producer_count = producer_count + 1
                 WHERE id = $1 AND (SELECT inserted FROM p)"
            )),
            // Up to $3 producers last written at or before $1, of stream
            // $2 or of any (found through the index by last write), their
            // streams' counts lowered; how many.
            // Whether any producer last wrote at or before $1 (the index
            // by last write answers it): a sweep writes only then.
            any_expired_producer: sql(format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.producers WHERE last_ms <= $1)"
            )),
            drop_expired_producers: sql(format!(
                "WITH d AS (
                     DELETE FROM {s}.producers WHERE (stream_id, producer) IN (
                         SELECT stream_id, producer FROM {s}.producers
                         WHERE last_ms <= $1 AND ($2::bigint IS NULL OR stream_id = $2)
                         ORDER BY last_ms LIMIT $3)
                     RETURNING stream_id
                 ), c AS (
                     SELECT stream_id, count(*) AS n FROM d GROUP BY stream_id
                 ), u AS (
                     UPDATE {s}.streams AS s SET producer_count = s.producer_count - c.n
                     FROM c WHERE s.id = c.stream_id
                 )
                 SELECT coalesce(sum(n), 0)::bigint FROM c"
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
                "INSERT INTO {s}.tombstones (path, deleted_ms, incarnation) VALUES ($1, $2, $3)
                 ON CONFLICT (path) DO UPDATE
                 SET deleted_ms = excluded.deleted_ms, incarnation = excluded.incarnation"
            )),
            // Reads in one statement (one snapshot), a row per read ($1–$4,
            // returned with its ordinal): the stream's record (or the
            // incarnation its path's tombstone keeps), and its messages from
            // position `start` while their total stays within `budget` bytes
            // (the first one whatever its size when `whole`), at most `cap` rows:
            // about twice what the budget holds at the stream's average
            // message size, so a read of a long stream scans little more
            // than it returns.
            read: sql(format!(
                "SELECT {stream}, m.data, {READ_CAP} AS cap,
                     (SELECT t.incarnation FROM {s}.tombstones AS t
                         WHERE t.path = q.path AND s.id IS NULL),
                     q.ord
                 FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bool[])
                     WITH ORDINALITY AS q(path, start, budget, whole, ord)
                 LEFT JOIN {s}.streams AS s ON s.path = q.path
                 LEFT JOIN LATERAL (
                     SELECT array_agg(w.data ORDER BY w.seq) AS data FROM (
                         SELECT seq, data, sum(octet_length(data)) OVER (ORDER BY seq) AS upto
                         FROM {s}.messages
                         WHERE stream_id = s.id AND seq >= q.start AND seq < s.count
                         ORDER BY seq
                         LIMIT {READ_CAP}
                     ) AS w
                     WHERE w.upto <= q.budget OR (w.seq = q.start AND q.whole)
                 ) AS m ON s.id IS NOT NULL",
                stream = qualified("s"),
            )),
            heads: sql(format!(
                "SELECT {STREAM_COLUMNS} FROM {s}.streams WHERE path = ANY($1)"
            )),
            // The streams at paths $1 with how many producers each keeps,
            // and the states of the producers ($3) named for each ($2); a
            // path without a stream comes as a row of nulls but its path,
            // and its tombstone's incarnation if it has one.
            group_load: sql(format!(
                "SELECT {stream},
                     s.producer_count,
                     p.names, p.epochs, p.seqs, p.lasts,
                     q.path,
                     (SELECT t.incarnation FROM {s}.tombstones AS t
                         WHERE t.path = q.path AND s.id IS NULL)
                 FROM unnest($1::text[]) AS q(path)
                 LEFT JOIN {s}.streams AS s ON s.path = q.path
                 LEFT JOIN LATERAL (
                     SELECT array_agg(pr.producer) AS names, array_agg(pr.epoch) AS epochs,
                         array_agg(pr.seq) AS seqs, array_agg(pr.last_ms) AS lasts
                     FROM {s}.producers AS pr
                     WHERE pr.stream_id = s.id AND pr.producer IN (
                         SELECT w.producer FROM unnest($2::text[], $3::text[]) AS w(path, producer)
                         WHERE w.path = s.path)
                 ) AS p ON s.id IS NOT NULL",
                stream = qualified("s"),
            )),
            group_commit: sql(group_commit(&s, false)),
            group_commit_creating: sql(group_commit(&s, true)),
        }
    }
}
