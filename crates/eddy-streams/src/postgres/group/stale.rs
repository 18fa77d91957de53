//! The streams written by others since the group writer's copy may have
//! loaded them: this store's transactions (deletes, forks, a host's
//! appends, released producers) and, through the listener, other
//! processes' commits. The writer drops them from its copy before its next
//! group, which then loads them with the rest of what it lacks, instead of
//! deciding on a stale record and learning so from its statement.
//!
//! It is a hint, not the guarantee: a commit the listener has not heard of
//! yet is still caught by the statement's version check.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

/// The most paths kept; past it, the whole copy goes.
const MAX_PATHS: usize = 65_536;

/// Paths whose copy is stale, gathered between two groups.
#[derive(Debug, Default)]
pub(in crate::postgres) struct Stale {
    inner: Mutex<Marked>,
}

/// What [`Stale::take`] hands the writer.
#[derive(Debug, Default, PartialEq, Eq)]
pub(in crate::postgres) struct Marked {
    pub paths: HashSet<String>,
    /// More paths than kept: forget every stream.
    pub all: bool,
}

impl Stale {
    fn lock(&self) -> MutexGuard<'_, Marked> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that the stream at `path` was written by another writer.
    pub fn mark(&self, path: &str) {
        let mut marked = self.lock();
        if marked.all {
            return;
        }
        if marked.paths.len() >= MAX_PATHS {
            marked.all = true;
            marked.paths.clear();
        } else {
            marked.paths.insert(path.to_owned());
        }
    }

    /// What was marked since the last call.
    pub fn take(&self) -> Marked {
        std::mem::take(&mut *self.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_taken_once_and_too_many_forget_everything() {
        let stale = Stale::default();
        stale.mark("a");
        stale.mark("a");
        assert_eq!(stale.take().paths.len(), 1);
        assert_eq!(stale.take(), Marked::default());
        for n in 0..=MAX_PATHS {
            stale.mark(&format!("p{n}"));
        }
        let marked = stale.take();
        assert!(marked.all && marked.paths.is_empty());
    }
}
