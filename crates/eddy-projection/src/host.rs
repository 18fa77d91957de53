//! The host: the storage and checkpoint store a runner works on.

use std::fmt;
use std::sync::Arc;

use eddy_streams::{Storage, DEFAULT_MAX_APPEND_BYTES};

use crate::{CheckpointStore, Retry, StreamCheckpoints};

/// What a runner needs: the stream store and the checkpoint store (the
/// Rust shape of the spec's host layers), plus the default retry schedule.
#[derive(Clone)]
pub struct Host {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) checkpoints: Arc<dyn CheckpointStore>,
    pub(crate) retry: Retry,
    pub(crate) append_limit: usize,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host whose checkpoints live on the same storage
    /// ([`StreamCheckpoints`]).
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        Host {
            checkpoints: Arc::new(StreamCheckpoints::new(Arc::clone(&storage))),
            storage,
            retry: Retry::default(),
            append_limit: DEFAULT_MAX_APPEND_BYTES,
        }
    }

    /// This host with another checkpoint store.
    pub fn with_checkpoints(mut self, checkpoints: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// This host with another default retry schedule for followers and
    /// attached projections.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// This host with another append limit: the most bytes one append of
    /// a unit's output may carry (each item's bytes plus one, plus one).
    /// A unit whose output is larger writes it in several appends of its
    /// producer. Defaults to the store's default limit
    /// ([`DEFAULT_MAX_APPEND_BYTES`]); give a lower one when the store's
    /// (or its server's body) limit is lower. A store that refuses an
    /// append as too large teaches the host its limit too: the rest of the
    /// unit is split again, recorded in its pin, and sent on.
    pub fn with_append_limit(mut self, bytes: usize) -> Self {
        self.append_limit = bytes.max(1);
        self
    }

    /// The stream store.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The checkpoint store.
    pub fn checkpoints(&self) -> &Arc<dyn CheckpointStore> {
        &self.checkpoints
    }

    /// The default retry schedule of followers and attached projections
    /// ([`Retry::default`] unless [`with_retry`](Host::with_retry) changed
    /// it).
    pub fn retry(&self) -> Retry {
        self.retry
    }
}
