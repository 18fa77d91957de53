//! Durable wake-up marks: a store that keeps them writes, in the
//! transaction of every commit, a pending mark for each binding that a
//! registered marker says the commit touches. An attached projection
//! registers a marker, runs every marked binding when it starts, and
//! deletes a binding's mark once the binding caught up.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use async_trait::async_trait;
use serde::Serialize;

use crate::StreamError;

/// Names the binding of its attachment that a commit on a stream path
/// touches (its parameter key), or `None` when it touches none.
pub type Marker = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Whose marks: a projection (its id and version).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MarkOwner {
    /// The projection id.
    pub projection: String,
    /// Its declaration version.
    pub version: u32,
}

/// One binding's durable wake-up mark.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WakeMark {
    /// The projection id.
    pub projection: String,
    /// Its declaration version.
    pub version: u32,
    /// The binding's parameter key.
    pub params: String,
    /// The stream path of the last commit that marked it (its
    /// parameters can be parsed from it).
    pub path: String,
    /// Commits marked since the binding last caught up. It only grows
    /// while the mark exists: it is the sequence a caught-up binding
    /// compares before it deletes the mark.
    pub commits: u64,
    /// Failed runs since the binding last caught up.
    pub attempts: u32,
    /// When the binding runs again after a failure, in unix milliseconds
    /// (0: at once).
    pub due_ms: u64,
}

/// A store's durable wake-up marks (see [`Storage::wake_marks`](crate::Storage::wake_marks)).
#[async_trait]
pub trait WakeMarks: Send + Sync {
    /// From now on, every commit on this store (in this process) writes a
    /// mark for `owner`'s binding that `marker` names, in the commit's own
    /// transaction. Dropping the guard stops it.
    fn register(&self, owner: MarkOwner, marker: Marker) -> MarkerGuard;

    /// Every mark of the store.
    async fn list(&self) -> Result<Vec<WakeMark>, StreamError>;

    /// `owner`'s mark for the binding `params`, if any.
    async fn get(&self, owner: &MarkOwner, params: &str) -> Result<Option<WakeMark>, StreamError>;

    /// The binding caught up after it saw `commits`: deletes its mark if
    /// no commit marked it since (`true`); otherwise keeps it pending,
    /// no longer deferred (`false`).
    async fn clear(
        &self,
        owner: &MarkOwner,
        params: &str,
        commits: u64,
    ) -> Result<bool, StreamError>;

    /// The binding failed: its mark (written with `path` if it has none)
    /// waits until `due_ms`, after `attempts` failed runs.
    async fn defer(
        &self,
        owner: &MarkOwner,
        params: &str,
        path: &str,
        attempts: u32,
        due_ms: u64,
    ) -> Result<(), StreamError>;
}

/// Keeps a marker registered; dropping it unregisters the marker.
pub struct MarkerGuard {
    markers: Weak<Markers>,
    id: u64,
}

impl fmt::Debug for MarkerGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MarkerGuard").field("id", &self.id).finish()
    }
}

impl Drop for MarkerGuard {
    fn drop(&mut self) {
        if let Some(markers) = self.markers.upgrade() {
            let mut list = markers.list.write().unwrap_or_else(|e| e.into_inner());
            list.retain(|(id, _, _)| *id != self.id);
        }
    }
}

/// The markers registered with one store.
#[derive(Default)]
pub(crate) struct Markers {
    list: RwLock<Vec<(u64, MarkOwner, Marker)>>,
    next: AtomicU64,
}

impl fmt::Debug for Markers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = self.list.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Markers")
            .field("registered", &list.len())
            .finish()
    }
}

/// The marks one transaction writes: per binding, the path of its last
/// commit and how many commits marked it. Sorted, so that concurrent
/// transactions take the marks' row locks in one order.
pub(crate) type Marks = BTreeMap<(MarkOwner, String), (String, u64)>;

impl Markers {
    /// Registers `marker` for `owner`.
    pub(crate) fn register(self: &Arc<Self>, owner: MarkOwner, marker: Marker) -> MarkerGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        list.push((id, owner, marker));
        MarkerGuard {
            markers: Arc::downgrade(self),
            id,
        }
    }

    /// The marks that commits on `paths` write (empty when no marker is
    /// registered).
    pub(crate) fn marks<'p>(&self, paths: impl IntoIterator<Item = &'p str>) -> Marks {
        let list = self.list.read().unwrap_or_else(|e| e.into_inner());
        let mut marks = Marks::new();
        if list.is_empty() {
            return marks;
        }
        for path in paths {
            for (_, owner, marker) in list.iter() {
                if let Some(params) = marker(path) {
                    let mark = marks
                        .entry((owner.clone(), params))
                        .or_insert_with(|| (String::new(), 0));
                    mark.0 = path.to_owned();
                    mark.1 += 1;
                }
            }
        }
        marks
    }
}

/// An integer column as `u64` (never negative as eddy writes it).
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or_default()
}

/// A `u64` for an integer column, saturated.
pub(crate) fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
