//! The host: the storage and checkpoint store a runner works on.

use std::fmt;
use std::sync::Arc;

use eddy_streams::Storage;

use crate::{CheckpointStore, Retry, StreamCheckpoints};

/// What a runner needs: the stream store and the checkpoint store (the
/// Rust shape of the spec's host layers), plus the default retry schedule.
#[derive(Clone)]
pub struct Host {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) checkpoints: Arc<dyn CheckpointStore>,
    pub(crate) retry: Retry,
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
        }
    }

    /// A host with another checkpoint store.
    pub fn with_checkpoints(
        storage: Arc<dyn Storage>,
        checkpoints: Arc<dyn CheckpointStore>,
    ) -> Self {
        Host {
            storage,
            checkpoints,
            retry: Retry::default(),
        }
    }

    /// This host with another default retry schedule for followers and
    /// attached projections.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
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
