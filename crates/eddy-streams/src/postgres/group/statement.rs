//! The group writer's two statements: loading the streams a group needs
//! (one statement for all of them), and committing the group (one
//! statement, which is its own transaction: PostgreSQL commits it, and
//! flushes its WAL when `synchronous_commit` is on, before it answers).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{PgConnection, Row};

use super::super::listen::committed_line;
use super::super::records::{decode, query};
use super::super::sql::{Sql, STREAM_COLUMN_COUNT};
use super::copy::Known;
use super::records::Draft;
use crate::marks::{signed, Markers};
use crate::retention::to_column;
use crate::rules::ProducerState;

/// Loads the streams at `paths` with their producer counts, and the
/// states of the producers `wanted` names (path, producer).
pub(super) async fn load(
    conn: &mut PgConnection,
    sql: &Arc<Sql>,
    paths: &[String],
    wanted: &[(String, String)],
) -> Result<Vec<(String, Known)>, sqlx::Error> {
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
    rows.iter()
        .map(|row| {
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
        })
        .collect()
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
}

impl<'d> Columns<'d> {
    fn add(&mut self, draft: &'d Draft, announce: &Announce<'_>) {
        let id = draft.base.key;
        let base = &draft.base.record.head;
        let head = &draft.record.head;
        self.ids.push(id);
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
            .push(to_column(&base.config.retention, &base.retained));
        self.retention
            .push(to_column(&head.config.retention, &head.retained));
        self.retention_due_ms.push(draft.record.retention_due_ms());
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
}

/// Commits `drafts` in one statement. Returns the keys of the streams
/// whose drafts it confirmed (written, or checked unchanged); the others
/// changed since the group loaded them, and nothing of them was written.
pub(super) async fn commit(
    conn: &mut PgConnection,
    sql: &Arc<Sql>,
    drafts: &[Draft],
    announce: &Announce<'_>,
) -> Result<HashSet<i64>, sqlx::Error> {
    let mut columns = Columns::default();
    // In id order, as the statement locks them.
    let mut ordered: Vec<&Draft> = drafts.iter().collect();
    ordered.sort_unstable_by_key(|draft| draft.base.key);
    for draft in ordered {
        columns.add(draft, announce);
    }
    let c = columns;
    let rows = query(&sql.group_commit)
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
        .bind(c.retention_due_ms)
        .fetch_all(conn)
        .await?;
    rows.iter()
        .filter_map(|row| row.try_get::<Option<i64>, _>(0).transpose())
        .collect()
}
