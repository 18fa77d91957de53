//! Live wake-ups: per-stream change signals and the process-wide
//! `committed` feed.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{broadcast, watch};

use crate::Offset;

/// One commit, as reported on [`Notifier::committed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The stream that changed.
    pub path: String,
    /// Its tail after the commit.
    pub tail: Offset,
    /// Whether it is closed after the commit.
    pub closed: bool,
}

/// How many commits a slow `committed` subscriber may fall behind before it
/// sees [`broadcast::error::RecvError::Lagged`].
const COMMITTED_CAPACITY: usize = 4096;

/// Signals that a backend raises after each commit.
///
/// Waiters subscribe to a path *before* they look at the stream, so a commit
/// that lands between the look and the wait still wakes them: the wait is
/// level-triggered and loses no wake-up.
#[derive(Debug)]
pub struct Notifier {
    streams: Mutex<HashMap<String, watch::Sender<()>>>,
    committed: broadcast::Sender<Committed>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            streams: Mutex::new(HashMap::new()),
            committed: broadcast::channel(COMMITTED_CAPACITY).0,
        }
    }
}

impl Notifier {
    /// A receiver that is marked changed by every later commit (or delete)
    /// on `path`.
    pub fn watch(&self, path: &str) -> watch::Receiver<()> {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams
            .entry(path.to_owned())
            .or_insert_with(|| watch::channel(()).0)
            .subscribe()
    }

    /// Reports a commit to the waiters on its path and to `committed`.
    pub fn commit(&self, event: Committed) {
        self.touch(&event.path);
        // No subscriber is not an error: nobody is listening yet.
        let _ = self.committed.send(event);
    }

    /// Wakes the waiters on `path` (after a commit or a delete).
    pub fn touch(&self, path: &str) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = streams.get(path) {
            if sender.receiver_count() == 0 {
                streams.remove(path);
            } else {
                sender.send_replace(());
            }
        }
    }

    /// A subscription to every later commit of this store in this process.
    pub fn committed(&self) -> broadcast::Receiver<Committed> {
        self.committed.subscribe()
    }
}
