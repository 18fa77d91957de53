//! Live wake-ups: each commit publishes the stream's new state to the
//! waiters on its path, and reports itself on the process-wide
//! `committed` feed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, watch};

use crate::rules::Head;
use crate::{Offset, StreamInfo};

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

/// What the waiters on one path hold: the stream as the latest commit left
/// it, or `None` when they must look again (nothing published yet, a
/// delete, a commit reported without its state).
type Latest = Option<StreamInfo>;

/// The waiters of each path with any, hashed with foldhash (randomly
/// seeded) rather than SipHash: every commit looks its path up.
type Waiters = HashMap<String, watch::Sender<Latest>, foldhash::fast::RandomState>;

/// Signals that a backend raises after each commit.
///
/// Waiters subscribe to a path ([`Notifier::watch`]) *before* they look at
/// the stream, so a commit that lands between the look and the wait still
/// wakes them: the wait is level-triggered and loses no wake-up. A backend
/// publishes in commit order, so the latest value a waiter holds is the
/// stream's latest committed state and a woken waiter decides from it
/// without asking the store again. A path's entry lives only while it has
/// waiters.
#[derive(Debug)]
pub struct Notifier {
    streams: Arc<Mutex<Waiters>>,
    committed: broadcast::Sender<Committed>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            streams: Arc::default(),
            committed: broadcast::channel(COMMITTED_CAPACITY).0,
        }
    }
}

impl Notifier {
    fn streams(&self) -> MutexGuard<'_, Waiters> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to every later commit (or delete) on `path`.
    pub fn watch(&self, path: &str) -> Watcher {
        let receiver = self
            .streams()
            .entry(path.to_owned())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe();
        Watcher {
            receiver: Some(receiver),
            path: path.to_owned(),
            streams: Arc::clone(&self.streams),
        }
    }

    /// Publishes a commit: its waiters get the stream's new state, the
    /// `committed` feed the new tail. Backends call this in commit order.
    pub fn publish(&self, info: &StreamInfo) {
        self.publish_with(&info.path, info.tail, info.closed, || info.clone());
    }

    /// [`publish`](Self::publish) for a backend that holds the stream's
    /// head: its description is only built when someone waits on it.
    pub(crate) fn publish_head(&self, path: &str, head: &Head) {
        self.publish_with(path, head.tail(), head.closed, || head.info(path));
    }

    /// Hands the waiters on `path` the stream's state (`info`, built only
    /// for them) and reports the commit on the `committed` feed. Nobody
    /// listening to the feed is common (no projection runs in the
    /// process): then nothing is built for it either.
    fn publish_with(
        &self,
        path: &str,
        tail: Offset,
        closed: bool,
        info: impl FnOnce() -> StreamInfo,
    ) {
        if let Some(sender) = self.streams().get(path) {
            sender.send_replace(Some(info()));
        }
        if self.committed.receiver_count() > 0 {
            let _ = self.committed.send(Committed {
                path: path.to_owned(),
                tail,
                closed,
            });
        }
    }

    /// The paths that have waiters now.
    pub(crate) fn watched(&self) -> Vec<String> {
        self.streams().keys().cloned().collect()
    }

    /// Publishes a stream's state that was read rather than committed
    /// here (another process's commit, seen by polling), unless its
    /// waiters already hold this state or a later one: a poll that read
    /// before a local commit must not hand them an older tail.
    pub(crate) fn publish_observed(&self, info: &StreamInfo) {
        if self.refresh(info) {
            self.report(Committed {
                path: info.path.clone(),
                tail: info.tail,
                closed: info.closed,
            });
        }
    }

    /// Hands the waiters on `info.path` a state that was read rather than
    /// committed here, as [`publish_observed`](Self::publish_observed)
    /// does, without reporting it on the `committed` feed (for a caller
    /// that reported the commit already). Returns whether it handed it.
    pub(crate) fn refresh(&self, info: &StreamInfo) -> bool {
        match self.streams().get(&info.path) {
            Some(sender) => sender.send_if_modified(|latest| {
                let fresh = latest.as_ref().is_none_or(|held| supersedes(info, held));
                if fresh {
                    *latest = Some(info.clone());
                }
                fresh
            }),
            None => false,
        }
    }

    /// Reports a commit on the `committed` feed only.
    pub(crate) fn report(&self, event: Committed) {
        if self.committed.receiver_count() > 0 {
            let _ = self.committed.send(event);
        }
    }

    /// Whether anyone waits on `path`.
    #[cfg(feature = "postgres")]
    pub(crate) fn is_watched(&self, path: &str) -> bool {
        self.streams().contains_key(path)
    }

    /// Reports a commit whose full state the caller does not know: its
    /// waiters look again, the `committed` feed gets it.
    pub fn commit(&self, event: Committed) {
        self.touch(&event.path);
        let _ = self.committed.send(event);
    }

    /// Wakes the waiters on `path` to look again (after a delete).
    pub fn touch(&self, path: &str) {
        if let Some(sender) = self.streams().get(path) {
            sender.send_replace(None);
        }
    }

    /// A subscription to every later commit of this store in this process.
    pub fn committed(&self) -> broadcast::Receiver<Committed> {
        self.committed.subscribe()
    }
}

/// Whether `new` is a later state of the stream than `held`: more
/// messages, or closed since. A stream with another configuration is a
/// stream created again at the path, so it supersedes too.
fn supersedes(new: &StreamInfo, held: &StreamInfo) -> bool {
    new.config != held.config
        || new.tail > held.tail
        || (new.tail == held.tail && new.closed && !held.closed)
}

/// A subscription to one path's commits ([`Notifier::watch`]). Dropping
/// the last one of a path removes the path's entry.
#[derive(Debug)]
pub struct Watcher {
    receiver: Option<watch::Receiver<Latest>>,
    path: String,
    streams: Arc<Mutex<Waiters>>,
}

impl Watcher {
    /// The state the latest commit published, if it published one since
    /// the path had waiters; marks it seen.
    pub fn latest(&mut self) -> Option<StreamInfo> {
        self.receiver
            .as_mut()
            .and_then(|receiver| receiver.borrow_and_update().clone())
    }

    /// Waits for the next commit or delete on the path and returns what it
    /// published (`None`: look again).
    pub async fn changed(&mut self) -> Option<StreamInfo> {
        let receiver = self.receiver.as_mut()?;
        match receiver.changed().await {
            Ok(()) => receiver.borrow_and_update().clone(),
            // The sender stays in the map while this receiver lives.
            Err(_) => None,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.receiver.take());
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if streams
            .get(&self.path)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            streams.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StreamConfig;

    fn info(tail: u64) -> StreamInfo {
        StreamInfo {
            path: "p".into(),
            config: StreamConfig::json(),
            closed: false,
            tail: Offset::new(1, tail),
            bytes: 0,
            earliest: Offset::ZERO,
            dropped_deletes: None,
        }
    }

    #[tokio::test]
    async fn an_observed_state_older_than_the_published_one_is_not_handed_out() {
        let notifier = Notifier::default();
        notifier.publish_observed(&info(5));
        let mut waiter = notifier.watch("p");
        assert_eq!(notifier.watched(), ["p"]);
        notifier.publish_observed(&info(3));
        assert_eq!(waiter.latest(), Some(info(3)), "the first state is taken");
        notifier.publish(&info(4));
        assert_eq!(waiter.changed().await, Some(info(4)));
        notifier.publish_observed(&info(3));
        notifier.publish_observed(&info(4));
        assert_eq!(waiter.latest(), Some(info(4)), "a stale poll is dropped");
        let mut closed = info(4);
        closed.closed = true;
        notifier.publish_observed(&closed);
        assert_eq!(waiter.changed().await, Some(closed));
    }

    #[tokio::test]
    async fn waiters_get_the_published_state_and_leave_no_entry() {
        let notifier = Notifier::default();
        let mut first = notifier.watch("p");
        let second = notifier.watch("p");
        assert_eq!(first.latest(), None, "nothing published yet");
        notifier.publish(&info(1));
        assert_eq!(first.changed().await, Some(info(1)));
        notifier.touch("p");
        assert_eq!(first.changed().await, None, "a delete says: look again");
        drop(first);
        assert_eq!(notifier.streams().len(), 1, "the second waiter keeps it");
        drop(second);
        assert!(notifier.streams().is_empty());
    }
}
