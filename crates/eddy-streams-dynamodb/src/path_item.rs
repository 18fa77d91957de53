//! A path's item: the stream record there (with this backend's
//! bookkeeping), or the tombstone of a deleted one.
//!
//! Attributes: `v` the write token (a random value replaced at every
//! write, what commits are conditioned on); for a stream `id` (its data
//! partition), `r` the record's serde form, `acc` the last access a read
//! touch stored, `base` the inherited segments of a fork, `nf` how many
//! fork references it has (items of their own, `keys::Keys::fork_ref`),
//! `np` how many producers it keeps, `rq` when its entry in the
//! retention queue is due and `db` the bytes its retention dropped (see
//! `retention.rs`); for a tombstone `gone` and `inc`, the deleted
//! stream's incarnation.
//!
//! Tables written before forks had items of their own keep a stream's
//! forks in its path item (`fk`, a string set). Such a set is still read,
//! and each later write of the path item moves as much of it into fork
//! references as its transaction has room for (`commit.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Item};
use eddy_streams::backend::StreamRecord;
use eddy_streams::StreamError;

use crate::keys::Keys;

/// What a path holds.
#[derive(Clone, Debug)]
pub(crate) enum PathState {
    /// Nothing.
    Absent,
    /// A deleted stream, with its incarnation.
    Tombstone(u64),
    /// A stream (live, soft-deleted or expired: the engine tells).
    Stream(Box<Stream>),
}

/// A stream at a path.
#[derive(Clone, Debug)]
pub(crate) struct Stream {
    /// Its data partition's id, never reused.
    pub id: Arc<str>,
    /// The engine's record.
    pub record: StreamRecord,
    /// Where the messages before its own come from (a fork's prefix).
    pub base: Vec<Segment>,
    /// How many fork references it has (items of their own).
    pub forks: u64,
    /// The paths forked from it still listed in the path item itself, as
    /// tables written before fork references keep them (`fk`).
    pub legacy_forks: BTreeSet<String>,
    /// How many producers' states it keeps.
    pub producers: u64,
    /// When its entry in the retention queue is due (unix ms), if it has
    /// one.
    pub queued: Option<u64>,
    /// The bytes of the messages before its first kept one: what its
    /// packs count in their bytes before (`b`) besides what it keeps.
    pub dropped_bytes: u64,
}

/// Messages `..end` (from the previous segment's end) are those of the
/// stream `id` at the same positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub id: Arc<str>,
    pub end: u64,
}

/// A path item as read: its write token and what it holds.
pub(crate) struct Loaded {
    pub token: String,
    pub state: PathState,
}

fn corrupt(what: &str) -> StreamError {
    StreamError::internal(format!("a path item of the streams table has {what}"))
}

fn number(item: &Item, name: &str) -> Result<Option<u64>, StreamError> {
    match item.get(name) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n.parse().map(Some).map_err(|_| corrupt("a bad number")),
        Some(_) => Err(corrupt("a number of another type")),
    }
}

fn text<'a>(item: &'a Item, name: &str) -> Result<&'a str, StreamError> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Ok(s),
        _ => Err(corrupt(&format!("no text `{name}`"))),
    }
}

/// Reads a path item.
pub(crate) fn decode(item: &Item) -> Result<Loaded, StreamError> {
    let token = text(item, "v")?.to_owned();
    if matches!(item.get("gone"), Some(AttributeValue::Bool(true))) {
        return Ok(Loaded {
            token,
            state: PathState::Tombstone(number(item, "inc")?.unwrap_or(0)),
        });
    }
    let id: Arc<str> = text(item, "id")?.into();
    let record = item.get("r").cloned().ok_or_else(|| corrupt("no record"))?;
    let mut record: StreamRecord = serde_dynamo::from_attribute_value(record)
        .map_err(|e| StreamError::internal_from("a stream record does not decode", e))?;
    if let Some(acc) = number(item, "acc")? {
        record.slide(i64::try_from(acc).unwrap_or(i64::MAX));
    }
    let base = match item.get("base") {
        None => Vec::new(),
        Some(AttributeValue::L(segments)) => segments
            .iter()
            .map(|segment| match segment {
                AttributeValue::M(m) => Ok(Segment {
                    id: text(m, "i")?.into(),
                    end: number(m, "e")?.ok_or_else(|| corrupt("a segment without end"))?,
                }),
                _ => Err(corrupt("a bad segment")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(corrupt("a bad base")),
    };
    let legacy_forks = match item.get("fk") {
        None => BTreeSet::new(),
        Some(AttributeValue::Ss(forks)) => forks.iter().cloned().collect(),
        Some(_) => return Err(corrupt("bad forks")),
    };
    let forks = number(item, "nf")?.unwrap_or(0);
    let producers = number(item, "np")?.unwrap_or(0);
    let queued = number(item, "rq")?;
    let dropped_bytes = number(item, "db")?.unwrap_or(0);
    Ok(Loaded {
        token,
        state: PathState::Stream(Box::new(Stream {
            id,
            record,
            base,
            forks,
            legacy_forks,
            producers,
            queued,
            dropped_bytes,
        })),
    })
}

/// The item that stores `state` at `path` with write token `token`;
/// `None` for an absent path.
pub(crate) fn encode(
    keys: &Keys,
    path: &str,
    token: &str,
    state: &PathState,
) -> Result<Option<Item>, StreamError> {
    let mut item = keys.path(path);
    item.insert("v".into(), AttributeValue::S(token.into()));
    match state {
        PathState::Absent => return Ok(None),
        PathState::Tombstone(incarnation) => {
            item.insert("gone".into(), AttributeValue::Bool(true));
            item.insert("inc".into(), AttributeValue::N(incarnation.to_string()));
        }
        PathState::Stream(stream) => {
            let record: AttributeValue = serde_dynamo::to_attribute_value(&stream.record)
                .map_err(|e| StreamError::internal_from("a stream record does not encode", e))?;
            item.insert("id".into(), AttributeValue::S(stream.id.to_string()));
            item.insert("r".into(), record);
            item.insert(
                "acc".into(),
                AttributeValue::N(stream.record.accessed_ms().max(0).to_string()),
            );
            if !stream.base.is_empty() {
                let base = stream
                    .base
                    .iter()
                    .map(|segment| {
                        AttributeValue::M(Item::from([
                            ("i".into(), AttributeValue::S(segment.id.to_string())),
                            ("e".into(), AttributeValue::N(segment.end.to_string())),
                        ]))
                    })
                    .collect();
                item.insert("base".into(), AttributeValue::L(base));
            }
            if !stream.legacy_forks.is_empty() {
                let forks = stream.legacy_forks.iter().cloned().collect();
                item.insert("fk".into(), AttributeValue::Ss(forks));
            }
            if stream.forks > 0 {
                item.insert("nf".into(), AttributeValue::N(stream.forks.to_string()));
            }
            if stream.producers > 0 {
                item.insert("np".into(), AttributeValue::N(stream.producers.to_string()));
            }
            if let Some(at) = stream.queued {
                item.insert("rq".into(), AttributeValue::N(at.to_string()));
            }
            if stream.dropped_bytes > 0 {
                let dropped = stream.dropped_bytes.to_string();
                item.insert("db".into(), AttributeValue::N(dropped));
            }
        }
    }
    Ok(Some(item))
}

/// A new write token.
pub(crate) fn new_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}
