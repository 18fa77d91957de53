//! Checkpoints: what a binding has committed, moved only by
//! compare-and-set on a token.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use eddy_streams::{Offset, StreamPath};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::params::{escape, params_key};
use crate::{ProjectionError, Range, Result};

#[cfg(doc)]
use crate::StreamCheckpoints;

/// The prefix of the streams Eddy keeps for itself (checkpoints, and
/// later wake marks). `eddy serve` refuses client writes and deletes under
/// it unless the request is authorised for administration.
pub const RESERVED_PREFIX: &str = "__eddy/";

/// The prefix of the streams that hold checkpoints.
pub const CHECKPOINT_PREFIX: &str = "__eddy/checkpoints";

/// Which checkpoint: projection id, version and the binding's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CheckpointKey {
    /// The projection id.
    pub projection: String,
    /// The declaration version (generation).
    pub version: u32,
    /// The binding's parameters, as a stable string.
    pub params: String,
    /// Where the binding's checkpoint lives:
    /// `__eddy/checkpoints/<id>/<version>/<params>`. [`StreamCheckpoints`]
    /// keeps it in the streams below this path.
    pub path: StreamPath,
}

impl CheckpointKey {
    /// The key of the binding of projection `projection`, declaration
    /// `version`, with `params` (a JSON object, or `null` for none).
    /// [`Bound::checkpoint_key`](crate::Bound::checkpoint_key) gives a
    /// bound projection's.
    pub fn new(projection: &str, version: u32, params: &Value) -> Result<Self> {
        let params = params_key(params);
        let path = StreamPath::new(format!(
            "{CHECKPOINT_PREFIX}/{}/{version}/{params}",
            escape(projection)
        ))
        .map_err(|e| {
            ProjectionError::invalid(format!("no checkpoint path for the binding: {e}"))
        })?;
        Ok(CheckpointKey {
            projection: projection.to_owned(),
            version,
            params,
            path,
        })
    }

    /// The key of a binding whose parameter key `params` is already
    /// encoded (as a checkpoint table stores it).
    pub(crate) fn from_stored(projection: String, version: u32, params: String) -> Result<Self> {
        let path = StreamPath::new(format!(
            "{CHECKPOINT_PREFIX}/{}/{version}/{params}",
            escape(&projection)
        ))
        .map_err(|e| {
            ProjectionError::invalid(format!("no checkpoint path for the binding: {e}"))
        })?;
        Ok(CheckpointKey {
            projection,
            version,
            params,
            path,
        })
    }
}

/// Where one input stands for a binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputMark {
    /// The offset after the last committed item.
    pub offset: Offset,
    /// The input's close was committed (its closed unit ran).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,
    /// The input's deletion was committed (its final unit ran).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// The input stream's path, so that an operator's tool can measure
    /// the binding's lag against it (`eddy status`). Absent in checkpoints
    /// written before it was recorded, until their next commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// How many deletes the input's compaction had dropped past their
    /// lifetime when the binding last read it (see
    /// [`Range::deletes_seen`](crate::Range::deletes_seen)): resuming
    /// before where one was dropped is safe only while it is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletes_seen: Option<u64>,
}

/// A unit whose input ranges are pinned but whose commit has not settled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The unit key.
    pub key: String,
    /// The pinned range of each input.
    pub ranges: BTreeMap<String, Range>,
    /// For each output the unit writes in more than one append (its items
    /// are over the store's append limit): how many items each append
    /// holds, in order, so that a replay sends the same appends with the
    /// same producer positions. An output not listed is one append.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub appends: BTreeMap<String, Vec<u64>>,
}

/// Why a binding's last run failed, kept in its checkpoint for operators
/// (`eddy status`) until a unit settles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The error's stable code (`handler/failed`, `input/invalid-item`, …).
    pub code: String,
    /// The error's text.
    pub message: String,
    /// When the run failed, in unix milliseconds.
    pub at_ms: u64,
}

/// What a binding has committed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The encoded state (`null` for projections without state).
    pub state: Value,
    /// Where each input stands, by input name.
    pub inputs: BTreeMap<String, InputMark>,
    /// The pinned unit, if one has not settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// A value fixed when the checkpoint is first written; part of every
    /// producer id, so a forgotten and rebuilt binding starts new producers.
    #[serde(default)]
    pub generation: String,
    /// The next producer sequence number of each output, by output name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_seq: BTreeMap<String, u64>,
    /// Units committed so far.
    #[serde(default)]
    pub units: u64,
    /// When the last unit settled, in unix milliseconds (for operators;
    /// nothing in the engine reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_at_ms: Option<u64>,
    /// The failure of the binding's last run, when no unit settled since
    /// (for operators; nothing in the engine reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// The version of a binding's checkpoint that a writer last saw. Saving
/// with a token that is no longer current fails with `checkpoint/conflict`.
///
/// Its [`version`](Token::version) counts the saves of the binding (forgets
/// included); a store that keeps one row per binding can use it alone
/// ([`Token::from_version`]). [`StreamCheckpoints`] adds where the last save
/// landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    pub(crate) saves: u64,
    pub(crate) slot: Option<Slot>,
}

/// Where [`StreamCheckpoints`] wrote a binding's last record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Slot {
    /// The slot's epoch: it counts the slot streams the binding has used;
    /// the slot's path ends in `epoch % 2`.
    pub epoch: u64,
    /// The slot's tail: its records are the positions before it. Its
    /// incarnation fences a slot stream created again at the same path.
    pub tail: Offset,
    /// Bytes in the slot.
    pub bytes: u64,
    /// The slot is closed: the next save starts the next slot.
    pub sealed: bool,
    /// The other slot still holds an older epoch, to be deleted.
    pub leftover: bool,
}

impl Token {
    /// The token of a binding that has no checkpoint yet.
    pub const NONE: Token = Token {
        saves: 0,
        slot: None,
    };

    /// A token that is only a version number, for stores that keep one
    /// row per binding and compare a version column.
    pub fn from_version(version: u64) -> Self {
        Token {
            saves: version,
            slot: None,
        }
    }

    /// How many saves (and forgets) the binding's checkpoint has seen.
    pub fn version(self) -> u64 {
        self.saves
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slot {
            None => write!(f, "version {}", self.saves),
            Some(slot) => write!(
                f,
                "version {} (slot epoch {}, {} records)",
                self.saves,
                slot.epoch,
                slot.tail.position()
            ),
        }
    }
}

/// A checkpoint as loaded: `None` when the binding has none (never saved,
/// or forgotten).
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The token a save must present.
    pub token: Token,
}

/// Where checkpoints live. Every move is a compare-and-set on the token:
/// a writer presents the token it loaded (or got from its last save), and a
/// store that moved since refuses with `checkpoint/conflict`, writing
/// nothing. Every backend runs the contract suite in
/// `tests/contract/checkpoints.rs`.
#[async_trait]
pub trait CheckpointStore: Send + Sync + 'static {
    /// Loads the binding's checkpoint and its token.
    async fn load(&self, key: &CheckpointKey) -> Result<Loaded>;

    /// Saves `checkpoint` if the stored token is still `expected`, and
    /// returns the new token. Fails with `checkpoint/conflict` otherwise,
    /// writing nothing.
    async fn save(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: &Checkpoint,
    ) -> Result<Token>;

    /// Forgets the binding if the stored token is still `expected`: a later
    /// load finds no checkpoint, and a later save starts a new one. Fails
    /// with `checkpoint/conflict` otherwise.
    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<Token>;

    /// The keys of every binding that has a checkpoint here (forgotten
    /// ones may be listed too: their load finds none), sorted by path; for
    /// operators' tools ([`inspect`](crate::inspect())).
    async fn keys(&self) -> Result<Vec<CheckpointKey>>;
}
