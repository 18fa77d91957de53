//! What a unit stages for its commit: [`Records`] over the unit's state.

use super::*;

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
