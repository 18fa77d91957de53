//! [`StreamCheckpoints`]: checkpoints kept in streams of the store itself,
//! in two slot streams per binding that take turns, so that a binding's
//! checkpoint storage stays bounded however many units it commits.
//!
//! The protocol, its crash cases and its invariants are written down in
//! `ARCHITECTURE.md` ("Checkpoint streams"); the names here follow it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use eddy_streams::{
    Append, Offset, Payload, ReadFrom, Storage, StreamConfig, StreamError, StreamInfo, StreamPath,
    DEFAULT_MAX_APPEND_BYTES,
};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Slot;
use crate::{
    Checkpoint, CheckpointKey, CheckpointStore, Loaded, ProjectionError, Result, Token,
    CHECKPOINT_PREFIX,
};

/// By default a slot is sealed by the save that makes it hold this many
/// messages (its header and its records)...
pub const SLOT_RECORDS: u64 = 64;
/// ...or this many bytes once it holds [`SLOT_MIN_RECORDS`] records,
/// whichever comes first.
pub const SLOT_BYTES: u64 = 1 << 20;
/// The fewest records a slot takes before its bytes seal it: a binding
/// whose state is over [`SLOT_BYTES`] changes slot every eighth save (a
/// slot change costs a create and a delete besides the save's append),
/// not on every save.
pub const SLOT_MIN_RECORDS: u64 = 8;
/// The most bytes a read of one record asks for.
const READ_BYTES: usize = 1 << 24;

/// The first message of a slot stream: its epoch, so that a writer checks
/// whose a slot is by reading a few bytes, never a large record.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    epoch: u64,
}

/// One message of a slot stream: a save (or a forget) of the binding.
/// ([`encode`] writes the same fields from borrowed parts.)
#[derive(Debug, Deserialize)]
struct Record {
    /// The slot's epoch.
    epoch: u64,
    /// The binding's save count with this record; also the record's
    /// `Stream-Seq`, so a stale writer can never append after it.
    save: u64,
    /// The checkpoint; `None` when the binding was forgotten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<Checkpoint>,
}

/// A slot stream as found by a load.
struct Found {
    epoch: u64,
    info: StreamInfo,
    record: Record,
}

/// Checkpoints kept on a stream store: each binding writes its records to
/// one of two slot streams below its key's path (`…/0` and `…/1`), taking
/// turns. Every save is one append that expects the slot's tail and carries
/// the save count as `Stream-Seq`; the save that fills a slot also closes
/// it, and the next save starts the other slot and deletes the full one.
/// A binding's storage is so at most two slots of [`SLOT_RECORDS`] records
/// (or [`SLOT_BYTES`] bytes plus one record) each, whatever the number of
/// units.
///
/// A checkpoint that vanished (its slots deleted behind the engine's back)
/// fails the load with `checkpoint/vanished` rather than starting over and
/// writing every output again.
#[derive(Clone)]
pub struct StreamCheckpoints {
    storage: Arc<dyn Storage>,
    slot_records: u64,
    slot_bytes: u64,
    append_limit: usize,
}

impl fmt::Debug for StreamCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCheckpoints").finish_non_exhaustive()
    }
}

impl StreamCheckpoints {
    /// Checkpoints on `storage`, with slots of [`SLOT_RECORDS`] records or
    /// [`SLOT_BYTES`] bytes.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        StreamCheckpoints {
            storage,
            slot_records: SLOT_RECORDS,
            slot_bytes: SLOT_BYTES,
            append_limit: DEFAULT_MAX_APPEND_BYTES,
        }
    }

    /// These checkpoints with slots sealed at `records` records or `bytes`
    /// bytes (each at least 1): smaller slots bound the storage tighter and
    /// cost a slot change (about four more store calls) more often.
    pub fn with_slot_limits(mut self, records: u64, bytes: u64) -> Self {
        self.slot_records = records.max(1);
        self.slot_bytes = bytes.max(1);
        self
    }

    /// These checkpoints with another limit on one save: the bytes of
    /// its append, as [`Host::with_append_limit`](crate::Host::with_append_limit)
    /// counts them (the store's default, 8 MiB, unless changed). A save
    /// over it fails with `checkpoint/too-large` and writes nothing.
    pub fn with_append_limit(mut self, bytes: usize) -> Self {
        self.append_limit = bytes.max(1);
        self
    }

    /// Whether a slot of `tail` messages and `bytes` bytes is full.
    fn fills(&self, tail: u64, bytes: u64) -> bool {
        let records = tail.saturating_sub(1);
        tail >= self.slot_records
            || bytes >= self.slot_bytes && records >= SLOT_MIN_RECORDS.min(self.slot_records)
    }

    /// Refuses a save whose append would carry `messages` over the limit.
    fn check_size(&self, key: &CheckpointKey, messages: &[Bytes]) -> Result<()> {
        let size = crate::session::append_size(messages);
        if size <= self.append_limit {
            return Ok(());
        }
        Err(ProjectionError::CheckpointTooLarge {
            checkpoint: key.path.to_string(),
            projection: key.projection.clone(),
            binding: key.params.clone(),
            size,
            limit: self.append_limit,
        })
    }

    /// The epoch of a slot, read from its first message (its header, or
    /// in a slot written before headers, its first record); `None` when
    /// the slot is empty, absent or deleted.
    async fn first_epoch(&self, key: &CheckpointKey, path: &StreamPath) -> Result<Option<u64>> {
        let chunk = match self.storage.read(path, ReadFrom::Beginning, 1).await {
            Ok(chunk) => chunk,
            Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some(first) = chunk.messages.first() else {
            return Ok(None);
        };
        let header: Header =
            serde_json::from_slice(first).map_err(|e| invalid(key, e.to_string()))?;
        Ok(Some(header.epoch))
    }

    /// The path of the slot stream of `epoch`.
    fn slot(key: &CheckpointKey, epoch: u64) -> Result<StreamPath> {
        StreamPath::new(format!("{}/{}", key.path, epoch % 2)).map_err(|e| {
            ProjectionError::invalid(format!("no checkpoint slot path for `{}`: {e}", key.path))
        })
    }

    /// Heads a slot: `Ok(None)` when it is absent, `Err` with `gone` set
    /// when it was deleted.
    async fn head(&self, path: &StreamPath) -> Result<SlotHead> {
        match self.storage.head(path).await {
            Ok(info) => Ok(SlotHead::Live(Box::new(info))),
            Err(StreamError::NotFound { .. }) => Ok(SlotHead::Absent),
            Err(StreamError::Gone { .. }) => Ok(SlotHead::Gone),
            Err(e) => Err(e.into()),
        }
    }

    /// The last record of a slot whose tail is `tail` (at least 1);
    /// `None` when the slot was deleted since its tail was seen.
    async fn last_record(
        &self,
        key: &CheckpointKey,
        path: &StreamPath,
        tail: Offset,
    ) -> Result<Option<Record>> {
        let mut from = tail.with_position(tail.position().saturating_sub(1));
        loop {
            let read = self
                .storage
                .read(path, ReadFrom::Offset(from), READ_BYTES)
                .await;
            let chunk = match read {
                Ok(chunk) => chunk,
                Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if !chunk.up_to_date && chunk.next_offset > from {
                from = chunk
                    .next_offset
                    .with_position(chunk.next_offset.position().saturating_sub(1));
                continue;
            }
            let Some(last) = chunk.messages.last() else {
                return Err(invalid(key, "a checkpoint slot has no record".into()));
            };
            return serde_json::from_slice(last)
                .map(Some)
                .map_err(|e| invalid(key, e.to_string()));
        }
    }

    /// Finds a live, non-empty slot and its last record.
    async fn found(&self, key: &CheckpointKey, epoch_parity: u64) -> Result<Option<Found>> {
        let path = Self::slot(key, epoch_parity)?;
        let SlotHead::Live(info) = self.head(&path).await? else {
            return Ok(None);
        };
        if info.tail.position() == 0 {
            // Created by a save that did not get to write: not a record yet.
            return Ok(None);
        }
        let Some(record) = self.last_record(key, &path, info.tail).await? else {
            return Ok(None);
        };
        if record.epoch % 2 != epoch_parity {
            return Err(invalid(
                key,
                format!(
                    "slot {epoch_parity} holds a record of epoch {}",
                    record.epoch
                ),
            ));
        }
        Ok(Some(Found {
            epoch: record.epoch,
            info: *info,
            record,
        }))
    }

    /// Writes `record` as the binding's next save: appended to the current
    /// slot, or starting the next one when the current is sealed (or there
    /// is none). `seal` closes the slot with this record (a forget).
    async fn write(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: Option<&Checkpoint>,
        seal: bool,
    ) -> Result<Token> {
        let save = expected.saves + 1;
        match expected.slot {
            Some(slot) if !slot.sealed => {
                let body = vec![encode(key, slot.epoch, save, checkpoint)?];
                self.check_size(key, &body)?;
                let bytes = body[0].len() as u64;
                let fills = self.fills(slot.tail.position() + 1, slot.bytes + bytes);
                let path = Self::slot(key, slot.epoch)?;
                let tail = self
                    .append(key, &path, body, slot.tail, save, seal || fills)
                    .await?;
                let mut token = Token {
                    saves: save,
                    slot: Some(Slot {
                        tail,
                        bytes: slot.bytes + bytes,
                        sealed: seal || fills,
                        ..slot
                    }),
                };
                if slot.leftover {
                    self.clear_older(key, slot.epoch, &mut token).await;
                }
                Ok(token)
            }
            Some(slot) => {
                self.start_slot(key, slot.epoch + 1, save, checkpoint, seal, Some(slot))
                    .await
            }
            None => self.start_slot(key, 0, save, checkpoint, seal, None).await,
        }
    }

    /// Starts the slot of `epoch` with the record of `save`, then retires
    /// the `sealed` slot before it. The slot before must be exactly as
    /// sealed (for a binding's first slot: the other slot must not be live)
    /// both before the new slot is written, so a stale writer creates
    /// nothing, and after, so a writer that raced it finds out.
    async fn start_slot(
        &self,
        key: &CheckpointKey,
        epoch: u64,
        save: u64,
        checkpoint: Option<&Checkpoint>,
        seal: bool,
        sealed: Option<Slot>,
    ) -> Result<Token> {
        let header = serde_json::to_vec(&Header { epoch })
            .map(Bytes::from)
            .map_err(|e| invalid(key, e.to_string()))?;
        let messages = vec![header, encode(key, epoch, save, checkpoint)?];
        self.check_size(key, &messages)?;
        let bytes = messages.iter().map(|m| m.len() as u64).sum();
        let seal = seal || self.fills(messages.len() as u64, bytes);
        self.check_before(key, epoch, sealed).await?;
        let path = Self::slot(key, epoch)?;
        self.make_room(key, &path, epoch).await?;
        let tail = self
            .append(key, &path, messages, Offset::ZERO, save, seal)
            .await?;
        if let Err(e) = self.check_before(key, epoch, sealed).await {
            if matches!(e, ProjectionError::CheckpointConflict { .. }) {
                // Another writer moved on: the slot just written is ours
                // alone and must not be mistaken for the binding's.
                if let Err(cleanup) = self.delete(&path).await {
                    tracing::warn!(checkpoint = %key.path, "cannot remove a refused slot: {cleanup}");
                }
            }
            return Err(e);
        }
        let mut token = Token {
            saves: save,
            slot: Some(Slot {
                epoch,
                tail,
                bytes,
                sealed: seal,
                leftover: sealed.is_some(),
            }),
        };
        if sealed.is_some() {
            self.clear_older(key, epoch, &mut token).await;
        }
        Ok(token)
    }

    /// Checks that the slot before `epoch` is still exactly the `sealed`
    /// one (or, without one, that no other slot is live): anything else
    /// means another writer moved the binding.
    async fn check_before(
        &self,
        key: &CheckpointKey,
        epoch: u64,
        sealed: Option<Slot>,
    ) -> Result<()> {
        let before = Self::slot(key, epoch + 1)?;
        let still = match (sealed, self.head(&before).await?) {
            // A deleted slot is what a vanished checkpoint left.
            (None, head) => !matches!(head, SlotHead::Live(_)),
            (Some(slot), SlotHead::Live(info)) if info.closed && info.tail == slot.tail => {
                self.first_epoch(key, &before).await? == Some(slot.epoch)
            }
            (Some(_), _) => false,
        };
        if still {
            Ok(())
        } else {
            Err(conflict(key))
        }
    }

    /// Creates the slot stream at `path` for `epoch`, deleting what an
    /// older epoch left there. Fails with a conflict when it already holds
    /// `epoch` or a later one: another writer started it.
    async fn make_room(&self, key: &CheckpointKey, path: &StreamPath, epoch: u64) -> Result<()> {
        let created = self
            .storage
            .create(path, StreamConfig::json(), Payload::empty())
            .await
            .map_err(|e| write_error(key, e))?;
        if created.created || created.info.tail.position() == 0 {
            return Ok(());
        }
        if self
            .first_epoch(key, path)
            .await?
            .is_some_and(|older| older >= epoch)
        {
            return Err(conflict(key));
        }
        self.delete(path).await?;
        let created = self
            .storage
            .create(path, StreamConfig::json(), Payload::empty())
            .await
            .map_err(|e| write_error(key, e))?;
        if created.created {
            Ok(())
        } else {
            Err(conflict(key))
        }
    }

    /// After a save to the slot of `epoch` succeeded: deletes the other
    /// slot when it holds an older epoch. A failure leaves it for the next
    /// save; the save itself stands.
    async fn clear_older(&self, key: &CheckpointKey, epoch: u64, token: &mut Token) {
        let cleared = async {
            let other = Self::slot(key, epoch + 1)?;
            match self.first_epoch(key, &other).await? {
                Some(older) if older >= epoch => return Ok(false),
                Some(_) => self.delete(&other).await?,
                None => {}
            }
            Ok::<_, ProjectionError>(true)
        }
        .await;
        match cleared {
            Ok(true) => {
                if let Some(slot) = token.slot.as_mut() {
                    slot.leftover = false;
                }
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(
                checkpoint = %key.path,
                "the older checkpoint slot stays until the next save: {e}"
            ),
        }
    }

    async fn delete(&self, path: &StreamPath) -> Result<()> {
        match self.storage.delete(path).await {
            Ok(()) | Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a slot of the binding was deleted: with no record left, that
    /// means its checkpoint was deleted behind the engine's back (a forget
    /// leaves a record).
    async fn vanished(&self, key: &CheckpointKey) -> Result<bool> {
        for parity in [0, 1] {
            if let SlotHead::Gone = self.head(&Self::slot(key, parity)?).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Appends `messages` (one record, after a header when it starts the
    /// slot) expecting `tail`, with `save` as `Stream-Seq`; returns the new
    /// tail.
    async fn append(
        &self,
        key: &CheckpointKey,
        path: &StreamPath,
        messages: Vec<Bytes>,
        tail: Offset,
        save: u64,
        close: bool,
    ) -> Result<Offset> {
        let mut append = Append::messages(messages)
            .expecting_tail(tail)
            .with_stream_seq(format!("{save:020}"));
        append.close = close;
        let appended = self
            .storage
            .append(path, append)
            .await
            .map_err(|e| write_error(key, e))?;
        Ok(appended.next_offset)
    }
}

/// The checkpoint home of [`StreamCheckpoints`], as errors name it.
const STREAMS_HOME: &str = "the store's checkpoint streams (Host::new)";
/// The checkpoint home of a SQL host, as errors name it.
const TABLE_HOME: &str = "a SQL host's checkpoint table (SqliteHost, PgHost)";

impl StreamCheckpoints {
    /// Whether a SQL host's checkpoint table claimed the binding: it
    /// leaves a stream at the binding's own path (its slots are below it).
    async fn claimed_by_table(&self, key: &CheckpointKey) -> Result<bool> {
        Ok(matches!(self.head(&key.path).await?, SlotHead::Live(_)))
    }

    /// Before a SQL host's first save of a binding into its checkpoint
    /// table: refuses a binding whose checkpoint these streams hold (not
    /// forgotten), and claims it for the table, so that these streams
    /// refuse it from now on (`checkpoint/elsewhere` both ways). The claim
    /// is a stream at the binding's path; it guards against running one
    /// binding on both hosts in turn, not against two first writes at
    /// the same instant.
    pub(crate) async fn claim_for_table(&self, key: &CheckpointKey) -> Result<()> {
        let (even, odd) = (self.found(key, 0).await?, self.found(key, 1).await?);
        let current = match (even, odd) {
            (Some(a), Some(b)) => Some(if a.epoch > b.epoch { a } else { b }),
            (a, b) => a.or(b),
        };
        if current.is_some_and(|found| found.record.checkpoint.is_some()) {
            return Err(ProjectionError::CheckpointElsewhere {
                checkpoint: key.path.to_string(),
                here: TABLE_HOME,
                elsewhere: STREAMS_HOME,
            });
        }
        self.storage
            .create(&key.path, StreamConfig::json(), Payload::empty())
            .await?;
        Ok(())
    }
}

/// The keys of the bindings with checkpoint streams in `storage`.
async fn list_keys(storage: &dyn Storage) -> Result<Vec<CheckpointKey>> {
    let mut keys: Vec<CheckpointKey> = Vec::new();
    for info in storage.list(&format!("{CHECKPOINT_PREFIX}/")).await? {
        // A slot stream: `<prefix>/<id>/<version>/<params>/<0|1>`.
        let Some((binding, _slot)) = info.path.rsplit_once('/') else {
            continue;
        };
        let Some(key) = parse_key(binding) else {
            continue;
        };
        keys.push(key);
    }
    keys.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
    keys.dedup_by(|a, b| a.path == b.path);
    Ok(keys)
}

/// The key whose checkpoint lives at `path`, if it is one.
fn parse_key(path: &str) -> Option<CheckpointKey> {
    let rest = path.strip_prefix(CHECKPOINT_PREFIX)?.strip_prefix('/')?;
    let mut parts = rest.splitn(3, '/');
    let projection = unescape(parts.next()?)?;
    let version = parts.next()?.parse().ok()?;
    let params = parts.next()?.to_owned();
    Some(CheckpointKey {
        projection,
        version,
        params,
        path: StreamPath::new(path).ok()?,
    })
}

/// Undoes the checkpoint path's percent-escaping.
fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

enum SlotHead {
    Live(Box<StreamInfo>),
    Absent,
    Gone,
}

#[async_trait]
impl CheckpointStore for StreamCheckpoints {
    /// Lists the slot streams under [`CHECKPOINT_PREFIX`].
    async fn keys(&self) -> Result<Vec<CheckpointKey>> {
        list_keys(self.storage.as_ref()).await
    }

    /// Loads the binding's checkpoint. A writer's slot change between the
    /// looks at the two slots can hide both (the new one looked at before
    /// it was written, the old one after it was deleted), which looks like
    /// a vanished checkpoint: so a load that finds it vanished looks once
    /// more.
    async fn load(&self, key: &CheckpointKey) -> Result<Loaded> {
        match self.load_once(key).await {
            Err(ProjectionError::CheckpointVanished { .. }) => self.load_once(key).await,
            loaded => loaded,
        }
    }

    async fn save(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: &Checkpoint,
    ) -> Result<Token> {
        self.write(key, expected, Some(checkpoint), false).await
    }

    /// Forgets the binding. With [`Token::NONE`] it forgets nothing,
    /// unless the checkpoint vanished: then it records that the binding is
    /// forgotten, so that loads stop failing with `checkpoint/vanished`.
    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<Token> {
        if expected == Token::NONE && !self.vanished(key).await? {
            return Ok(expected);
        }
        self.write(key, expected, None, true).await
    }
}

impl StreamCheckpoints {
    /// One look at both slots (see [`CheckpointStore::load`]).
    async fn load_once(&self, key: &CheckpointKey) -> Result<Loaded> {
        let (even, odd) = (self.found(key, 0).await?, self.found(key, 1).await?);
        let (current, older) = match (even, odd) {
            (Some(a), Some(b)) if a.epoch > b.epoch => (a, Some(b)),
            (Some(a), Some(b)) => (b, Some(a)),
            (Some(a), None) | (None, Some(a)) => (a, None),
            (None, None) if self.vanished(key).await? => {
                return Err(ProjectionError::CheckpointVanished {
                    checkpoint: key.path.to_string(),
                })
            }
            (None, None) if self.claimed_by_table(key).await? => {
                return Err(ProjectionError::CheckpointElsewhere {
                    checkpoint: key.path.to_string(),
                    here: STREAMS_HOME,
                    elsewhere: TABLE_HOME,
                })
            }
            (None, None) => {
                return Ok(Loaded {
                    checkpoint: None,
                    token: Token::NONE,
                })
            }
        };
        let token = Token {
            saves: current.record.save,
            slot: Some(Slot {
                epoch: current.epoch,
                tail: current.info.tail,
                bytes: current.info.bytes,
                sealed: current.info.closed,
                leftover: older.is_some(),
            }),
        };
        Ok(Loaded {
            checkpoint: current.record.checkpoint,
            token,
        })
    }
}

fn encode(
    key: &CheckpointKey,
    epoch: u64,
    save: u64,
    checkpoint: Option<&Checkpoint>,
) -> Result<Bytes> {
    #[derive(Serialize)]
    struct Out<'a> {
        epoch: u64,
        save: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        checkpoint: Option<&'a Checkpoint>,
    }
    serde_json::to_vec(&Out {
        epoch,
        save,
        checkpoint,
    })
    .map(Bytes::from)
    .map_err(|e| invalid(key, format!("the checkpoint does not encode: {e}")))
}

fn invalid(key: &CheckpointKey, reason: String) -> ProjectionError {
    ProjectionError::InvalidCheckpoint {
        checkpoint: key.path.to_string(),
        reason,
    }
}

fn conflict(key: &CheckpointKey) -> ProjectionError {
    ProjectionError::CheckpointConflict {
        checkpoint: key.path.to_string(),
    }
}

/// A refused write to a slot means another writer moved it: its tail, its
/// `Stream-Seq`, its close, or its existence changed.
fn write_error(key: &CheckpointKey, err: StreamError) -> ProjectionError {
    match err {
        StreamError::OffsetMismatch { .. }
        | StreamError::StreamSeqConflict { .. }
        | StreamError::Closed { .. }
        | StreamError::Gone { .. }
        | StreamError::NotFound { .. } => conflict(key),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checkpoint_paths_parse_back_to_their_keys() {
        let key = CheckpointKey::new("order totals/v2", 3, &json!({"shop": "a/b"})).expect("key");
        let parsed = parse_key(key.path.as_str()).expect("a checkpoint path");
        assert_eq!(parsed, key);
        assert!(parse_key("orders/1").is_none());
    }
}
