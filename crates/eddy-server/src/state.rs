//! The state every handler shares.

use std::sync::Arc;

use eddy_streams::{ReadFrom, Storage, StreamPath};
use tokio::sync::{watch, OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::shared_read::{ReadGroup, SharedReads};
use crate::stream_budget::StreamBudget;
use crate::subscriptions::Registry;
use crate::{Metrics, ServerConfig};

/// The store, the configuration, the metrics and the live-reader cap.
///
/// One shared allocation: every layer and handler of every request takes
/// a clone, which is one reference count, not one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What an [`AppState`] shares (its fields are the crate's own).
#[doc(hidden)]
pub struct Shared {
    pub(crate) store: Arc<dyn Storage>,
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) metrics: Arc<Metrics>,
    live_readers: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    pub(crate) subscriptions: Arc<OnceCell<Arc<Registry>>>,
    pub(crate) streams: Arc<StreamBudget>,
    reads: SharedReads,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// State over `store`; `shutdown` turns `true` when the server stops,
    /// which ends live reads early.
    pub fn new(
        store: Arc<dyn Storage>,
        config: ServerConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        metrics.keep_up();
        AppState(Arc::new(Shared {
            live_readers: Arc::new(Semaphore::new(config.max_live_readers)),
            streams: Arc::new(StreamBudget::new(config.max_streams)),
            store,
            config: Arc::new(config),
            metrics,
            shutdown,
            subscriptions: Arc::new(OnceCell::new()),
            reads: SharedReads::default(),
        }))
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Takes a live-reader slot, or refuses with 503.
    pub(crate) fn live_reader(&self) -> Result<LiveReader, ApiError> {
        let permit = Arc::clone(&self.live_readers)
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyLiveReaders {
                limit: self.config.max_live_readers,
            })?;
        self.metrics.live_readers.increment(1);
        Ok(LiveReader {
            _permit: permit,
            metrics: Arc::clone(&self.metrics),
        })
    }

    /// The group of live readers of `path` from `from` (up to the
    /// configured bytes), which share their reads (see
    /// [`crate::shared_read`]).
    pub(crate) fn live_reads(&self, path: &StreamPath, from: ReadFrom) -> ReadGroup {
        self.reads.group(path, from, self.config.max_read_bytes)
    }

    /// A receiver that turns `true` when the server begins to shut down.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    /// Resolves when the server begins to shut down.
    pub(crate) async fn shutting_down(&self) {
        let mut shutdown = self.stopping();
        // An error means the sender is gone: the server is stopping too.
        let _ = shutdown.wait_for(|stopping| *stopping).await;
    }
}

/// A held live-reader slot; dropping it frees the slot.
pub(crate) struct LiveReader {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for LiveReader {
    fn drop(&mut self) {
        self.metrics.live_readers.decrement(1);
    }
}
