//! The append rules, as one pure decision shared by every backend.
//!
//! A backend loads the stream's [`Head`] and the producer's state, asks
//! [`decide`], and writes exactly what the decision says in one atomic
//! commit. Keeping the rules here means memory, SQLite and later backends
//! cannot disagree about them.

use std::sync::Arc;

use crate::config::same_media_type;
use crate::retention::Retained;
use crate::{Append, Appended, Offset, ProducerPosition, StreamConfig, StreamError};

/// The mutable metadata of a live stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// The stream's incarnation: the first part of its offsets, never
    /// reused by a later stream at its path.
    pub incarnation: u64,
    /// The configuration the stream was created with; shared, since it
    /// never changes and a head is copied on every append.
    pub config: Arc<StreamConfig>,
    /// Whether the stream is closed now.
    pub closed: bool,
    /// Messages in the stream.
    pub count: u64,
    /// Bytes in the stream.
    pub bytes: u64,
    /// The last accepted `Stream-Seq` value.
    pub last_stream_seq: Option<String>,
    /// The producer append that closed the stream, so its retry succeeds.
    pub closed_by: Option<ProducerPosition>,
    /// Where its kept messages start, and what the retention policy needs.
    pub retained: Retained,
}

impl Head {
    /// A new stream's head.
    pub fn new(config: StreamConfig, incarnation: u64) -> Self {
        Head {
            incarnation,
            closed: config.closed,
            config: Arc::new(config),
            count: 0,
            bytes: 0,
            last_stream_seq: None,
            closed_by: None,
            retained: Retained::default(),
        }
    }

    /// The offset after the last message.
    pub fn tail(&self) -> Offset {
        self.offset(self.count)
    }

    /// The offset after `count` messages of this stream.
    pub fn offset(&self, count: u64) -> Offset {
        Offset::new(self.incarnation, count)
    }

    /// The public description of this stream.
    pub fn info(&self, path: &str) -> crate::StreamInfo {
        crate::StreamInfo {
            path: path.to_owned(),
            config: StreamConfig::clone(&self.config),
            closed: self.closed,
            tail: self.tail(),
            bytes: self.bytes,
            earliest: self.offset(self.retained.first),
            dropped_deletes: self.dropped_deletes(),
        }
    }

    /// Notes for the retention policy that the tail is where it is at
    /// `now_ms` (after messages were counted in).
    pub fn mark_tail(&mut self, now_ms: i64) {
        self.retained
            .appended(self.mark_age_ms(), self.count, now_ms);
    }

    /// The longest age the stream's policies date messages for: the
    /// retention age, the compaction lag's and its delete lifetime.
    fn mark_age_ms(&self) -> Option<i64> {
        let compaction = self
            .config
            .compaction
            .map(|policy| policy.lag_age_ms().unwrap_or(0).max(policy.deletes_ms()));
        self.config.retention.age_ms().max(compaction)
    }

    /// When the sweep should next drop messages of this stream: under its
    /// retention policy (see [`Retained::due_ms`]) or for a compaction
    /// pass (see [`Compacted::due_ms`](crate::compaction::Compacted::due_ms)),
    /// whichever comes first.
    pub fn retention_due_ms(&self) -> Option<i64> {
        let retention = self
            .retained
            .due_ms(&self.config.retention, self.count, self.bytes);
        let compaction = self.compaction_due_ms();
        match (retention, compaction) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the sweep should start the next compaction pass.
    pub fn compaction_due_ms(&self) -> Option<i64> {
        let policy = self.config.compaction.as_ref()?;
        self.retained
            .compacted
            .due_ms(policy, &self.retained.marks, self.count)
    }

    /// Checks a create against this existing stream.
    pub fn check_recreate(&self, path: &str, config: &StreamConfig) -> Result<(), StreamError> {
        if self.config.equivalent(config) {
            Ok(())
        } else {
            Err(StreamError::ConfigConflict {
                path: path.to_owned(),
                detail: format!(
                    "it has content type `{}`, expiry {:?}, closed at creation: {}, retention `{}`",
                    self.config.content_type,
                    self.config.expiry,
                    self.config.closed,
                    self.config.retention
                ),
            })
        }
    }

    /// Applies a decided write of `messages` to the head.
    pub fn apply(&mut self, messages: &[bytes::Bytes], append: &Append, close: bool) {
        self.push(messages);
        if let Some(seq) = &append.stream_seq {
            self.last_stream_seq = Some(seq.clone());
        }
        if close {
            self.closed = true;
            self.closed_by = append.producer.clone();
        }
    }

    /// Counts `messages` into the head (the data part of [`Head::apply`]).
    pub fn push(&mut self, messages: &[bytes::Bytes]) {
        self.count += messages.len() as u64;
        self.bytes += messages.iter().map(|m| m.len() as u64).sum::<u64>();
    }

    /// The outcome of a decided write, after [`Head::apply`].
    pub fn appended(&self, producer: Option<ProducerState>) -> Appended {
        Appended {
            next_offset: self.tail(),
            duplicate: false,
            producer: producer.map(|p| (p.epoch, p.seq)),
            closed: self.closed,
        }
    }

    /// Builds a read chunk of a read from `start` that found `messages`
    /// at their positions (with holes where compaction dropped some).
    pub fn chunk(&self, start: u64, messages: Vec<(u64, bytes::Bytes)>) -> crate::ReadChunk {
        // Nothing kept after the last one read: the read reached the
        // tail. Otherwise the next read starts after the last one.
        let next = messages
            .last()
            .map_or(self.count, |(position, _)| position + 1);
        let up_to_date = next == self.count;
        let contiguous = messages
            .iter()
            .zip(start..)
            .all(|((position, _), expected)| *position == expected);
        let (positions, messages): (Vec<u64>, Vec<bytes::Bytes>) = messages.into_iter().unzip();
        crate::ReadChunk {
            content_type: self.config.content_type.clone(),
            start: self.offset(start),
            messages,
            positions: (!contiguous).then_some(positions),
            next_offset: self.offset(next),
            up_to_date,
            closed: up_to_date && self.closed,
            retention: self.config.retention,
            compaction: self.config.compaction,
            dropped_deletes: self.dropped_deletes(),
        }
    }

    /// Where compaction dropped deletes past their lifetime.
    fn dropped_deletes(&self) -> Option<crate::DroppedDeletes> {
        self.retained.compacted.dropped_deletes(self.incarnation)
    }
}

/// An idempotent producer's last accepted position on one stream, as a
/// backend stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerState {
    /// The producer's current epoch.
    pub epoch: u64,
    /// The last sequence number accepted in that epoch.
    pub seq: u64,
    /// When its last write was accepted, in unix milliseconds of the
    /// store's clock: a state idle past the store's producer expiry is
    /// forgotten.
    pub last_ms: i64,
}

impl ProducerState {
    /// Whether this state is forgotten at `now_ms`: `expiry_ms` or more
    /// have passed since its last accepted write.
    pub(crate) fn expired(&self, now_ms: i64, expiry_ms: i64) -> bool {
        self.last_ms <= cutoff(now_ms, expiry_ms)
    }
}

/// The latest last write of a producer whose state is forgotten at
/// `now_ms` (see [`ProducerState::expired`]).
pub(crate) fn cutoff(now_ms: i64, expiry_ms: i64) -> i64 {
    now_ms.saturating_sub(expiry_ms)
}

/// What to do with an append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Write the messages; store the producer state if any; close if asked.
    Write {
        producer: Option<ProducerState>,
        close: bool,
    },
    /// Write nothing and answer with this outcome.
    Acknowledge(Appended),
}

/// Decides an append of `message_count` messages to the stream `head` at
/// `now_ms`, given the producer's stored state (`None` for a producer the
/// stream does not know, or whose state expired).
pub(crate) fn decide(
    path: &str,
    head: &Head,
    producer_state: Option<ProducerState>,
    append: &Append,
    message_count: usize,
    now_ms: i64,
) -> Result<Decision, StreamError> {
    if message_count == 0 && !append.close {
        return Err(StreamError::EmptyAppend);
    }
    if let Some(seq) = &append.stream_seq {
        crate::limits::check_stored_value("the Stream-Seq", seq)?;
    }
    if let Some(producer) = &append.producer {
        crate::limits::check_stored_value("the producer id", &producer.id)?;
    }
    if message_count > 0 {
        if let Some(sent) = &append.content_type {
            if !same_media_type(sent, &head.config.content_type) {
                return Err(StreamError::ContentTypeMismatch {
                    expected: head.config.content_type.clone(),
                    received: sent.clone(),
                });
            }
        }
    }
    if head.closed {
        return closed_stream(path, head, append, message_count);
    }
    let producer = match &append.producer {
        None => None,
        Some(position) => match check_producer(position, producer_state, now_ms)? {
            ProducerCheck::Accept(state) => Some(state),
            ProducerCheck::Duplicate(state) => {
                return Ok(Decision::Acknowledge(Appended {
                    next_offset: head.tail(),
                    duplicate: true,
                    producer: Some((state.epoch, state.seq)),
                    closed: head.closed,
                }))
            }
        },
    };
    if let Some(expected) = append.expected_tail {
        // The zero offset names the beginning of any stream: expecting it
        // is expecting an empty stream, whatever its incarnation.
        if expected != head.tail() && !(expected.is_zero() && head.count == 0) {
            return Err(StreamError::OffsetMismatch {
                expected,
                actual: head.tail(),
            });
        }
    }
    if let (Some(sent), Some(last)) = (&append.stream_seq, &head.last_stream_seq) {
        if sent.as_bytes() <= last.as_bytes() {
            return Err(StreamError::StreamSeqConflict {
                last: last.clone(),
                received: sent.clone(),
            });
        }
    }
    Ok(Decision::Write {
        producer,
        close: append.close,
    })
}

/// Appends to a closed stream: a close-only request and the exact retry of
/// the closing producer append succeed without writing; anything else fails.
fn closed_stream(
    path: &str,
    head: &Head,
    append: &Append,
    message_count: usize,
) -> Result<Decision, StreamError> {
    let acknowledged = |producer: Option<(u64, u64)>| {
        Ok(Decision::Acknowledge(Appended {
            next_offset: head.tail(),
            duplicate: true,
            producer,
            closed: true,
        }))
    };
    match (&append.producer, &head.closed_by) {
        (Some(sent), Some(closer)) if append.close && sent == closer => {
            acknowledged(Some((sent.epoch, sent.seq)))
        }
        (None, _) if message_count == 0 && append.close => acknowledged(None),
        (Some(sent), _) if message_count == 0 && append.close => {
            acknowledged(Some((sent.epoch, sent.seq)))
        }
        _ => Err(StreamError::Closed {
            path: path.to_owned(),
            final_offset: head.tail(),
        }),
    }
}

enum ProducerCheck {
    Accept(ProducerState),
    Duplicate(ProducerState),
}

fn check_producer(
    sent: &ProducerPosition,
    stored: Option<ProducerState>,
    now_ms: i64,
) -> Result<ProducerCheck, StreamError> {
    let accept = || {
        Ok(ProducerCheck::Accept(ProducerState {
            epoch: sent.epoch,
            seq: sent.seq,
            last_ms: now_ms,
        }))
    };
    let gap = |expected| {
        Err(StreamError::ProducerSeqGap {
            producer: sent.id.clone(),
            expected,
            received: sent.seq,
        })
    };
    let Some(stored) = stored else {
        return if sent.seq == 0 { accept() } else { gap(0) };
    };
    if sent.epoch < stored.epoch {
        return Err(StreamError::ProducerFenced {
            producer: sent.id.clone(),
            current: stored.epoch,
            received: sent.epoch,
        });
    }
    if sent.epoch > stored.epoch {
        return if sent.seq == 0 {
            accept()
        } else {
            Err(StreamError::ProducerEpochStart {
                producer: sent.id.clone(),
                epoch: sent.epoch,
                seq: sent.seq,
            })
        };
    }
    if sent.seq <= stored.seq {
        Ok(ProducerCheck::Duplicate(stored))
    } else if sent.seq == stored.seq + 1 {
        accept()
    } else {
        gap(stored.seq + 1)
    }
}

/// Whether a stream has expired at `now_ms` (unix milliseconds), given when
/// it was last accessed.
pub(crate) fn expired(config: &StreamConfig, accessed_ms: i64, now_ms: i64) -> bool {
    match config.expiry {
        crate::Expiry::Never => false,
        crate::Expiry::Ttl(secs) => {
            now_ms
                >= accessed_ms
                    .saturating_add(i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX))
        }
        crate::Expiry::At(at) => now_ms >= crate::clock::unix_ms(at),
    }
}

/// Takes messages while they fit in `max_bytes` (always at least one).
pub(crate) fn take_within<I: Iterator<Item = bytes::Bytes>>(
    messages: I,
    max_bytes: usize,
) -> Vec<bytes::Bytes> {
    take_sized(messages, max_bytes, bytes::Bytes::len)
}

/// [`take_within`] of items whose size `size` tells (messages with their
/// positions).
pub(crate) fn take_sized<T, I: Iterator<Item = T>>(
    messages: I,
    max_bytes: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<T> {
    let mut total = 0usize;
    let mut taken = Vec::new();
    for message in messages {
        total += size(&message);
        if !taken.is_empty() && total > max_bytes {
            break;
        }
        taken.push(message);
    }
    taken
}
