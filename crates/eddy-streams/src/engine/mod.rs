//! The stream store's rules, once, over the record-level seam.
//!
//! Every operation of [`Storage`](crate::Storage) that decides something
//! lives here: create with its idempotency check, append (through
//! [`rules::decide`](crate::rules::decide)), fork with its checks, delete
//! and soft delete, fork release, expiry, the TTL touch, and the
//! live/soft-deleted/gone/not-found classification. Backends implement
//! [`Records`] and run these functions inside one atomic unit of their
//! own; they never re-decide anything.
//!
//! Each write operation first reads and checks everything, and only then
//! writes. A failed call therefore writes nothing even on a backend whose
//! unit cannot roll back (memory), and a backend's write errors can only
//! come from its storage.

mod compact;
mod lifecycle;
mod snapshot;
mod sweep;

#[cfg(feature = "postgres")]
pub(crate) use compact::CompactPlan;
pub(crate) use compact::CompactStep;
pub(crate) use compact::{steps_within_budget, whole_pass};
pub(crate) use sweep::{COMPACTION_STEP, COMPACTION_STEP_BYTES};

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;

use crate::fork::{branch_message_position, check_refork, plan};
use crate::incarnation::Incarnations;
use crate::payload::{split, Bounds, Split};
use crate::record::{RecordReader, Records, StreamRecord};
use crate::rules::{cutoff, decide, Decision, Head};

/// The most expired producers one append drops from a stream at its
/// producer cap: each makes room for one new producer, so the step pays
/// for the next ones too, while keeping the append's own write small.
pub(crate) const EXPIRED_PRODUCERS_STEP: usize = 64;
use crate::{
    Append, Appended, Clock, Created, Fork, Limits, Payload, ReadChunk, ReadFrom, StreamConfig,
    StreamError, StreamInfo, StreamPath, FORK_MESSAGE_COST,
};
use lifecycle::{collect, existing_or_free, find, has_live_descendant, Slot};

/// The rules with their settings: the limits and the clock.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    /// The largest append accepted, in bytes.
    pub max_append_bytes: usize,
    /// The most idempotent producers whose state one stream keeps.
    pub max_producers: usize,
    /// How long an idle producer's state is kept, in milliseconds.
    pub producer_expiry_ms: i64,
    /// What one write may do besides: messages per append, bytes a fork
    /// copies.
    pub limits: Limits,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// The incarnations this store handed out in this process.
    pub incarnations: Arc<Incarnations>,
    /// The compaction passes under way, between their steps.
    pub passes: Arc<compact::Passes>,
}

/// A read of a stream with a sliding TTL: its expiry moves to `at_ms` plus
/// the TTL.
pub(crate) struct Touch<K> {
    /// The stream read.
    pub key: K,
    /// When it was read.
    pub at_ms: i64,
}

/// Refuses a compaction policy on a stream that is not JSON: only state
/// streams' messages say which row they change.
fn check_compaction(config: &StreamConfig) -> Result<(), StreamError> {
    if config.compaction.is_some() && !config.is_json() {
        return Err(StreamError::InvalidCompaction(format!(
            "only JSON streams (state streams) may be compacted, not `{}`",
            config.content_type
        )));
    }
    Ok(())
}

/// Runs an engine call on a backend whose record operations are ready at
/// once (memory, SQLite).
pub(crate) fn complete<T>(
    call: impl Future<Output = Result<T, StreamError>>,
) -> Result<T, StreamError> {
    call.now_or_never().unwrap_or_else(|| {
        Err(StreamError::internal(
            "a record operation of a synchronous backend did not complete at once",
        ))
    })
}

impl Engine {
    /// The current time in unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The bounds of one append's payload.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            max_bytes: self.max_append_bytes,
            max_messages: self.limits.max_append_messages,
        }
    }

    /// Creates a stream, or checks an existing one against `config`.
    pub async fn create<R: Records>(
        &self,
        records: &mut R,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        crate::limits::check_stored_value("the content type", &config.content_type)?;
        check_compaction(&config)?;
        let now = self.now_ms();
        let messages = split(initial, config.is_json(), self.bounds(), true)?;
        let after = match existing_or_free(records, path, now).await? {
            Slot::Taken(existing) => {
                existing
                    .record
                    .head
                    .check_recreate(path.as_str(), &config)?;
                return Ok(Created {
                    created: false,
                    info: existing.record.head.info(path.as_str()),
                });
            }
            Slot::Free { after } => after,
        };
        let incarnation = self.incarnations.next(self.clock.now_micros(), after);
        let mut record = StreamRecord::new(Head::new(config, incarnation), None, now);
        let key = records.insert(path.as_str(), &record).await?;
        record.head.push(&messages);
        record.head.mark_tail(now);
        let info = record.head.info(path.as_str());
        records.insert_messages(&key, 0, messages).await?;
        records.update(&key, record).await?;
        Ok(Created {
            created: true,
            info,
        })
    }

    /// Appends under the append's conditions. Returns the outcome and,
    /// when the append wrote, the stream's head as it left it. `split` is the
    /// payload split ahead by the caller, used when it was split for the
    /// stream's kind (JSON or not).
    pub async fn append<R: Records>(
        &self,
        records: &mut R,
        path: &StreamPath,
        mut append: Append,
        split_ahead: Option<Split>,
    ) -> Result<(Appended, Option<Head>), StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        let (key, mut record) = (stored.key, stored.record);
        // The rules read the append's conditions, never its payload.
        let payload = std::mem::replace(&mut append.payload, Payload::empty());
        let json = record.head.config.is_json();
        let messages = match split_ahead {
            Some(ahead) if ahead.json == json => ahead.messages,
            _ => split(payload, json, self.bounds(), false)?,
        };
        let stored_state = match &append.producer {
            Some(producer) => records.producer(&key, &producer.id).await?,
            None => None,
        };
        // An expired state is forgotten: the producer starts afresh.
        let producer_state =
            stored_state.filter(|state| !state.expired(now, self.producer_expiry_ms));
        let decision = decide(
            path.as_str(),
            &record.head,
            producer_state,
            &append,
            messages.len(),
            now,
        )?;
        record.accessed_ms = now;
        let (producer, close) = match decision {
            Decision::Acknowledge(outcome) => {
                // Even a duplicate slides the TTL.
                if record.slides() {
                    records.update(&key, record).await?;
                }
                return Ok((outcome, None));
            }
            Decision::Write { producer, close } => (producer, close),
        };
        // A producer whose expired state is still stored takes its own
        // place again; only one the stream keeps nothing for needs room.
        if let (Some(position), None) = (&append.producer, stored_state) {
            self.check_producer_room(records, &key, path, &position.id, now)
                .await?;
        }
        let first = record.head.count;
        record.head.apply(&messages, &append, close);
        record.head.mark_tail(now);
        let (appended, head) = (record.head.appended(producer), record.head.clone());
        records.insert_messages(&key, first, messages).await?;
        records.update(&key, record).await?;
        if let (Some(position), Some(state)) = (&append.producer, producer) {
            records.save_producer(&key, &position.id, state).await?;
        }
        Ok((appended, Some(head)))
    }

    /// Refuses a new producer on a stream that keeps as many producers'
    /// states as allowed; known producers are never refused. At the cap,
    /// the stream's expired producers go first, one bounded step of them
    /// ([`EXPIRED_PRODUCERS_STEP`]), so the cap counts only producers
    /// within the expiry window. A new producer that found any expired
    /// takes a place they left, so the count never grows past the cap,
    /// and a refusal has written nothing (a stream over the cap, after the
    /// cap was lowered, shrinks toward it instead).
    async fn check_producer_room<R: Records>(
        &self,
        records: &mut R,
        key: &R::Key,
        path: &StreamPath,
        producer: &str,
        now: i64,
    ) -> Result<(), StreamError> {
        let count = records.producer_count(key).await?;
        if count < self.max_producers as u64 {
            return Ok(());
        }
        let cutoff = cutoff(now, self.producer_expiry_ms);
        let dropped = records
            .drop_expired_producers(key, cutoff, EXPIRED_PRODUCERS_STEP)
            .await?;
        if dropped == 0 {
            return Err(StreamError::TooManyProducers {
                path: path.to_string(),
                producer: producer.to_owned(),
                limit: self.max_producers,
            });
        }
        Ok(())
    }

    /// Creates `path` as a fork, or checks an existing fork against the
    /// request.
    pub async fn fork<R: Records>(
        &self,
        records: &mut R,
        path: &StreamPath,
        fork: Fork,
    ) -> Result<Created, StreamError> {
        let now = self.now_ms();
        let source = find(records, fork.source.as_str(), now)
            .await?
            .live(&fork.source)?;
        let config = &source.record.head.config;
        let tail = source.record.head.tail();
        let branch_message = match branch_message_position(&fork, config, tail) {
            Some(position) => records
                .messages(&source.key, position..position + 1, usize::MAX)
                .await?
                .pop(),
            None => None,
        };
        let planned = plan(&fork, config, tail, branch_message)?;
        let source_first = source.record.first();
        let needs_source = planned.inherit > 0 || planned.partial.is_some();
        if needs_source && planned.origin.position < source_first {
            return Err(StreamError::OffsetDropped {
                path: fork.source.to_string(),
                offset: source.record.head.offset(planned.origin.position),
                earliest: source.record.head.offset(source_first),
            });
        }
        self.check_fork_copy(&fork.source, &source.record, planned.inherit)?;
        check_compaction(&planned.config)?;
        let initial = split(fork.initial, planned.config.is_json(), self.bounds(), true)?;
        let after = match existing_or_free(records, path, now).await? {
            Slot::Taken(existing) => {
                let record = &existing.record;
                check_refork(
                    path.as_str(),
                    &record.head.config,
                    record.origin.as_ref(),
                    &planned,
                )?;
                return Ok(Created {
                    created: false,
                    info: record.head.info(path.as_str()),
                });
            }
            Slot::Free { after } => after,
        };
        let incarnation = self.incarnations.next(self.clock.now_micros(), after);
        let mut record = StreamRecord::new(
            Head::new(planned.config, incarnation),
            Some(planned.origin),
            now,
        );
        let key = records.insert(path.as_str(), &record).await?;
        let inherited_bytes = records
            .copy_prefix(&source.key, &key, planned.inherit)
            .await?;
        let own: Vec<_> = planned.partial.into_iter().chain(initial).collect();
        record.head.count = planned.inherit;
        record.head.bytes = inherited_bytes;
        record.head.retained.first = source_first.min(planned.inherit);
        if planned.inherit > 0 {
            // What it inherits may have holes: say so (a backup refuses).
            let compacted = &source.record.head.retained.compacted;
            record.head.retained.compacted.dropped = compacted.dropped;
            // And deletes dropped within it, which its readers at offsets
            // of the source may have missed (a delete dropped past the
            // branch point is no part of the fork's history).
            if compacted
                .deletes_dropped_below
                .is_some_and(|below| below <= planned.inherit)
            {
                record.head.retained.compacted.deletes_dropped_below =
                    compacted.deletes_dropped_below;
                record.head.retained.compacted.deletes_dropped = compacted.deletes_dropped;
            }
        }
        record.head.push(&own);
        record.head.mark_tail(now);
        let info = record.head.info(path.as_str());
        records.insert_messages(&key, planned.inherit, own).await?;
        records.update(&key, record).await?;
        Ok(Created {
            created: true,
            info,
        })
    }

    /// Refuses a fork that may copy more than the limit: `inherit` of
    /// the source's first messages. Their size is known without reading
    /// them only when they are all of the source's, so a fork of a prefix
    /// is charged as if it took the source's every byte (the bound is on
    /// the most it may copy; a fork at the beginning copies nothing).
    fn check_fork_copy(
        &self,
        source: &StreamPath,
        record: &StreamRecord,
        inherit: u64,
    ) -> Result<(), StreamError> {
        if inherit == 0 {
            return Ok(());
        }
        let bytes = record
            .head
            .bytes
            .saturating_add(inherit.saturating_mul(FORK_MESSAGE_COST));
        let limit = self.limits.max_fork_bytes;
        if bytes > limit {
            return Err(StreamError::ForkTooLarge {
                source_path: source.to_string(),
                bytes,
                limit,
            });
        }
        Ok(())
    }

    /// Drops `producer`'s state on the live stream at `path` (see
    /// [`Storage::release_producer`](crate::Storage::release_producer));
    /// whether it had any.
    pub async fn release_producer<R: Records>(
        &self,
        records: &mut R,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        records.remove_producer(&stored.key, producer).await
    }

    /// Deletes a stream; one that forks still read from is only retired
    /// (soft-deleted) until they are gone.
    pub async fn delete<R: Records>(
        &self,
        records: &mut R,
        path: &StreamPath,
    ) -> Result<(), StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        if has_live_descendant(records, path.as_str(), now).await? {
            let mut record = stored.record;
            record.soft_deleted = true;
            records.update(&stored.key, record).await
        } else {
            collect(records, path.as_str(), true, now).await
        }
    }

    /// Reads from `from`, at least one message when there is one, more
    /// while the total stays under `max_bytes`. Also returns the TTL touch
    /// the read makes, for the caller to [`slide`](Records::slide) (at
    /// once, or debounced).
    pub async fn read<R: RecordReader>(
        &self,
        records: &mut R,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<(ReadChunk, Option<Touch<R::Key>>), StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        let start = stored.record.start_position(path.as_str(), from)?;
        let head = &stored.record.head;
        let messages = records
            .messages_at(&stored.key, start..head.count, max_bytes)
            .await?;
        let touch = stored.record.slides().then_some(Touch {
            key: stored.key,
            at_ms: now,
        });
        Ok((head.chunk(start, messages), touch))
    }

    /// Describes a live stream.
    pub async fn head<R: RecordReader>(
        &self,
        records: &mut R,
        path: &StreamPath,
    ) -> Result<StreamInfo, StreamError> {
        let now = self.now_ms();
        let stored = find(records, path.as_str(), now).await?.live(path)?;
        Ok(stored.record.head.info(path.as_str()))
    }

    /// One page of the live streams whose path starts with `prefix`
    /// (see [`Storage::list_page`](crate::Storage::list_page)).
    pub async fn list_page<R: RecordReader>(
        &self,
        records: &mut R,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::ListPage, StreamError> {
        let now = self.now_ms();
        let limit = limit.clamp(1, crate::MAX_LIST_PAGE);
        let (records, next) = records.list_page(prefix, after, limit).await?;
        let streams = records
            .into_iter()
            .filter(|(_, record)| record.is_live(now))
            .map(|(path, record)| record.head.info(&path))
            .collect();
        Ok(crate::ListPage { streams, next })
    }

    /// One page of the paths under `prefix` (see
    /// [`Storage::list_paths_page`](crate::Storage::list_paths_page)):
    /// the backend's own when it reads paths alone, else those of a page
    /// of live streams.
    pub async fn list_paths_page<R: RecordReader>(
        &self,
        records: &mut R,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::PathPage, StreamError> {
        let limit = limit.clamp(1, crate::MAX_LIST_PAGE);
        match records.list_paths_page(prefix, after, limit).await? {
            Some(page) => Ok(page),
            None => Ok(self.list_page(records, prefix, after, limit).await?.into()),
        }
    }

    /// How many streams there are under `prefix` (see
    /// [`Storage::count`](crate::Storage::count)).
    pub async fn count<R: RecordReader>(
        &self,
        records: &mut R,
        prefix: &str,
    ) -> Result<usize, StreamError> {
        match records.count(prefix).await? {
            Some(count) => Ok(count),
            None => Ok(self.list(records, prefix).await?.len()),
        }
    }

    /// The live streams whose path starts with `prefix`, sorted by path.
    pub async fn list<R: RecordReader>(
        &self,
        records: &mut R,
        prefix: &str,
    ) -> Result<Vec<StreamInfo>, StreamError> {
        let now = self.now_ms();
        Ok(records
            .list(prefix)
            .await?
            .into_iter()
            .filter(|(_, record)| record.is_live(now))
            .map(|(path, record)| record.head.info(&path))
            .collect())
    }
}

#[cfg(test)]
mod suspending;
