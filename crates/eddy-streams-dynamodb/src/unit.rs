//! One atomic unit: records loaded from the table, writes kept until
//! the commit (see `commit.rs`).
//!
//! Every path the unit loads is kept with the write token it had, so
//! that the engine's later loads in the unit see the unit's own writes,
//! and the commit is conditioned on each token: the unit commits only if
//! every path item it read or wrote is still as it read it.

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

impl RecordReader for DynamoUnit {
    type Key = StreamKey;

    async fn load(&mut self, path: &str) -> Result<Option<Stored<StreamKey>>, StreamError> {
        Ok(match &self.entry(path).await?.state {
            PathState::Stream(stream) => Some(Stored {
                key: StreamKey {
                    path: path.into(),
                    id: Arc::clone(&stream.id),
                },
                record: stream.record.clone(),
            }),
            PathState::Absent | PathState::Tombstone(_) => None,
        })
    }

    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        Ok(match self.entry(path).await?.state {
            PathState::Tombstone(incarnation) => Some(incarnation),
            PathState::Absent | PathState::Stream(_) => None,
        })
    }

    /// The legacy set of the path item, and the stream's fork references:
    /// stored ones (one `Query`, none when its count says it has none)
    /// with the unit's own writes over them.
    async fn forks_of(&mut self, path: &str) -> Result<Vec<String>, StreamError> {
        let (id, stored, mut forks) = match &self.entry(path).await?.state {
            PathState::Stream(stream) => (
                Arc::clone(&stream.id),
                stream.forks,
                stream.legacy_forks.clone(),
            ),
            PathState::Absent | PathState::Tombstone(_) => return Ok(Vec::new()),
        };
        if stored > 0 {
            let query = Query::partition(self.shared.keys.forks(&id));
            for item in all_items(&*self.shared.table, query, "reading forks").await? {
                if let Some(fork) = self.shared.keys.sort_of(&item) {
                    forks.insert(fork.to_owned());
                }
            }
        }
        let written = self
            .state
            .fork_refs
            .range((Arc::clone(&id), String::new())..);
        for ((_, fork), live) in written.take_while(|((source, _), _)| *source == id) {
            if *live {
                forks.insert(fork.clone());
            } else {
                forks.remove(fork);
            }
        }
        Ok(forks.into_iter().collect())
    }

    async fn producer(
        &mut self,
        key: &StreamKey,
        producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        if let Some(state) = self
            .state
            .data
            .get(&key.id)
            .and_then(|data| data.producers.get(producer))
        {
            return Ok(Some(*state));
        }
        if self.state.fresh.contains(&key.id) {
            return Ok(None);
        }
        let cached = (Arc::clone(&key.id), producer.to_owned());
        if let Some(state) = self.state.producers_read.get(&cached) {
            return Ok(*state);
        }
        let item = self
            .shared
            .table
            .get_item(
                self.shared
                    .keys
                    .data_item(&key.id, keys::producer(producer)),
            )
            .await
            .map_err(|e| table_error("reading a producer", e))?;
        let state = item.as_ref().map(commit::producer_state).transpose()?;
        self.state.producers_read.insert(cached, state);
        Ok(state)
    }

    async fn producers(
        &mut self,
        key: &StreamKey,
    ) -> Result<Vec<(String, ProducerState)>, StreamError> {
        let mut producers = self.stored_producers(&key.id).await?;
        if let Some(data) = self.state.data.get(&key.id) {
            producers.extend(
                data.producers
                    .iter()
                    .map(|(id, state)| (id.clone(), *state)),
            );
        }
        Ok(producers.into_iter().collect())
    }

    async fn producer_count(&mut self, key: &StreamKey) -> Result<u64, StreamError> {
        Ok(self.stream(key)?.producers)
    }

    async fn messages(
        &mut self,
        key: &StreamKey,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<Bytes>, StreamError> {
        let read = self.messages_at(key, range, max_bytes).await?;
        Ok(read.into_iter().map(|(_, message)| message).collect())
    }

    /// The kept messages: a compacted stream's packs have holes
    /// (`pack.rs`), and positions no item holds are checked against the
    /// stream's path item (`holes_confirmed`).
    async fn messages_at(
        &mut self,
        key: &StreamKey,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        let pending = self
            .state
            .data
            .get(&key.id)
            .map(|data| data.packs.clone())
            .unwrap_or_default();
        let stored_end = pending.first().map_or(u64::MAX, |pack| pack.first);
        // Positions past the tail hold nothing (the engine may ask).
        let record = &self.stream(key)?.record;
        let count = record.count();
        let tail = pending.last().map_or(count, |pack| pack.end().max(count));
        let range = range.start.min(tail)..range.end.min(tail);
        // At most the messages the budget holds at the stream's average
        // size, and a part item or two more.
        // Of the kept messages: the bytes count no dropped one.
        let kept = count.saturating_sub(record.first());
        let average = (record.bytes() / kept.max(1)).max(1);
        let wanted = (max_bytes as u64 / average).saturating_add(2);
        let items = usize::try_from(wanted.min(range.end.saturating_sub(range.start)) + 2)
            .unwrap_or(usize::MAX);
        let mut collect = Collect::new(range.start, range.end, max_bytes, record.has_holes());
        for (segment, start) in self.segments(key)? {
            let end = if segment.id == key.id {
                segment.end.min(stored_end)
            } else {
                segment.end
            };
            if collect.next >= end || range.end <= start {
                continue;
            }
            collect.end = range.end.min(end);
            if collect.done() {
                break;
            }
            self.read_stored(&segment.id, &mut collect, items).await?;
        }
        collect.end = range.end;
        for pack in pending {
            if collect.done() {
                break;
            }
            let messages = (pack.first..).zip(pack.messages).collect();
            collect.add(Piece::Pack {
                first: pack.first,
                messages,
            })?;
        }
        if collect.skipped && !self.holes_confirmed(key).await? {
            return Err(pack::gap());
        }
        Ok(collect.messages)
    }

    /// As far as the unit's transaction has room to rewrite or delete
    /// the items that hold them (`compact.rs`).
    async fn messages_before(
        &mut self,
        key: &StreamKey,
        range: Range<u64>,
        max: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        crate::compact::read_before(self, key, range, max, max_bytes).await
    }

    async fn room_to_compact(&mut self) -> Result<bool, StreamError> {
        crate::compact::has_room(self)
    }

    /// As far as the unit's transaction has room to drop (`retention.rs`).
    async fn message_sizes(
        &mut self,
        key: &StreamKey,
        range: Range<u64>,
    ) -> Result<Vec<(u64, u64)>, StreamError> {
        retention::weigh(self, key, range).await
    }

    /// The sweep's queues (`sweep.rs`) and the retention queue
    /// (`retention.rs`).
    async fn sweepable(
        &mut self,
        now_ms: i64,
        below: u64,
        max: usize,
    ) -> Result<Sweepable, StreamError> {
        let mut found = crate::sweep::sweepable(self, now_ms, below, max).await?;
        found.retained = retention::due(self, now_ms, max).await?;
        crate::walk::look(self, below, &mut found).await?;
        Ok(found)
    }

    async fn list(&mut self, prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        let query = directory_query(&self.shared.keys, prefix);
        let entries = all_items(&*self.shared.table, query, "listing streams").await?;
        self.records_of(&entries).await
    }

    /// One `Query` of the directory (at most `limit` entries from after
    /// `after`) and one `BatchGetItem` of their path items.
    async fn list_page(
        &mut self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(String, StreamRecord)>, Option<String>), StreamError> {
        let (entries, next) = self.directory_page(prefix, after, limit).await?;
        Ok((self.records_of(&entries).await?, next))
    }

    /// One `Query` of the directory alone: no path item is read.
    async fn list_paths_page(
        &mut self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<PathPage>, StreamError> {
        let (entries, next) = self.directory_page(prefix, after, limit).await?;
        let keys = &self.shared.keys;
        let paths = entries
            .iter()
            .filter_map(|item| keys.sort_of(item).map(str::to_owned))
            .collect();
        Ok(Some(PathPage { paths, next }))
    }

    /// The directory's entries under `prefix`, counted page by page (each
    /// entry is a key alone, so a page holds thousands); no record is read.
    async fn count(&mut self, prefix: &str) -> Result<Option<usize>, StreamError> {
        let mut query = directory_query(&self.shared.keys, prefix);
        let mut count = 0;
        loop {
            let page = self
                .shared
                .table
                .query(query.clone())
                .await
                .map_err(|e| table_error("counting streams", e))?;
            count += page.items.len();
            match page.last_evaluated_key {
                Some(last) => query = query.start_after(Some(last)),
                None => return Ok(Some(count)),
            }
        }
    }
}

/// The query of the directory's entries under `prefix`.
fn directory_query(keys: &keys::Keys, prefix: &str) -> Query {
    let query = Query::partition(keys.directory());
    if prefix.is_empty() {
        query
    } else {
        query.sort(SortCondition::BeginsWith(AttributeValue::S(prefix.into())))
    }
}

impl DynamoUnit {
    /// One `Query` of at most `limit` directory entries under `prefix`
    /// from after `after`, and the path the next page starts after.
    async fn directory_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Item>, Option<String>), StreamError> {
        let keys = &self.shared.keys;
        let mut query = directory_query(keys, prefix).limit(limit.max(1));
        match after {
            // Past every path of the prefix: nothing more.
            Some(after) if after > prefix && !after.starts_with(prefix) => {
                return Ok((Vec::new(), None))
            }
            // A start key must satisfy the key condition (DynamoDB refuses
            // one outside it); one before the prefix starts at it anyway.
            Some(after) if after.starts_with(prefix) => {
                query = query.start_after(Some(keys.directory_entry(after)));
            }
            _ => {}
        }
        let page = self
            .shared
            .table
            .query(query)
            .await
            .map_err(|e| table_error("listing streams", e))?;
        let next = page
            .last_evaluated_key
            .as_ref()
            .and_then(|last| keys.sort_of(last))
            .map(str::to_owned);
        Ok((page.items, next))
    }

    /// The stream records that directory `entries` name, sorted by path
    /// (one `BatchGetItem` per 100).
    async fn records_of(
        &self,
        entries: &[Item],
    ) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        let keys = &self.shared.keys;
        let paths: Vec<String> = entries
            .iter()
            .filter_map(|item| keys.sort_of(item).map(str::to_owned))
            .collect();
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let items: Vec<Item> = self
            .shared
            .table
            .batch_get_item(paths.iter().map(|path| keys.path(path)).collect())
            .await
            .map_err(|e| table_error("listing streams", e))?;
        let mut listed = Vec::with_capacity(items.len());
        for item in items {
            let Some(path) = keys.path_of(&item) else {
                continue;
            };
            if let PathState::Stream(stream) = path_item::decode(&item)?.state {
                listed.push((path, stream.record));
            }
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(listed)
    }
}

impl Records for DynamoUnit {
    async fn insert(
        &mut self,
        path: &str,
        record: &StreamRecord,
    ) -> Result<StreamKey, StreamError> {
        let id: Arc<str> = keys::new_id().into();
        self.state.fresh.insert(Arc::clone(&id));
        let entry = self.entry(path).await?;
        entry.state = PathState::Stream(Box::new(Stream {
            id: Arc::clone(&id),
            record: record.clone(),
            base: Vec::new(),
            forks: 0,
            legacy_forks: Default::default(),
            producers: 0,
            queued: None,
            dropped_bytes: 0,
        }));
        entry.dirty = true;
        self.state.directory.insert(path.to_owned(), true);
        if let Some(at) = record.expires_at_ms() {
            let at = u64::try_from(at).unwrap_or(0);
            let entry = (keys::EXPIRING, keys::sweep_sort(at, &id));
            self.state
                .sweep_entries
                .insert(entry, Some(path.to_owned()));
        }
        retention::requeue(&mut self.state, path);
        if let Some(source) = record.fork_source() {
            let entry = self.entry(source).await?;
            if let PathState::Stream(stream) = &mut entry.state {
                // The source's path item is written too (its count, a new
                // token): units that decided on its forks conflict.
                stream.forks += 1;
                entry.dirty = true;
                let reference = (Arc::clone(&stream.id), path.to_owned());
                self.state.fork_refs.insert(reference, true);
            }
        }
        Ok(StreamKey {
            path: path.into(),
            id,
        })
    }

    async fn update(&mut self, key: &StreamKey, record: StreamRecord) -> Result<(), StreamError> {
        self.stream_mut(key)?.record = record;
        retention::requeue(&mut self.state, &key.path);
        Ok(())
    }

    async fn insert_messages(
        &mut self,
        key: &StreamKey,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), StreamError> {
        // The bytes before, dropped ones included (`retention.rs`).
        let stream = self.stream(key)?;
        let recorded = stream.record.bytes() + stream.dropped_bytes;
        let pack_bytes = self.shared.pack_bytes;
        let data = self.state.data.entry(Arc::clone(&key.id)).or_default();
        let before = match data.packs.last() {
            Some(last) if last.end() == first => last.before + last.bytes as u64,
            Some(_) => {
                return Err(StreamError::internal(
                    "messages inserted out of order in one unit",
                ))
            }
            None => data.inherited_bytes.unwrap_or(recorded),
        };
        pack::push(&mut data.packs, pack_bytes, first, before, messages);
        Ok(())
    }

    async fn copy_prefix(
        &mut self,
        from: &StreamKey,
        to: &StreamKey,
        count: u64,
    ) -> Result<u64, StreamError> {
        let mut base = Vec::new();
        let mut holder = None;
        for (segment, start) in self.segments(from)? {
            if start >= count {
                break;
            }
            let end = segment.end.min(count);
            if end >= count {
                holder = Some(Arc::clone(&segment.id));
            }
            base.push(Segment {
                id: segment.id,
                end,
            });
        }
        // The stream's bytes before `count` and before its first kept
        // message, dropped ones included (`retention.rs`): the fork
        // inherits what is between.
        let source = self.stream(from)?;
        let (first, dropped) = (source.record.first(), source.dropped_bytes);
        let tail = (source.record.count(), source.record.bytes() + dropped);
        let holes = source.record.has_holes();
        let (before, dropped) = match holder {
            _ if count == 0 => (0, 0),
            _ if count == tail.0 => (tail.1, dropped),
            _ if count <= first => (dropped, dropped),
            // Compaction dropped messages anywhere: what is kept below
            // is read, and the fork counts from it.
            _ if holes => (self.kept_bytes_below(from, count).await?, 0),
            Some(id) => (self.bytes_before(&id, count).await?, dropped),
            None => (0, dropped),
        };
        let reference = (Arc::clone(&from.id), to.path().to_owned());
        self.state.fork_ends.insert(reference, count);
        let fork = self.stream_mut(to)?;
        fork.base = base;
        fork.dropped_bytes = dropped;
        self.state
            .data
            .entry(Arc::clone(&to.id))
            .or_default()
            .inherited_bytes = Some(before);
        Ok(before - dropped)
    }

    async fn save_producer(
        &mut self,
        key: &StreamKey,
        producer: &str,
        state: ProducerState,
    ) -> Result<(), StreamError> {
        if self.producer(key, producer).await?.is_none() {
            self.stream_mut(key)?.producers += 1;
        }
        let data = self.state.data.entry(Arc::clone(&key.id)).or_default();
        data.dropped_producers.remove(producer);
        data.producers.insert(producer.to_owned(), state);
        Ok(())
    }

    /// Reads the stream's producer items from the first, in pages, at most
    /// 1 000 (`EXPIRED_SCAN_ITEMS`) of them, and deletes (in the unit's
    /// transaction) up to 16 (`MAX_EXPIRED_DROPS`) of those expired.
    async fn drop_expired_producers(
        &mut self,
        key: &StreamKey,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        let max = max.min(MAX_EXPIRED_DROPS);
        let mut query = Query::partition(self.shared.keys.data(&key.id))
            .sort(SortCondition::BeginsWith(AttributeValue::S(
                keys::PRODUCERS.into(),
            )))
            .limit(EXPIRED_SCAN_PAGE);
        let (mut read, mut expired) = (0, Vec::new());
        while read < EXPIRED_SCAN_ITEMS && expired.len() < max {
            let page = self
                .shared
                .table
                .query(query.clone())
                .await
                .map_err(|e| table_error("reading producers", e))?;
            read += page.items.len();
            for item in &page.items {
                let Some((producer, state)) = commit::stored_producer(&self.shared.keys, item)?
                else {
                    continue;
                };
                if expired.len() < max && state.last_ms <= cutoff_ms {
                    expired.push(producer.to_owned());
                }
            }
            match page.last_evaluated_key {
                Some(last) => query = query.start_after(Some(last)),
                None => break,
            }
        }
        // Only stored states: one this unit wrote is fresh.
        if let Some(data) = self.state.data.get(&key.id) {
            expired.retain(|producer| !data.producers.contains_key(producer));
        }
        if expired.is_empty() {
            return Ok(0);
        }
        let dropped = expired.len() as u64;
        let data = self.state.data.entry(Arc::clone(&key.id)).or_default();
        for producer in expired {
            let cached = (Arc::clone(&key.id), producer.clone());
            data.dropped_producers.insert(producer);
            self.state.producers_read.insert(cached, None);
        }
        let stream = self.stream_mut(key)?;
        stream.producers = stream.producers.saturating_sub(dropped);
        Ok(dropped)
    }

    /// Deletes the items wholly below the drop's end (`retention.rs`).
    async fn drop_messages(
        &mut self,
        key: &StreamKey,
        range: Range<u64>,
    ) -> Result<(), StreamError> {
        retention::drop_messages(self, key, range)
    }

    /// Rewrites or deletes the items that hold them (`compact.rs`).
    async fn drop_positions(
        &mut self,
        key: &StreamKey,
        positions: Vec<u64>,
    ) -> Result<u64, StreamError> {
        crate::compact::drop_positions(self, key, &positions)
    }

    async fn remove(&mut self, key: &StreamKey, path: &str) -> Result<(), StreamError> {
        let entry = self.entry(path).await?;
        let before = match &entry.state {
            PathState::Stream(stream) if stream.id == key.id => stream.clone(),
            _ => return Ok(()),
        };
        let source = before.record.fork_source().map(str::to_owned);
        let retired = before.record.soft_deleted();
        entry.state = PathState::Absent;
        entry.dirty = true;
        self.state.directory.insert(path.to_owned(), false);
        self.state.data.remove(&key.id);
        self.state.removed.push(Removal {
            id: Arc::clone(&key.id),
            path: path.to_owned(),
            source: source.clone(),
            retired,
            before,
        });
        if let Some(source) = source {
            let entry = self.entry(&source).await?;
            if let PathState::Stream(stream) = &mut entry.state {
                entry.dirty = true;
                if !stream.legacy_forks.remove(path) {
                    stream.forks = stream.forks.saturating_sub(1);
                    let reference = (Arc::clone(&stream.id), path.to_owned());
                    self.state.fork_refs.insert(reference, false);
                }
            }
        }
        Ok(())
    }

    async fn slide(&mut self, key: &StreamKey, at_ms: i64) -> Result<(), StreamError> {
        self.stream_mut(key)?.record.slide(at_ms);
        Ok(())
    }

    async fn tombstone(
        &mut self,
        path: &str,
        incarnation: u64,
        _now_ms: i64,
    ) -> Result<(), StreamError> {
        let entry = self.entry(path).await?;
        entry.state = PathState::Tombstone(incarnation);
        entry.dirty = true;
        let removed = self.state.removed.iter().rev().find(|r| r.path == path);
        if let Some(removal) = removed {
            let entry = (keys::TOMBSTONES, keys::sweep_sort(incarnation, &removal.id));
            self.state
                .sweep_entries
                .insert(entry, Some(path.to_owned()));
        }
        Ok(())
    }

    /// One step of the sweep's walk over the directory (`walk.rs`).
    async fn sweep_expired_producers(
        &mut self,
        cutoff_ms: i64,
        max: usize,
    ) -> Result<u64, StreamError> {
        crate::walk::drop_expired(self, cutoff_ms, max).await
    }

    async fn drop_tombstone(&mut self, path: &str, below: u64) -> Result<bool, StreamError> {
        let entry = self.entry(path).await?;
        if !matches!(entry.state, PathState::Tombstone(incarnation) if incarnation < below) {
            return Ok(false);
        }
        entry.state = PathState::Absent;
        entry.dirty = true;
        if let Some(sort) = self.state.found_tombstones.get(path) {
            let entry = (keys::TOMBSTONES, sort.clone());
            self.state.sweep_entries.insert(entry, None);
        }
        Ok(true)
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
