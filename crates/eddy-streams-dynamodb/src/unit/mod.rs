//! One atomic unit: records loaded from the table, writes kept until
//! the commit (see `commit.rs`).
//!
//! Every path the unit loads is kept with the write token it had, so
//! that the engine's later loads in the unit see the unit's own writes,
//! and the commit is conditioned on each token: the unit commits only if
//! every path item it read or wrote is still as it read it.

mod reads;
mod writes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use eddy_dynamo::{AttributeValue, Item, Query, SortCondition};
use eddy_streams::backend::{
    ProducerState, RecordReader, Records, Stored, StreamRecord, Sweepable, Unit,
};
use eddy_streams::{PathPage, StreamError};

use crate::backend::Shared;
use crate::commit::{self, overflow};
use crate::errors::table_error;
use crate::keys;
use crate::pack::{self, Collect, Pack, Piece};
use crate::path_item::{self, PathState, Segment, Stream};
use crate::query::all_items;
use crate::retention::{self, Weighed};

/// The key of a stream in a unit: its path and its data partition's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamKey {
    path: Arc<str>,
    id: Arc<str>,
}

impl StreamKey {
    /// The stream's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The stream's data partition id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A unit of the DynamoDB backend.
pub struct DynamoUnit {
    pub(crate) shared: Arc<Shared>,
    pub(crate) state: State,
}

/// Everything a unit read and wrote; cloned for a savepoint.
#[derive(Clone, Default)]
pub(crate) struct State {
    /// Each path the unit loaded, as it stands in the unit.
    pub paths: BTreeMap<String, Entry>,
    /// Data items to write, per stream id.
    pub data: BTreeMap<Arc<str>, Data>,
    /// Producers' states read, per (stream id, producer).
    pub producers_read: HashMap<(Arc<str>, String), Option<ProducerState>>,
    /// Directory entries to write (`true`) or delete.
    pub directory: BTreeMap<String, bool>,
    /// Fork references to write (`true`) or delete, by (source stream
    /// id, fork path).
    pub fork_refs: BTreeMap<(Arc<str>, String), bool>,
    /// The branch points of the forks the unit creates, by the key of
    /// their fork references: the position below which each reads its
    /// source's items (`e` of the reference, `compact.rs`).
    pub fork_ends: BTreeMap<(Arc<str>, String), u64>,
    /// Streams removed: their data items are deleted after the commit.
    pub removed: Vec<Removal>,
    /// Streams created by the unit (new ids): their data partitions hold
    /// nothing before the commit.
    pub fresh: BTreeSet<Arc<str>>,
    /// New streams whose data items were written ahead (`staging.rs`):
    /// the commit deletes their garbage entries.
    pub staged: Vec<Arc<str>>,
    /// Sweep entries to put (with the path they name) or delete, by
    /// (partition, sort key): see `sweep.rs`.
    pub sweep_entries: BTreeMap<(&'static str, String), Option<String>>,
    /// The sort keys of the tombstone entries the unit's sweep found, by
    /// path, for the tombstones it drops.
    pub found_tombstones: HashMap<String, String>,
    /// The paths the retention queue's visit took (`retention.rs`).
    pub retention_visits: BTreeSet<String>,
    /// What retention weighed of each stream, by id, for its drop.
    pub weighed: HashMap<Arc<str>, Weighed>,
    /// The message items a compaction step read of each stream, by id,
    /// for its drops (`compact.rs`).
    pub compacting: HashMap<Arc<str>, Vec<crate::compact::Held>>,
    /// The page of the directory the sweep's walk looks at (`walk.rs`).
    pub walk: Option<crate::walk::Page>,
    /// Where the walk goes on next step, to put in the transaction.
    pub walk_cursor: Option<crate::walk::Cursor>,
}

/// A stream the unit removes.
#[derive(Clone, Debug)]
pub(crate) struct Removal {
    /// Its data partition's id.
    pub id: Arc<str>,
    /// Its path.
    pub path: String,
    /// The path it was forked from, if it is a fork.
    pub source: Option<String>,
    /// Whether it was soft-deleted (retired) when removed.
    pub retired: bool,
    /// Its path item's stream as it stood when removed: what a removal
    /// deferred after the call's transaction keeps there until its step
    /// (`steps.rs`).
    pub before: Box<Stream>,
}

/// A path in a unit.
#[derive(Clone)]
pub(crate) struct Entry {
    /// Its write token as loaded; `None` when it had no item.
    pub token: Option<String>,
    pub state: PathState,
    /// Whether the unit changed it.
    pub dirty: bool,
}

/// A stream's data items to write.
#[derive(Clone, Default)]
pub(crate) struct Data {
    pub packs: Vec<Pack>,
    pub producers: BTreeMap<String, ProducerState>,
    /// Expired producers to delete.
    pub dropped_producers: BTreeSet<String>,
    /// Message items retention or compaction dropped, by sort key, to
    /// delete.
    pub dropped_messages: BTreeSet<String>,
    /// Packs compaction rewrote without the messages it dropped, by sort
    /// key (`compact.rs`).
    pub rewrites: BTreeMap<String, Item>,
    /// The bytes a fork inherited, before its own first message.
    pub inherited_bytes: Option<u64>,
}

impl DynamoUnit {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        DynamoUnit {
            shared,
            state: State::default(),
        }
    }

    /// The path's entry, loaded from the table on first use.
    async fn entry(&mut self, path: &str) -> Result<&mut Entry, StreamError> {
        if !self.state.paths.contains_key(path) {
            let key = self.shared.keys.path(path);
            let item = self
                .shared
                .table
                .get_item(key)
                .await
                .map_err(|e| table_error("reading a stream record", e))?;
            let entry = match item {
                None => Entry {
                    token: None,
                    state: PathState::Absent,
                    dirty: false,
                },
                Some(item) => {
                    let loaded = path_item::decode(&item)?;
                    Entry {
                        token: Some(loaded.token),
                        state: loaded.state,
                        dirty: false,
                    }
                }
            };
            self.state.paths.insert(path.to_owned(), entry);
        }
        self.state
            .paths
            .get_mut(path)
            .ok_or_else(|| StreamError::internal("a loaded path vanished from its unit"))
    }

    /// The stream `key` names, as the unit holds it.
    pub(crate) fn stream(&self, key: &StreamKey) -> Result<&Stream, StreamError> {
        match self.state.paths.get(&*key.path).map(|entry| &entry.state) {
            Some(PathState::Stream(stream)) if stream.id == key.id => Ok(stream),
            _ => Err(StreamError::internal(format!(
                "no record for stream `{}` in its unit",
                key.path
            ))),
        }
    }

    /// The stream `key` names, to change it.
    pub(crate) fn stream_mut(&mut self, key: &StreamKey) -> Result<&mut Stream, StreamError> {
        match self.state.paths.get_mut(&*key.path) {
            Some(entry) => match &mut entry.state {
                PathState::Stream(stream) if stream.id == key.id => {
                    entry.dirty = true;
                    Ok(stream)
                }
                _ => Err(StreamError::internal(format!(
                    "no record for stream `{}` in its unit",
                    key.path
                ))),
            },
            None => Err(StreamError::internal(format!(
                "stream `{}` was not loaded in its unit",
                key.path
            ))),
        }
    }

    /// The segments a stream's messages come from: its inherited prefix,
    /// then its own partition from there on.
    pub(crate) fn segments(&self, key: &StreamKey) -> Result<Vec<(Segment, u64)>, StreamError> {
        let stream = self.stream(key)?;
        let mut start = 0;
        let mut segments = Vec::with_capacity(stream.base.len() + 1);
        for segment in &stream.base {
            segments.push((segment.clone(), start));
            start = segment.end;
        }
        let own = Segment {
            id: Arc::clone(&stream.id),
            end: u64::MAX,
        };
        segments.push((own, start));
        Ok(segments)
    }

    /// Reads positions `collect.next..collect.end` of the stored data
    /// partition `id` into `collect`.
    /// Asks for at most `items` items per page: each holds one message or
    /// more, so a read that wants few messages does not read a whole 1 MB
    /// page of a long stream.
    async fn read_stored(
        &self,
        id: &str,
        collect: &mut Collect,
        items: usize,
    ) -> Result<(), StreamError> {
        let mut query = Query::partition(self.shared.keys.data(id))
            .sort(SortCondition::Between(
                AttributeValue::S(keys::pack(collect.next + 1)),
                AttributeValue::S(keys::AFTER_MESSAGES.into()),
            ))
            .limit(items.max(1));
        while !collect.done() {
            let page = self
                .shared
                .table
                .query(query.clone())
                .await
                .map_err(|e| table_error("reading messages", e))?;
            for item in page.items {
                if collect.done() {
                    break;
                }
                collect.add(pack::piece(item)?)?;
            }
            match page.last_evaluated_key {
                Some(last) if !collect.done() => query = query.start_after(Some(last)),
                _ => break,
            }
        }
        collect.finish()
    }

    /// Whether the positions a read of stream `key` found no item for
    /// are holes compaction left, not items a removal purged meanwhile:
    /// the stream's path item still names its data partition (one
    /// strongly consistent `GetItem`; a removal deletes or replaces the
    /// path item before its items go).
    async fn holes_confirmed(&self, key: &StreamKey) -> Result<bool, StreamError> {
        let item = self
            .shared
            .table
            .get_item(self.shared.keys.path(&key.path))
            .await
            .map_err(|e| table_error("reading a stream record again", e))?;
        let Some(item) = item else {
            return Ok(false);
        };
        Ok(match path_item::decode(&item)?.state {
            PathState::Stream(stream) => stream.id == key.id,
            PathState::Absent | PathState::Tombstone(_) => false,
        })
    }

    /// The stream's bytes before `position` of segment `id`.
    async fn bytes_before(&self, id: &str, position: u64) -> Result<u64, StreamError> {
        if position == 0 {
            return Ok(0);
        }
        if let Some(data) = self.state.data.get(id) {
            if let Some(pack) = data
                .packs
                .iter()
                .find(|p| p.end() >= position && p.first < position)
            {
                let inside = usize::try_from(position - pack.first).unwrap_or(usize::MAX);
                let sizes = pack.messages.iter().take(inside).map(|m| m.len() as u64);
                return Ok(pack.before + sizes.sum::<u64>());
            }
        }
        let query = Query::partition(self.shared.keys.data(id))
            .sort(SortCondition::Between(
                AttributeValue::S(keys::pack(position)),
                AttributeValue::S(keys::AFTER_MESSAGES.into()),
            ))
            .limit(1);
        let page = self
            .shared
            .table
            .query(query)
            .await
            .map_err(|e| table_error("reading a fork's prefix", e))?;
        match page.items.first() {
            Some(item) => pack::bytes_before(item, position),
            None => Err(pack::gap()),
        }
    }

    /// The bytes of the messages stream `key` keeps below `position`
    /// (past its first kept one and before its tail): read from the
    /// nearer end, the messages below or those from `position` on.
    async fn kept_bytes_below(
        &mut self,
        key: &StreamKey,
        position: u64,
    ) -> Result<u64, StreamError> {
        let record = &self.stream(key)?.record;
        let (first, count, bytes) = (record.first(), record.count(), record.bytes());
        let sum = |read: Vec<(u64, Bytes)>| read.iter().map(|(_, m)| m.len() as u64).sum::<u64>();
        if position - first <= count - position {
            Ok(sum(self
                .messages_at(key, first..position, usize::MAX)
                .await?))
        } else {
            let after = sum(self.messages_at(key, position..count, usize::MAX).await?);
            Ok(bytes.saturating_sub(after))
        }
    }

    /// The stored producers of stream `id`, by producer id.
    async fn stored_producers(
        &self,
        id: &str,
    ) -> Result<BTreeMap<String, ProducerState>, StreamError> {
        let query = Query::partition(self.shared.keys.data(id)).sort(SortCondition::BeginsWith(
            AttributeValue::S(keys::PRODUCERS.into()),
        ));
        let items = all_items(&*self.shared.table, query, "reading producers").await?;
        let mut producers = BTreeMap::new();
        for item in &items {
            if let Some((producer, state)) = commit::stored_producer(&self.shared.keys, item)? {
                producers.insert(producer.to_owned(), state);
            }
        }
        Ok(producers)
    }
}

/// The most producer items the at-cap eviction reads per append.
const EXPIRED_SCAN_ITEMS: usize = 1_000;
/// Producer items per page of that read.
const EXPIRED_SCAN_PAGE: usize = 250;
/// The most expired producers one append (or one sweep step) deletes:
/// each is an item of its transaction, which holds at most 100.
pub(crate) const MAX_EXPIRED_DROPS: usize = 16;

/// A savepoint of a [`DynamoUnit`]: what it had read and written.
pub struct Savepoint(State);

impl Unit for DynamoUnit {
    type Mark = Savepoint;

    fn mark(&self) -> Savepoint {
        Savepoint(self.state.clone())
    }

    fn rollback(&mut self, mark: Savepoint) {
        self.state = mark.0;
    }

    fn overflow(&self) -> Option<StreamError> {
        overflow(&self.shared.keys, &self.state)
    }
}

impl DynamoUnit {
    /// Commits the unit (see `commit.rs`).
    pub(crate) async fn commit(self) -> Result<eddy_streams::backend::Commit, StreamError> {
        commit::commit(&self.shared, self.state).await
    }

    /// Whether every path item the unit loaded still holds the write token
    /// it had (or is still absent): every commit that changes a stream's
    /// record, producers or data puts its path item with a new token, so
    /// the unit's reads are then as of one commit. One strongly consistent
    /// read of the loaded path items.
    pub(crate) async fn unchanged(self) -> Result<bool, StreamError> {
        let keys = &self.shared.keys;
        let paths: Vec<&String> = self.state.paths.keys().collect();
        if paths.is_empty() {
            return Ok(true);
        }
        let items = self
            .shared
            .table
            .batch_get_item(paths.iter().map(|path| keys.path(path)).collect())
            .await
            .map_err(|e| table_error("reading back the records a read loaded", e))?;
        let mut now: HashMap<String, String> = HashMap::with_capacity(items.len());
        for item in &items {
            if let (Some(path), Some(AttributeValue::S(token))) =
                (keys.path_of(item), item.get("v"))
            {
                now.insert(path, token.clone());
            }
        }
        Ok(self
            .state
            .paths
            .iter()
            .all(|(path, entry)| now.get(path) == entry.token.as_ref()))
    }
}
