//! Reads in one statement: the stream's record and the messages a read
//! returns, in one snapshot, on a connection of the store's own (no
//! transaction, no ping), shared with the reads that arrive with it
//! (`batch.rs`). The messages the cache holds (those this store
//! wrote lately) are not fetched again: the statement fetches from where
//! the cache ends, so a read of recent data transfers only its head.
//!
//! The engine decides as for every read, over records that answer from
//! that one row. A read the row cannot answer (a stream that is not live,
//! whose forks the engine must look at; a replaced stream whose cached
//! messages no longer apply; more messages than one statement takes) says
//! so, and the store reads again in a read-only transaction.

use std::ops::Range;

use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::batch::Ask;
use super::error::statement_error;
use super::records::decode;
use super::sql::STREAM_COLUMN_COUNT;
use super::transaction::Wiring;
use crate::engine::Touch;
use crate::record::{RecordReader, Stored, StreamRecord};
use crate::rules::{take_within, ProducerState};
use crate::{ReadChunk, ReadFrom, StreamError, StreamInfo, StreamPath};

/// The largest byte budget a statement is given (its arithmetic stays
/// far from overflowing).
const MAX_BUDGET: usize = 1 << 40;

/// Reads `path` from `from` in one statement; `None` when the statement
/// could not answer (read again in a transaction).
pub(super) async fn read(
    wiring: &Wiring,
    path: &StreamPath,
    from: ReadFrom,
    max_bytes: usize,
) -> Result<Option<(ReadChunk, Option<Touch<i64>>)>, StreamError> {
    let start = match from {
        ReadFrom::Beginning => Some(0),
        ReadFrom::Offset(offset) => Some(offset.position()),
        ReadFrom::Tail => None,
    };
    let max_bytes = max_bytes.min(MAX_BUDGET);
    let held = start.and_then(|start| wiring.cache.from(path.as_str(), start, max_bytes));
    // Where the statement's messages start, their budget, and whether the
    // first one counts whatever its size.
    let (fetch, budget, first) = match (&held, start) {
        (Some(held), _) if held.full => (u64::MAX, 0, false),
        (Some(held), _) => (
            held.end,
            max_bytes.saturating_sub(held.bytes),
            held.messages.is_empty(),
        ),
        (None, Some(start)) => (start, max_bytes, true),
        (None, None) => (u64::MAX, 0, false),
    };
    let row = fetch_row(wiring, path.as_str(), fetch, budget, first).await?;
    let mut records = OneRow::new(&row, path.as_str(), wiring).map_err(statement_error)?;
    // A start before the first message kept fetched rows from later on:
    // they are not at `start`, so neither cached nor used (the engine
    // reads again in a transaction, or refuses the offset).
    let stored = records.stored.as_ref();
    // A compacted stream's messages have holes the statement does not
    // tell: the store reads it in a transaction, and never caches it
    // from a read.
    let stored = stored.filter(|s| s.record.head.config.compaction.is_none());
    let start = start.filter(|start| stored.is_some_and(|s| *start >= s.record.first()));
    if let (Some(stored), Some(start)) = (stored, start) {
        let fetched = Fetched::from_row(&row).map_err(statement_error)?;
        // Committed messages never change: the next read of them needs
        // only its head.
        wiring
            .cache
            .fill(stored.key, path.as_str(), fetch, fetched.messages.clone());
        records.prefetched = prefetched(stored, start, fetch, held, fetched);
    }
    let outcome = wiring
        .engine
        .read(&mut records, path, from, max_bytes)
        .await;
    records.answer(outcome).transpose()
}

/// Describes a live stream in one statement; `None` when it could not.
pub(super) async fn head(
    wiring: &Wiring,
    path: &StreamPath,
) -> Result<Option<StreamInfo>, StreamError> {
    let row = fetch_row(wiring, path.as_str(), u64::MAX, 0, false).await?;
    let mut records = OneRow::new(&row, path.as_str(), wiring).map_err(statement_error)?;
    let outcome = wiring.engine.head(&mut records, path).await;
    records.answer(outcome).transpose()
}

/// A read's row of the next read statement.
async fn fetch_row(
    wiring: &Wiring,
    path: &str,
    fetch: u64,
    budget: usize,
    first: bool,
) -> Result<PgRow, StreamError> {
    let ask = Ask {
        path: path.to_owned(),
        fetch,
        budget,
        first,
    };
    wiring.batcher.fetch(ask).await
}

/// The messages of a read from `start`, as far as the row and the cache
/// tell them: `None` when the read needs more than they hold.
fn prefetched(
    stored: &Stored<i64>,
    start: u64,
    fetch: u64,
    held: Option<crate::cache::Held>,
    fetched: Fetched,
) -> Option<Prefetched> {
    let count = stored.record.head.count;
    let kept = fetched.messages.len() as u64;
    // Fewer rows than the statement could take: it reached the tail or
    // its budget. Exactly as many: there may be more within the budget.
    let ended = kept < fetched.cap || fetch.saturating_add(kept) >= count;
    let mut messages = match held {
        // Cached messages of another stream at this path (deleted and
        // created again): the statement did not fetch from `start`.
        Some(held) if held.key != stored.key => return None,
        Some(held) if held.full => {
            return Some(Prefetched {
                first: start,
                messages: held.messages,
                complete: true,
            })
        }
        Some(held) => held.messages,
        None => Vec::new(),
    };
    messages.extend(fetched.messages);
    Some(Prefetched {
        first: start,
        messages,
        complete: ended,
    })
}

/// The messages the statement fetched, and how many rows it could take.
struct Fetched {
    messages: Vec<Bytes>,
    cap: u64,
}

impl Fetched {
    fn from_row(row: &PgRow) -> Result<Self, sqlx::Error> {
        let data: Vec<Vec<u8>> = row
            .try_get::<Option<Vec<Vec<u8>>>, _>(STREAM_COLUMN_COUNT)?
            .unwrap_or_default();
        let cap = row
            .try_get::<Option<i64>, _>(STREAM_COLUMN_COUNT + 1)?
            .unwrap_or(0);
        Ok(Fetched {
            messages: data.into_iter().map(Bytes::from).collect(),
            cap: u64::try_from(cap).unwrap_or(0),
        })
    }
}

/// A read's messages gathered ahead.
struct Prefetched {
    /// The position of the first.
    first: u64,
    messages: Vec<Bytes>,
    /// Whether they are all a read from `first` returns.
    complete: bool,
}

/// Records that answer from one row of [`Sql::read`](super::sql::Sql).
struct OneRow {
    /// The path the row is about.
    path: String,
    stored: Option<Stored<i64>>,
    /// The incarnation the path's tombstone keeps, if it has one.
    tombstoned: Option<u64>,
    prefetched: Option<Prefetched>,
    /// Whether the engine asked for something the row does not hold.
    missed: bool,
}

impl OneRow {
    /// The records of `row`, a read of `path`.
    fn new(row: &PgRow, path: &str, wiring: &Wiring) -> Result<Self, sqlx::Error> {
        let stored = match row.try_get::<Option<i64>, _>(0)? {
            Some(_) => {
                let (key, _, mut record) = decode(row)?;
                record.accessed_ms = wiring.touches.accessed(key, record.accessed_ms);
                Some(Stored { key, record })
            }
            None => None,
        };
        Ok(OneRow {
            path: path.to_owned(),
            stored,
            tombstoned: row
                .try_get::<Option<i64>, _>(STREAM_COLUMN_COUNT + 2)?
                .map(|incarnation| incarnation as u64),
            prefetched: None,
            missed: false,
        })
    }

    /// The engine's `outcome`, unless it asked for what the row does not
    /// hold (then its outcome says nothing).
    fn answer<T>(&self, outcome: Result<T, StreamError>) -> Option<Result<T, StreamError>> {
        (!self.missed).then_some(outcome)
    }

    /// Notes that the row cannot answer.
    fn miss<T>(&mut self) -> Result<T, StreamError> {
        self.missed = true;
        Err(StreamError::internal(
            "a one-statement read needed more than its row",
        ))
    }
}

impl RecordReader for OneRow {
    type Key = i64;

    async fn load(&mut self, path: &str) -> Result<Option<Stored<i64>>, StreamError> {
        if path != self.path {
            return self.miss();
        }
        Ok(self.stored.clone())
    }

    async fn tombstoned(&mut self, path: &str) -> Result<Option<u64>, StreamError> {
        if path != self.path {
            return self.miss();
        }
        Ok(self.tombstoned)
    }

    async fn forks_of(&mut self, _path: &str) -> Result<Vec<String>, StreamError> {
        self.miss()
    }

    async fn producer(
        &mut self,
        _key: &i64,
        _producer: &str,
    ) -> Result<Option<ProducerState>, StreamError> {
        self.miss()
    }

    async fn producers(&mut self, _key: &i64) -> Result<Vec<(String, ProducerState)>, StreamError> {
        self.miss()
    }

    async fn producer_count(&mut self, _key: &i64) -> Result<u64, StreamError> {
        self.miss()
    }

    /// The prefetched messages, numbered from `range.start`: a compacted
    /// stream, whose messages have holes, is never prefetched.
    async fn messages_at(
        &mut self,
        key: &i64,
        range: Range<u64>,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, StreamError> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let same = self.stored.as_ref().is_some_and(|s| s.key == *key);
        match self.prefetched.take() {
            Some(p) if same && p.first == range.start && p.complete => {
                let messages = take_within(p.messages.into_iter(), max_bytes);
                Ok((range.start..).zip(messages).collect())
            }
            _ => self.miss(),
        }
    }

    async fn list(&mut self, _prefix: &str) -> Result<Vec<(String, StreamRecord)>, StreamError> {
        self.miss()
    }
}
