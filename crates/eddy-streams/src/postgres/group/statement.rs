//! The group writer's two statements: loading the streams a group needs
//! (one statement for all of them, with the tombstones of the paths that
//! hold none), and committing the group (one statement, which is its own
//! transaction: PostgreSQL commits it, and flushes its WAL when
//! `synchronous_commit` is on, before it answers).

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::{PgConnection, Row};

use super::super::listen::committed_line;
use super::super::records::{decode, query};
use super::super::sql::{Sql, STREAM_COLUMN_COUNT};
use super::copy::Known;
use super::records::{Absent, Draft};
use crate::marks::{signed, Markers};
use crate::record::expiry_columns;
use crate::retention::to_column;
use crate::rules::ProducerState;

/// What [`load`] found.
pub(super) struct Loaded {
    /// The streams, by path.
    pub streams: Vec<(String, Known)>,
    /// The paths without a stream, with their tombstones' incarnations.
    pub absent: Absent,
}

/// Loads the streams at `paths` with their producer counts, and the
/// states of the producers `wanted` names (path, producer); of a path
/// without a stream, its tombstone.
pub(super) async fn load(
    conn: &mut PgConnection,
    sql: &Arc<Sql>,
    paths: &[String],
    wanted: &[(String, String)],
) -> Result<Loaded, sqlx::Error> {
    let (want_paths, want_producers): (Vec<&str>, Vec<&str>) = wanted
        .iter()
        .map(|(path, producer)| (path.as_str(), producer.as_str()))
        .unzip();
    let rows = query(&sql.group_load)
        .bind(paths)
        .bind(want_paths)
        .bind(want_producers)
        .fetch_all(conn)
        .await?;
    let mut loaded = Loaded {
        streams: Vec::with_capacity(rows.len()),
        absent: Absent::new(),
    };
    for row in &rows {
        if row.try_get::<Option<i64>, _>(0)?.is_none() {
            let path: String = row.try_get(STREAM_COLUMN_COUNT + 5)?;
            let tombstone: Option<i64> = row.try_get(STREAM_COLUMN_COUNT + 6)?;
            let tombstone = tombstone.map(|incarnation| incarnation as u64);
            loaded.absent.insert(path, tombstone);
            continue;
        }
        loaded.streams.push(stream(row)?);
    }
    Ok(loaded)
}

/// A stream of [`load`]'s rows.
fn stream(row: &sqlx::postgres::PgRow) -> Result<(String, Known), sqlx::Error> {
    let (key, path, record) = decode(row)?;
    let count: i64 = row.try_get(STREAM_COLUMN_COUNT)?;
    let names: Option<Vec<String>> = row.try_get(STREAM_COLUMN_COUNT + 1)?;
    let epochs: Option<Vec<i64>> = row.try_get(STREAM_COLUMN_COUNT + 2)?;
    let seqs: Option<Vec<i64>> = row.try_get(STREAM_COLUMN_COUNT + 3)?;
    let lasts: Option<Vec<i64>> = row.try_get(STREAM_COLUMN_COUNT + 4)?;
    let states = epochs
        .unwrap_or_default()
        .into_iter()
        .zip(seqs.unwrap_or_default())
        .zip(lasts.unwrap_or_default());
    let producers: HashMap<String, ProducerState> = names
        .unwrap_or_default()
        .into_iter()
        .zip(states)
        .map(|(name, ((epoch, seq), last_ms))| {
            let state = ProducerState {
                epoch: epoch as u64,
                seq: seq as u64,
                last_ms,
            };
            (name, state)
        })
        .collect();
    let count = u64::try_from(count).unwrap_or(0);
    Ok((path, Known::new(key, record, producers, count)))
}

/// What the commit statement of a group announces and marks.
pub(super) struct Announce<'a> {
    pub channel: &'a str,
    /// Starts every notification: the sender's id and a newline.
    pub prefix: &'a str,
    pub markers: &'a Markers,
}

/// The columns of a group's commit statement, one array per parameter.
#[derive(Default)]
struct Columns<'d> {
    ids: Vec<i64>,
    was_count: Vec<i64>,
    was_closed: Vec<bool>,
    write: Vec<bool>,
    count: Vec<i64>,
    bytes: Vec<i64>,
    closed: Vec<bool>,
    last_stream_seq: Vec<Option<&'d str>>,
    closed_by_id: Vec<Option<&'d str>>,
    closed_by_epoch: Vec<Option<i64>>,
    closed_by_seq: Vec<Option<i64>>,
    accessed_ms: Vec<i64>,
    new_producers: Vec<i64>,
    message_ids: Vec<i64>,
    message_seqs: Vec<i64>,
    message_data: Vec<&'d [u8]>,
    producer_ids: Vec<i64>,
    producer_names: Vec<&'d str>,
    producer_epochs: Vec<i64>,
    producer_seqs: Vec<i64>,
    producer_lasts: Vec<i64>,
    absent_ids: Vec<i64>,
    absent_names: Vec<&'d str>,
    note_ids: Vec<i64>,
    note_lines: Vec<String>,
    mark_ids: Vec<i64>,
    mark_projections: Vec<String>,
    mark_versions: Vec<i64>,
    mark_params: Vec<String>,
    mark_paths: Vec<String>,
    mark_commits: Vec<i64>,
    relied_ids: Vec<i64>,
    relied_names: Vec<&'d str>,
    relied_epochs: Vec<i64>,
    relied_seqs: Vec<i64>,
    was_retention: Vec<Option<String>>,
    retention: Vec<Option<String>>,
    retention_due_ms: Vec<Option<i64>>,
    created: Created<'d>,
}

/// The columns of the streams a group creates.
#[derive(Default)]
struct Created<'d> {
    keys: Vec<i64>,
    paths: Vec<&'d str>,
    content_types: Vec<&'d str>,
    ttl_secs: Vec<Option<i64>>,
    expires_at_ms: Vec<Option<i64>>,
    created_closed: Vec<bool>,
    closed: Vec<bool>,
    count: Vec<i64>,
    bytes: Vec<i64>,
    last_stream_seq: Vec<Option<&'d str>>,
    closed_by_id: Vec<Option<&'d str>>,
    closed_by_epoch: Vec<Option<i64>>,
    closed_by_seq: Vec<Option<i64>>,
    accessed_ms: Vec<i64>,
    incarnations: Vec<i64>,
    producer_count: Vec<i64>,
    tombstones: Vec<i64>,
    retention: Vec<Option<String>>,
    retention_due_ms: Vec<Option<i64>>,
}

impl<'d> Created<'d> {
    /// The row of `draft`'s new stream, whose path's tombstone had
    /// `tombstone` (0: none) when the group looked.
    fn add(&mut self, draft: &'d Draft, tombstone: u64) {
        let head = &draft.record.head;
        let (ttl, expires_at) = expiry_columns(head.config.expiry);
        let closer = head.closed_by.as_ref();
        self.keys.push(draft.base.key);
        self.paths.push(&draft.path);
        self.content_types.push(&head.config.content_type);
        self.ttl_secs.push(ttl);
        self.expires_at_ms.push(expires_at);
        self.created_closed.push(head.config.closed);
        self.closed.push(head.closed);
        self.count.push(signed(head.count));
        self.bytes.push(signed(head.bytes));
        self.last_stream_seq.push(head.last_stream_seq.as_deref());
        self.closed_by_id.push(closer.map(|p| p.id.as_str()));
        self.closed_by_epoch.push(closer.map(|p| signed(p.epoch)));
        self.closed_by_seq.push(closer.map(|p| signed(p.seq)));
        self.accessed_ms.push(draft.record.accessed_ms);
        self.incarnations.push(signed(head.incarnation));
        self.producer_count.push(signed(draft.new_producers()));
        self.tombstones.push(signed(tombstone));
        self.retention.push(to_column(&head.config, &head.retained));
        self.retention_due_ms.push(draft.record.retention_due_ms());
    }
}

impl<'d> Columns<'d> {
    fn add(&mut self, draft: &'d Draft, announce: &Announce<'_>) {
        let id = draft.base.key;
        let base = &draft.base.record.head;
        let head = &draft.record.head;
        match draft.created {
            Some(tombstone) => self.created.add(draft, tombstone),
            None => self.add_existing(draft),
        }
        // Keyed as the group knows the stream: the statement gives a
        // created one's rows the id it inserted it with.
        for (n, message) in draft.messages.iter().enumerate() {
            self.message_ids.push(id);
            self.message_seqs.push(signed(base.count + n as u64));
            self.message_data.push(message);
        }
        // Sorted, so that concurrent groups lock producer rows in one order.
        let mut saved: Vec<_> = draft.saved.iter().collect();
        saved.sort_unstable_by_key(|(name, _)| *name);
        for (name, state) in saved {
            self.producer_ids.push(id);
            self.producer_names.push(name);
            self.producer_epochs.push(signed(state.epoch));
            self.producer_seqs.push(signed(state.seq));
            self.producer_lasts.push(state.last_ms);
        }
        for name in &draft.absent {
            self.absent_ids.push(id);
            self.absent_names.push(name);
        }
        for (name, state) in &draft.relied {
            self.relied_ids.push(id);
            self.relied_names.push(name);
            self.relied_epochs.push(signed(state.epoch));
            self.relied_seqs.push(signed(state.seq));
        }
        if draft.changes == 0 {
            return;
        }
        self.note_ids.push(id);
        self.note_lines
            .push(committed_line(&draft.path, head.tail(), head.closed));
        let paths = std::iter::repeat_n(draft.path.as_str(), draft.changes as usize);
        for ((owner, params), (path, commits)) in announce.markers.marks(paths) {
            self.mark_ids.push(id);
            self.mark_projections.push(owner.projection);
            self.mark_versions.push(i64::from(owner.version));
            self.mark_params.push(params);
            self.mark_paths.push(path);
            self.mark_commits.push(signed(commits));
        }
    }

    /// The columns of an existing stream's draft, checked at its version.
    fn add_existing(&mut self, draft: &'d Draft) {
        let base = &draft.base.record.head;
        let head = &draft.record.head;
        self.ids.push(draft.base.key);
        self.was_count.push(signed(base.count));
        self.was_closed.push(base.closed);
        self.write.push(draft.written);
        self.count.push(signed(head.count));
        self.bytes.push(signed(head.bytes));
        self.closed.push(head.closed);
        self.last_stream_seq.push(head.last_stream_seq.as_deref());
        let closer = head.closed_by.as_ref();
        self.closed_by_id.push(closer.map(|p| p.id.as_str()));
        self.closed_by_epoch.push(closer.map(|p| signed(p.epoch)));
        self.closed_by_seq.push(closer.map(|p| signed(p.seq)));
        self.accessed_ms.push(draft.record.accessed_ms);
        self.new_producers.push(signed(draft.new_producers()));
        self.was_retention
            .push(to_column(&base.config, &base.retained));
        self.retention.push(to_column(&head.config, &head.retained));
        self.retention_due_ms.push(draft.record.retention_due_ms());
    }
}

/// Commits `drafts` in one statement. Returns the keys of the streams
/// whose drafts it confirmed (written, checked unchanged, or created),
/// each with its row id (a created stream's key is the group's own); the
/// others changed since the group loaded them (or their path was taken),
/// and nothing of them was written.
pub(super) async fn commit(
    conn: &mut PgConnection,
    sql: &Arc<Sql>,
    drafts: &[Draft],
    announce: &Announce<'_>,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let mut columns = Columns::default();
    // In id order, as the statement locks them.
    let mut ordered: Vec<&Draft> = drafts.iter().collect();
    ordered.sort_unstable_by_key(|draft| draft.base.key);
    for draft in ordered {
        columns.add(draft, announce);
    }
    let mut c = columns;
    let n = std::mem::take(&mut c.created);
    let statement = if n.keys.is_empty() {
        &sql.group_commit
    } else {
        &sql.group_commit_creating
    };
    let mut statement = query(statement)
        .bind(c.ids)
        .bind(c.was_count)
        .bind(c.was_closed)
        .bind(c.write)
        .bind(c.count)
        .bind(c.bytes)
        .bind(c.closed)
        .bind(c.last_stream_seq)
        .bind(c.closed_by_id)
        .bind(c.closed_by_epoch)
        .bind(c.closed_by_seq)
        .bind(c.accessed_ms)
        .bind(c.message_ids)
        .bind(c.message_seqs)
        .bind(c.message_data)
        .bind(c.producer_ids)
        .bind(c.producer_names)
        .bind(c.producer_epochs)
        .bind(c.producer_seqs)
        .bind(c.absent_ids)
        .bind(c.absent_names)
        .bind(announce.channel)
        .bind(announce.prefix)
        .bind(c.note_ids)
        .bind(c.note_lines)
        .bind(c.mark_ids)
        .bind(c.mark_projections)
        .bind(c.mark_versions)
        .bind(c.mark_params)
        .bind(c.mark_paths)
        .bind(c.mark_commits)
        .bind(c.relied_ids)
        .bind(c.relied_names)
        .bind(c.relied_epochs)
        .bind(c.relied_seqs)
        .bind(c.producer_lasts)
        .bind(c.new_producers)
        .bind(c.was_retention)
        .bind(c.retention)
        .bind(c.retention_due_ms);
    if !n.keys.is_empty() {
        statement = statement
            .bind(n.keys)
            .bind(n.paths)
            .bind(n.content_types)
            .bind(n.ttl_secs)
            .bind(n.expires_at_ms)
            .bind(n.created_closed)
            .bind(n.closed)
            .bind(n.count)
            .bind(n.bytes)
            .bind(n.last_stream_seq)
            .bind(n.closed_by_id)
            .bind(n.closed_by_epoch)
            .bind(n.closed_by_seq)
            .bind(n.accessed_ms)
            .bind(n.incarnations)
            .bind(n.producer_count)
            .bind(n.tombstones)
            .bind(n.retention)
            .bind(n.retention_due_ms);
    }
    let rows = statement.fetch_all(conn).await?;
    let mut confirmed = HashMap::with_capacity(rows.len());
    for row in &rows {
        let key: Option<i64> = row.try_get(0)?;
        let id: Option<i64> = row.try_get(1)?;
        if let (Some(key), Some(id)) = (key, id) {
            confirmed.insert(key, id);
        }
    }
    Ok(confirmed)
}
