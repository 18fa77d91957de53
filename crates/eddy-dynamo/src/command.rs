//! The command handler: read a stream, decide, append, retry on conflict.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::event_item::StreamId;
use crate::event_stream::{EventStream, StoredEvent};

/// Why a command did not append.
#[derive(Debug, thiserror::Error)]
pub enum CommandError<D> {
    /// The decision refused the command.
    #[error("command rejected: {0}")]
    Rejected(D),
    /// The store failed, or every attempt lost to a concurrent writer
    /// (`WriteContention`).
    #[error(transparent)]
    Store(#[from] Error),
}

impl<E: Serialize + DeserializeOwned> EventStream<E> {
    /// Runs a command: reads the stream instance, asks `decide` for new
    /// events given its history, and appends them at the version read. When
    /// another writer got there first, it reads again and decides again, up
    /// to `attempts` times. Returns the new version (unchanged when `decide`
    /// returned no event).
    pub async fn handle<D, F>(
        &self,
        id: &StreamId,
        attempts: u32,
        mut decide: F,
    ) -> Result<u64, CommandError<D>>
    where
        F: FnMut(&[StoredEvent<E>]) -> Result<Vec<E>, D>,
    {
        for _ in 0..attempts.max(1) {
            let history = self.read(id).await?;
            let version = history.last().map_or(0, |e| e.version);
            let events = decide(&history).map_err(CommandError::Rejected)?;
            if events.is_empty() {
                return Ok(version);
            }
            match self.append(id, &events, version).await {
                Ok(version) => return Ok(version),
                Err(Error::VersionConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::WriteContention {
            target: format!("{}({id})", self.name()),
            attempts: attempts.max(1),
        }
        .into())
    }
}
