//! The group writer's copy of the stream records it has loaded or
//! written, so that an append decides without reading the database.
//!
//! A copy may be stale: another process, a host's transaction or this
//! store's other calls (create, delete) may have written the stream since.
//! Each record therefore keeps the version it was loaded at (its row id,
//! message count and close: every write of a stream's data moves one of
//! them, and none goes back), and the group's statement writes a stream
//! only where its row still has that version; a stream whose row moved is
//! dropped from the copy and its appends decided again on a fresh load.
//!
//! Of a stream's producers the copy knows those it loaded or wrote; any
//! other is taken as absent, and the statement checks that too.

use std::collections::HashMap;

use crate::record::StreamRecord;
use crate::rules::ProducerState;

/// The most streams the copy keeps.
const MAX_STREAMS: usize = 65_536;
/// The most producer states it keeps, over all streams.
const MAX_PRODUCERS: usize = 262_144;

/// What the writer knows of one stream.
#[derive(Clone, Debug)]
pub(super) struct Known {
    /// The stream's row id (never reused).
    pub key: i64,
    /// Its record, as its row holds it.
    pub record: StreamRecord,
    /// Producers whose states the writer knows (all others: absent, to
    /// be checked).
    pub producers: HashMap<String, ProducerState>,
    /// How many producers the stream keeps.
    pub producer_count: u64,
    /// When it was last used, to drop the least recently used.
    used: u64,
}

impl Known {
    /// A stream as loaded.
    pub fn new(
        key: i64,
        record: StreamRecord,
        producers: HashMap<String, ProducerState>,
        producer_count: u64,
    ) -> Self {
        Known {
            key,
            record,
            producers,
            producer_count,
            used: 0,
        }
    }
}

/// The copy: known streams by path, bounded.
#[derive(Debug, Default)]
pub(super) struct Copy {
    streams: HashMap<String, Known>,
    producers: usize,
    uses: u64,
}

impl Copy {
    /// The stream at `path`, if known.
    pub fn get(&self, path: &str) -> Option<&Known> {
        self.streams.get(path)
    }

    /// Learns (or replaces) the stream at `path`.
    pub fn insert(&mut self, path: String, mut known: Known) {
        self.uses += 1;
        known.used = self.uses;
        self.producers += known.producers.len();
        if let Some(old) = self.streams.insert(path, known) {
            self.producers -= old.producers.len();
        }
        self.trim();
    }

    /// Forgets the stream at `path`.
    pub fn remove(&mut self, path: &str) {
        if let Some(old) = self.streams.remove(path) {
            self.producers -= old.producers.len();
        }
    }

    /// Forgets everything (after a statement whose outcome is unknown).
    pub fn clear(&mut self) {
        self.streams.clear();
        self.producers = 0;
    }

    /// Drops the least recently used quarter while over a bound.
    fn trim(&mut self) {
        if self.streams.len() <= MAX_STREAMS && self.producers <= MAX_PRODUCERS {
            return;
        }
        let mut uses: Vec<u64> = self.streams.values().map(|k| k.used).collect();
        let quarter = uses.len() / 4;
        let (_, cut, _) = uses.select_nth_unstable(quarter);
        let cut = *cut;
        self.streams.retain(|_, known| known.used > cut);
        self.producers = self.streams.values().map(|k| k.producers.len()).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Head;
    use crate::StreamConfig;

    fn known(key: i64, producers: usize) -> Known {
        let record = StreamRecord::new(Head::new(StreamConfig::json(), 1), None, 0);
        let producers = (0..producers)
            .map(|n| {
                (
                    format!("p{n}"),
                    ProducerState {
                        epoch: 0,
                        seq: 0,
                        last_ms: 0,
                    },
                )
            })
            .collect();
        Known::new(key, record, producers, 0)
    }

    #[test]
    fn the_copy_stays_within_its_bounds_dropping_the_least_recently_used() {
        let mut copy = Copy::default();
        for n in 0..(MAX_STREAMS as i64 + 10) {
            copy.insert(format!("s{n}"), known(n, 0));
        }
        assert!(copy.streams.len() <= MAX_STREAMS);
        assert!(copy.get(&format!("s{}", MAX_STREAMS + 9)).is_some());
        assert!(copy.get("s0").is_none(), "the oldest went first");
        copy.clear();
        for n in 0..40 {
            copy.insert(format!("p{n}"), known(n, 10_000));
        }
        assert!(copy.producers <= MAX_PRODUCERS);
        assert!(copy.get("p39").is_some());
        copy.remove("p39");
        assert!(copy.get("p39").is_none());
    }
}
