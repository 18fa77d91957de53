//! Checkpoints: what a binding has committed, moved only by
//! compare-and-set on a token.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use eddy_streams::{
    Append, Offset, Payload, ReadFrom, Storage, StreamConfig, StreamError, StreamPath,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::params::{escape, params_key};
use crate::{ProjectionError, Range, Result};

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
    /// The stream that holds the checkpoint:
    /// `__eddy/checkpoints/<id>/<version>/<params>`.
    pub path: StreamPath,
}

impl CheckpointKey {
    pub(crate) fn new(projection: &str, version: u32, params: &Value) -> Result<Self> {
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
}

/// A unit whose input ranges are pinned but whose commit has not settled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The unit key.
    pub key: String,
    /// The pinned range of each input.
    pub ranges: BTreeMap<String, Range>,
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
    /// The binding was forgotten (its last record before deletion).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgotten: bool,
}

/// The version of a stored checkpoint that a writer last saw. Saving with a
/// token that is no longer current fails with `checkpoint/conflict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token(Offset);

impl Token {
    /// The token of a binding that has no checkpoint yet.
    pub const NONE: Token = Token(Offset::ZERO);

    /// The token's offset (the checkpoint stream's tail).
    pub fn offset(self) -> Offset {
        self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A checkpoint as loaded: `None` when the binding has none.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The token a save must present.
    pub token: Token,
}

/// Where checkpoints live. Every move is a compare-and-set on the token.
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

    /// Forgets the binding if the stored token is still `expected`.
    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<()>;
}

/// Checkpoints kept on a stream store: each binding's checkpoint is the last
/// message of a JSON stream under [`CHECKPOINT_PREFIX`], and its token is
/// that stream's tail. A save is an append that expects the tail.
#[derive(Clone)]
pub struct StreamCheckpoints {
    storage: Arc<dyn Storage>,
}

impl fmt::Debug for StreamCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCheckpoints").finish_non_exhaustive()
    }
}

impl StreamCheckpoints {
    /// Checkpoints on `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        StreamCheckpoints { storage }
    }

    fn conflict(key: &CheckpointKey) -> ProjectionError {
        ProjectionError::CheckpointConflict {
            checkpoint: key.path.to_string(),
        }
    }

    fn map_write_error(key: &CheckpointKey, err: StreamError) -> ProjectionError {
        match err {
            StreamError::OffsetMismatch { .. } | StreamError::Gone { .. } => Self::conflict(key),
            StreamError::NotFound { .. } => Self::conflict(key),
            other => other.into(),
        }
    }
}

#[async_trait]
impl CheckpointStore for StreamCheckpoints {
    async fn load(&self, key: &CheckpointKey) -> Result<Loaded> {
        let absent = Loaded {
            checkpoint: None,
            token: Token::NONE,
        };
        let info = match self.storage.head(&key.path).await {
            Ok(info) => info,
            Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => return Ok(absent),
            Err(e) => return Err(e.into()),
        };
        let tail = info.tail.position();
        if tail == 0 {
            return Ok(absent);
        }
        let mut from = Offset::at(tail - 1);
        loop {
            let chunk = match self
                .storage
                .read(&key.path, ReadFrom::Offset(from), 1 << 24)
                .await
            {
                Ok(chunk) => chunk,
                Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => return Ok(absent),
                Err(e) => return Err(e.into()),
            };
            if !chunk.up_to_date && chunk.next_offset.position() > from.position() + 1 {
                from = Offset::at(chunk.next_offset.position() - 1);
                continue;
            }
            let Some(last) = chunk.messages.last() else {
                return Ok(absent);
            };
            let checkpoint: Checkpoint =
                serde_json::from_slice(last).map_err(|e| ProjectionError::InvalidCheckpoint {
                    checkpoint: key.path.to_string(),
                    reason: e.to_string(),
                })?;
            let token = Token(chunk.next_offset);
            return Ok(Loaded {
                checkpoint: (!checkpoint.forgotten).then_some(checkpoint),
                token,
            });
        }
    }

    async fn save(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: &Checkpoint,
    ) -> Result<Token> {
        let body =
            serde_json::to_vec(checkpoint).map_err(|e| ProjectionError::InvalidCheckpoint {
                checkpoint: key.path.to_string(),
                reason: format!("the checkpoint does not encode: {e}"),
            })?;
        if expected == Token::NONE {
            self.storage
                .create(&key.path, StreamConfig::json(), Payload::empty())
                .await?;
        }
        let append = Append::messages(vec![Bytes::from(body)]).expecting_tail(expected.0);
        let appended = self
            .storage
            .append(&key.path, append)
            .await
            .map_err(|e| Self::map_write_error(key, e))?;
        Ok(Token(appended.next_offset))
    }

    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<()> {
        if expected == Token::NONE {
            return Ok(());
        }
        let tombstone = Checkpoint {
            forgotten: true,
            ..Checkpoint::default()
        };
        self.save(key, expected, &tombstone).await?;
        match self.storage.delete(&key.path).await {
            Ok(()) | Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
