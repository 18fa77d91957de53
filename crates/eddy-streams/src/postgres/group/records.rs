//! The records a group's appends and creates run on: the writer's copy,
//! with each stream's changes kept aside (a draft) until the group's
//! statement confirms them. A stream the group creates is a draft too,
//! under a key of the group's own (negative: row ids are positive) until
//! the statement inserts its row. What the copy does not hold (a stream
//! that is not live, its forks, a tombstone the group's load did not
//! see) is read from the database, on the writer's connection.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use sqlx::{PgConnection, Row};

use super::super::error::statement_error;
use super::super::records::query;
use super::super::sql::Sql;
use super::copy::{Copy, Known};
use super::statement::load;
use crate::record::{RecordReader, Records, Stored, StreamRecord};
use crate::rules::ProducerState;
use crate::touches::Touches;
use crate::StreamError;

/// One stream's changes in a group, not yet confirmed.
#[derive(Debug)]
pub(super) struct Draft {
    /// The stream's path.
    pub path: String,
    /// The copy's record as the group found it: the version the
    /// statement checks.
    pub base: Known,
    /// The record as the group's appends left it.
    pub record: StreamRecord,
    /// Producer states the group saved.
    pub saved: HashMap<String, ProducerState>,
    /// Producers the group took as absent (the statement checks them).
    pub absent: HashSet<String>,
    /// Producer states the group read from the copy (the statement
    /// checks them: another process may have released one).
    pub relied: HashMap<String, ProducerState>,
    /// Messages written, from position `base.record.head.count` on.
    pub messages: Vec<Bytes>,
    /// Whether the record was written (data, a close, or a TTL slide).
    pub written: bool,
    /// How many appends wrote data or a close, or creates made it.
    pub changes: u64,
    /// For a stream the group creates: the incarnation its path's
    /// tombstone had when the group looked (0: none). The statement
    /// inserts its row only while that still holds and no row has the
    /// path.
    pub created: Option<u64>,
}

impl Draft {
    fn new(path: String, base: Known) -> Self {
        Draft {
            path,
            record: base.record.clone(),
            base,
            saved: HashMap::new(),
            absent: HashSet::new(),
            relied: HashMap::new(),
            messages: Vec::new(),
            written: false,
            changes: 0,
            created: None,
        }
    }

    /// How many producers the draft saved that its stream did not have
    /// (the statement checks that each was absent).
    pub fn new_producers(&self) -> u64 {
        self.saved
            .keys()
            .filter(|name| !self.base.producers.contains_key(*name))
            .count() as u64
    }

    /// The copy's new entry once the statement confirmed this draft, as
    /// the stream with row id `key`.
    pub fn confirmed(self, key: i64) -> (String, Known) {
        let added = self.new_producers();
        let mut known = self.base;
        known.key = key;
        known.producer_count += added;
        known.producers.extend(self.saved);
        known.record = self.record;
        (self.path, known)
    }
}

/// Paths the group found no stream at, with the incarnation of each
/// one's tombstone, if any.
pub(super) type Absent = HashMap<String, Option<u64>>;

/// The drafts of one group, by stream key and by path.
#[derive(Debug, Default)]
pub(super) struct Drafts {
    pub by_key: HashMap<i64, Draft>,
    keys: HashMap<String, i64>,
    absent: Absent,
    /// The key of the last stream the group created.
    last_created: i64,
}

impl Drafts {
    /// No drafts yet, over what the group's load found `absent`.
    pub fn new(absent: Absent) -> Self {
        Drafts {
            absent,
            ..Drafts::default()
        }
    }

    fn by_path(&self, path: &str) -> Option<&Draft> {
        self.by_key.get(self.keys.get(path)?)
    }

    /// The key of the stream drafted at `path`, if any.
    pub fn key(&self, path: &str) -> Option<i64> {
        self.keys.get(path).copied()
    }

    fn insert(&mut self, draft: Draft) {
        self.keys.insert(draft.path.clone(), draft.base.key);
        self.by_key.insert(draft.base.key, draft);
    }

    /// The drafts, emptied out.
    pub fn take(&mut self) -> Vec<Draft> {
        self.keys.clear();
        self.by_key.drain().map(|(_, draft)| draft).collect()
    }
}

/// The records of one group.
pub(super) struct GroupRecords<'g> {
    pub copy: &'g Copy,
    pub drafts: &'g mut Drafts,
    pub conn: &'g mut PgConnection,
    pub sql: &'g Arc<Sql>,
    pub touches: &'g Touches,
    /// Set when the call needed a write the group does not make (removing
    /// a dead stream, a tombstone): its caller's transaction decides it.
    pub undecidable: bool,
}

impl GroupRecords<'_> {
    /// Counts a change of the stream at `path` by the call just decided,
    /// when it made one (readers are woken, and marks written, for it).
    pub fn wrote(&mut self, path: &str, changed: bool) {
        let Some(key) = self.drafts.key(path).filter(|_| changed) else {
            return;
        };
        if let Some(draft) = self.drafts.by_key.get_mut(&key) {
            draft.changes += 1;
        }
    }

    /// Refuses a write only a transaction makes, marking the call as one
    /// for its caller's transaction.
    fn undecidable<T>(&mut self, what: &str) -> Result<T, StreamError> {
        self.undecidable = true;
        Err(StreamError::internal(format!(
            "a group does not {what}: its caller's transaction does"
        )))
    }

    fn draft(&mut self, key: i64) -> Result<&mut Draft, StreamError> {
        self.drafts
            .by_key
            .get_mut(&key)
            .ok_or_else(|| StreamError::internal("a group wrote a stream it had not loaded"))
    }

    /// A statement outside the copy, on the writer's connection.
    async fn fetch_all(
        &mut self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<sqlx::postgres::PgRow>, StreamError> {
        query
            .fetch_all(&mut *self.conn)
            .await
            .map_err(statement_error)
    }

    /// Refuses a record operation an append never makes.
    fn unused<T>(&self, what: &str) -> Result<T, StreamError> {
        Err(StreamError::internal(format!(
            "a group of appends does not {what}"
        )))
    }
}

impl RecordReader for GroupRecords<'_> {
    type Key = i64;

    /// From the group's drafts, the copy, or else the database (a stream
    /// created since the group loaded, the forks of one that is not live):
    /// each record loaded is drafted, so the statement checks that the
    /// group decided on its current version.
    async fn load(&mut self, path: &str) -> Result<Option<Stored<i64>>, StreamError> {
        if let Some(draft) = self.drafts.by_path(path) {
            return Ok(Some(Stored {
                key: draft.base.key,
                record: draft.record.clone(),
            }));
        }
        let mut known = match self.copy.get(path) {
            Some(known) => known.clone(),
            None if self.drafts.absent.contains_key(path) => return Ok(None),
            None => {
                let loaded = load(self.conn, self.sql, &[path.to_owned()], &[])
                    .await
                    .map_err(statement_error)?;
                self.drafts.absent.extend(loaded.absent);
                match loaded.streams.into_iter().next() {
                    Some((_, known)) => known,
                    None => return Ok(None),
                }
            }
        };
        known.record.accessed_ms = self.touches.accessed(known.key, known.record.accessed_ms);
        let stored = Stored {
            key: known.key,
            record: known.record.clone(),
        };
        self.drafts.insert(Draft::new(path.to_owned(), known));
        Ok(Some(stored))
    }

    /// As the group's load found it, when it looked at `path`.
    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        if let Some(incarnation) = self.drafts.absent.get(path) {
            return Ok(*incarnation);
        }
        let sql = Arc::clone(&self.sql.tombstoned);
        let rows = self.fetch_all(query(&sql).bind(path)).await?;
        let incarnation = rows
            .first()
            .map(|row| row.try_get::<i64, _>(0).map(|i| i as u64))
            .transpose()
            .map_err(statement_error)?;
        self.drafts.absent.insert(path.to_owned(), incarnation);
        Ok(incarnation)
    }

    async fn forks_of(&mut self, path: &str) -> Result<Vec<String>, StreamError> {
        let sql = Arc::clone(&self.sql.forks_of);
        let rows = self.fetch_all(query(&sql).bind(path)).await?;
        rows.iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(statement_error)
    }

    async fn producer(
        &mut self,
        key: &i64,
        producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        let draft = self.draft(*key)?;
        if let Some(state) = draft.saved.get(producer) {
            return Ok(Some(*state));
        }
        if let Some(state) = draft.base.producers.get(producer) {
            draft.relied.insert(producer.to_owned(), *state);
            return Ok(Some(*state));
        }
        draft.absent.insert(producer.to_owned());
        Ok(None)
    }

    async fn producers(&mut self, _key: &i64) -> Result<Vec<(String, ProducerState)>, StreamError> {
        self.unused("list producers")
    }

    /// The copy's count, which may be stale: a group only counts to add a
    /// producer below the cap; at the cap the append goes back to its
    /// caller, whose transaction counts again.
    async fn producer_count(&mut self, key: &i64) -> Result<u64, StreamError> {
        let draft = self.draft(*key)?;
        Ok(draft.base.producer_count + draft.new_producers())
    }

    async fn messages_at(
        &mut self,
        _key: &i64,
        _range: Range<u64>,
        _max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        self.unused("read messages")
    }

    async fn list(&mut self, _prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        self.unused("list streams")
    }
}

impl Records for GroupRecords<'_> {
    /// Drafts the new stream under a key of the group's own; the
    /// statement inserts its row where the path is still free as the
    /// group saw it (no row, the same tombstone).
    async fn insert(&mut self, path: &str, record: &StreamRecord) -> Result<i64, StreamError> {
        let tombstone = self.drafts.absent.get(path).copied().flatten();
        self.drafts.last_created -= 1;
        let key = self.drafts.last_created;
        let base = Known::new(key, record.clone(), HashMap::new(), 0);
        let mut draft = Draft::new(path.to_owned(), base);
        draft.written = true;
        draft.created = Some(tombstone.unwrap_or(0));
        self.drafts.insert(draft);
        Ok(key)
    }

    async fn update(&mut self, key: &i64, record: StreamRecord) -> Result<(), StreamError> {
        let draft = self.draft(*key)?;
        draft.record = record;
        draft.written = true;
        Ok(())
    }

    async fn insert_messages(
        &mut self,
        key: &i64,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), StreamError> {
        let draft = self.draft(*key)?;
        if first != draft.base.record.head.count + draft.messages.len() as u64 {
            return Err(StreamError::internal(
                "a group's messages do not follow each other",
            ));
        }
        draft.messages.extend(messages);
        Ok(())
    }

    async fn copy_prefix(
        &mut self,
        _from: &i64,
        _to: &i64,
        _count: u64,
    ) -> Result<u64, StreamError> {
        self.unused("fork streams")
    }

    async fn save_producer(
        &mut self,
        key: &i64,
        producer: &str,
        state: ProducerState,
    ) -> Result<(), StreamError> {
        self.draft(*key)?.saved.insert(producer.to_owned(), state);
        Ok(())
    }

    async fn remove(&mut self, _key: &i64, _path: &str) -> Result<(), StreamError> {
        self.undecidable("remove streams")
    }

    async fn slide(&mut self, _key: &i64, _at_ms: i64) -> Result<(), StreamError> {
        self.unused("slide a TTL outside a write")
    }

    async fn tombstone(
        &mut self,
        _path: &str,
        _incarnation: u64,
        _now_ms: i64,
    ) -> Result<(), StreamError> {
        self.undecidable("delete streams")
    }
}
