//! Where a path stands (live, soft-deleted, dead, gone, absent), and how
//! dead streams are collected.
//!
//! A stream is *live* until it is deleted or expires. A deleted or expired
//! stream that forks still read from (directly or down a chain of forks)
//! keeps its path as *soft-deleted*; once no live stream descends from it
//! it is *dead*: it reads as gone (deleted) or not found (expired), and the
//! next write that meets it removes it, together with its dead forks, and
//! releases the sources it was forked from. Reads never write, so the
//! answer does not depend on whether anything was collected yet.

use std::collections::HashSet;

use crate::record::{RecordReader, Records, Stored};
use crate::{StreamError, StreamPath};

/// What a path holds at some time.
pub(crate) enum Found<K> {
    /// A live stream.
    Live(Stored<K>),
    /// Deleted or expired, but forks still read from it.
    SoftDeleted,
    /// Deleted or expired with nothing depending on it, not yet removed.
    Dead {
        /// Whether it was deleted (rather than expired).
        deleted: bool,
        /// Its incarnation.
        incarnation: u64,
    },
    /// Deleted and removed; the tombstone keeps its incarnation.
    Gone {
        /// The deleted stream's incarnation.
        incarnation: u64,
    },
    /// Nothing there.
    Absent,
}

impl<K> Found<K> {
    /// The live stream, or the error that says why there is none.
    pub fn live(self, path: &StreamPath) -> Result<Stored<K>, StreamError> {
        let path = || path.to_string();
        match self {
            Found::Live(stored) => Ok(stored),
            Found::SoftDeleted => Err(StreamError::SoftDeleted { path: path() }),
            Found::Dead { deleted: true, .. } | Found::Gone { .. } => {
                Err(StreamError::Gone { path: path() })
            }
            Found::Dead { deleted: false, .. } | Found::Absent => {
                Err(StreamError::NotFound { path: path() })
            }
        }
    }
}

/// Where `path` stands at `now_ms`.
pub(crate) async fn find<R: RecordReader>(
    records: &mut R,
    path: &str,
    now_ms: i64,
) -> Result<Found<R::Key>, StreamError> {
    let Some(stored) = records.load(path).await? else {
        return Ok(match records.tombstoned(path).await? {
            Some(incarnation) => Found::Gone { incarnation },
            None => Found::Absent,
        });
    };
    // The descendant search is boxed: only a dead stream's lookup makes
    // it, and its future would otherwise make every lookup's (and every
    // append's) larger.
    if stored.record.is_live(now_ms) {
        Ok(Found::Live(stored))
    } else if Box::pin(has_live_descendant(records, path, now_ms)).await? {
        Ok(Found::SoftDeleted)
    } else {
        Ok(Found::Dead {
            deleted: stored.record.soft_deleted,
            incarnation: stored.record.head.incarnation,
        })
    }
}

/// What a create finds at its path.
pub(crate) enum Slot<K> {
    /// A live stream.
    Taken(Stored<K>),
    /// Room for a new stream, whose incarnation must be above `after`
    /// (the previous stream's there, when the store still knows it).
    Free {
        /// The path's last known incarnation, or 0.
        after: u64,
    },
}

/// The live stream at `path`, if any. Otherwise the path is free for a new
/// stream (a dead one there is collected first), unless forks still use it.
pub(crate) async fn existing_or_free<R: Records>(
    records: &mut R,
    path: &StreamPath,
    now_ms: i64,
) -> Result<Slot<R::Key>, StreamError> {
    match find(records, path.as_str(), now_ms).await? {
        Found::Live(existing) => Ok(Slot::Taken(existing)),
        Found::SoftDeleted => Err(StreamError::SoftDeleted {
            path: path.to_string(),
        }),
        Found::Dead { incarnation, .. } => {
            collect(records, path.as_str(), false, now_ms).await?;
            Ok(Slot::Free { after: incarnation })
        }
        Found::Gone { incarnation } => Ok(Slot::Free { after: incarnation }),
        Found::Absent => Ok(Slot::Free { after: 0 }),
    }
}

/// Whether a live stream was forked from `path`, directly or down a chain
/// of forks.
pub(crate) async fn has_live_descendant<R: RecordReader>(
    records: &mut R,
    path: &str,
    now_ms: i64,
) -> Result<bool, StreamError> {
    let mut seen = HashSet::new();
    let mut pending = records.forks_of(path).await?;
    while let Some(fork) = pending.pop() {
        if !seen.insert(fork.clone()) {
            continue;
        }
        let Some(stored) = records.load(&fork).await? else {
            continue;
        };
        if stored.record.is_live(now_ms) {
            return Ok(true);
        }
        pending.extend(records.forks_of(&fork).await?);
    }
    Ok(false)
}

/// Removes the stream at `path`, which has no live descendant, with its
/// dead forks; then removes each source up the chain that this leaves
/// dead. Streams that were deleted leave a tombstone (`path` itself too
/// when `deleting`); expired ones do not.
pub(crate) async fn collect<R: Records>(
    records: &mut R,
    path: &str,
    deleting: bool,
    now_ms: i64,
) -> Result<(), StreamError> {
    let mut doomed = vec![(path.to_owned(), deleting)];
    let mut sources = Vec::new();
    loop {
        while let Some((path, deleting)) = doomed.pop() {
            let Some(stored) = records.load(&path).await? else {
                continue;
            };
            for fork in records.forks_of(&path).await? {
                doomed.push((fork, false));
            }
            records.remove(&stored.key, &path).await?;
            if deleting || stored.record.soft_deleted {
                records
                    .tombstone(&path, stored.record.head.incarnation, now_ms)
                    .await?;
            }
            sources.extend(stored.record.origin.map(|origin| origin.source));
        }
        let Some(source) = sources.pop() else {
            return Ok(());
        };
        if let Found::Dead { .. } = find(records, &source, now_ms).await? {
            doomed.push((source, false));
        }
    }
}
