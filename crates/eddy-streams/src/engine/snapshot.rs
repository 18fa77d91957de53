//! The backup primitives: a stream's state as of one commit, and its
//! restore, chunk by chunk, into a store where the path is free.

use std::sync::Arc;

use bytes::Bytes;

use super::lifecycle::{existing_or_free, find, Slot};
use super::Engine;
use crate::record::{RecordReader, Records, StreamRecord};
use crate::rules::{Head, ProducerState};
use crate::{
    ProducerPosition, SnapshotProducer, StreamConfig, StreamError, StreamInfo, StreamPath,
    StreamSnapshot,
};

impl Engine {
    /// A live stream's state apart from its messages, with its producers,
    /// read in the caller's atomic unit.
    pub async fn snapshot<R: RecordReader>(
        &self,
        records: &mut R,
        path: &StreamPath,
    ) -> Result<StreamSnapshot, StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        if stored.record.first() > 0 {
            // A snapshot promises the messages at 0..count.
            return Err(StreamError::InvalidArgument(format!(
                "`{path}` cannot be backed up: its retention policy dropped its first {} messages",
                stored.record.first()
            )));
        }
        let producers = records.producers(&stored.key).await?;
        let head = stored.record.head;
        let dropped_deletes = head.retained.compacted.dropped_deletes(head.incarnation);
        Ok(StreamSnapshot {
            path: path.clone(),
            incarnation: head.incarnation,
            config: StreamConfig::clone(&head.config),
            closed: head.closed,
            count: head.count,
            bytes: head.bytes,
            last_stream_seq: head.last_stream_seq,
            closed_by: head.closed_by,
            producers: producers
                .into_iter()
                .map(|(id, state)| SnapshotProducer {
                    position: ProducerPosition::new(id, state.epoch, state.seq),
                    last_ms: Some(state.last_ms),
                })
                .collect(),
            dropped_deletes,
        })
    }

    /// Restores the messages at positions `first..` of `snapshot`. The
    /// chunk at position 0 creates the stream, which must not exist, with
    /// the snapshot's configuration, close, `Stream-Seq` and producer
    /// states; each later chunk must start at the stream's tail, or past
    /// it on a compacted stream (the positions between were dropped). The
    /// last chunk must bring the stream to the snapshot's count and (but
    /// on a compacted stream, which may have dropped more while it was
    /// read) bytes. A restore counts as an access (a sliding TTL starts
    /// again).
    pub async fn restore<R: Records>(
        &self,
        records: &mut R,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        let now = self.now_ms();
        let path = &snapshot.path;
        let (key, mut record) = if first == 0 {
            let Slot::Free { after } = existing_or_free(records, path, now).await? else {
                return Err(StreamError::ConfigConflict {
                    path: path.to_string(),
                    detail: "it exists; a restore only creates streams".into(),
                });
            };
            // A restored stream is a new one: an older backup restored must
            // not hand out offsets that named other data before.
            let mut head = Head {
                incarnation: self.incarnations.next(self.clock.now_micros(), after),
                config: Arc::new(snapshot.config.clone()),
                closed: snapshot.closed,
                count: 0,
                bytes: 0,
                last_stream_seq: snapshot.last_stream_seq.clone(),
                closed_by: snapshot.closed_by.clone(),
                retained: Default::default(),
            };
            if let Some(dropped) = snapshot.dropped_deletes {
                let compacted = &mut head.retained.compacted;
                compacted.deletes_dropped_below = Some(dropped.before.position());
                compacted.deletes_dropped = dropped.count;
            }
            (None, StreamRecord::new(head, None, now))
        } else {
            let stored = find(records, path.as_str(), now).await?.live(path)?;
            let count = stored.record.head.count;
            let holes = snapshot.config.compaction.is_some() && first > count;
            if count != first && !holes {
                return Err(StreamError::OffsetMismatch {
                    expected: stored.record.head.offset(first),
                    actual: stored.record.head.tail(),
                });
            }
            let mut record = stored.record;
            if holes {
                record.head.retained.compacted.dropped += first - count;
                record.head.count = first;
            }
            (Some(stored.key), record)
        };
        record.head.push(&messages);
        // Restored messages count as appended now for an age bound.
        record.head.mark_tail(now);
        record.accessed_ms = record.accessed_ms.max(now);
        let complete = record.head.count == snapshot.count;
        let compacted = snapshot.config.compaction.is_some();
        if record.head.count > snapshot.count
            || (complete && !compacted && record.head.bytes != snapshot.bytes)
        {
            return Err(StreamError::InvalidArgument(format!(
                "the restore of `{path}` does not match its snapshot: {} messages of {} bytes, \
                 expected {} of {}",
                record.head.count, record.head.bytes, snapshot.count, snapshot.bytes
            )));
        }
        let key = match key {
            Some(key) => key,
            None => {
                let mut empty = record.clone();
                empty.head.count = 0;
                empty.head.bytes = 0;
                let key = records.insert(path.as_str(), &empty).await?;
                for producer in &snapshot.producers {
                    let position = &producer.position;
                    let state = ProducerState {
                        epoch: position.epoch,
                        seq: position.seq,
                        last_ms: producer.last_ms.unwrap_or(now),
                    };
                    records.save_producer(&key, &position.id, state).await?;
                }
                key
            }
        };
        let info = record.head.info(path.as_str());
        records.insert_messages(&key, first, messages).await?;
        records.update(&key, record).await?;
        Ok(info)
    }
}
