//! What a unit loads: [`RecordReader`] over the table, with the unit's
//! own writes seen first, and the directory's pages.

use super::*;

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
        _max_bytes: u64,
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
