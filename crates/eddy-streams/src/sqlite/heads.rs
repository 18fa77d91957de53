//! The writer's copy of the stream records it has read or written, so that
//! an append finds its stream's record without a `SELECT` of its row, and
//! its group writes the row once instead of once per append (the two were
//! half of the writer's work for a small append).
//!
//! A record written by a job is kept *unwritten*: its row is brought up to
//! date by [`Heads::flush`], which the writer calls before the group
//! commits and which a listing (the only SQL that reads rows the copy may
//! hold) calls first. While a job runs, the copy journals every entry the
//! job changes, so that a job rolled back to its savepoint takes back its
//! changes to the copy too, and the unwritten records of the jobs before it
//! stay. The copy is dropped whenever the database may hold something
//! else: when a group rolls back, before a caller's transaction (its own
//! SQL may touch anything), and when another connection has committed
//! since the writer last looked. SQLite tells the last with `PRAGMA
//! data_version`, which changes exactly when another connection commits;
//! the writer asks it once per group, inside the group's write
//! transaction, where no other connection can commit.

use std::collections::HashMap;

use rusqlite::Connection;

use super::records;
use crate::record::StreamRecord;
use crate::StreamError;

/// The most records kept; beyond, the written ones are dropped.
const MAX_HEADS: usize = 65_536;

/// One kept record.
#[derive(Clone, Debug)]
struct Kept {
    key: i64,
    record: StreamRecord,
    /// Whether its row still lacks it.
    unwritten: bool,
}

/// Stream records by path, as the writer's transaction holds them.
#[derive(Debug, Default)]
pub(super) struct Heads {
    by_path: HashMap<String, Kept>,
    paths: HashMap<i64, String>,
    /// `PRAGMA data_version` when the writer last looked.
    version: Option<i64>,
    /// While a job runs: each entry it changed, as it was before (a job
    /// changes one or two; the room is kept from job to job).
    journal: Vec<(String, Option<Kept>)>,
    /// Whether a job runs.
    journaling: bool,
}

impl Heads {
    /// The record at `path`, if kept.
    pub fn get(&self, path: &str) -> Option<(i64, StreamRecord)> {
        self.by_path
            .get(path)
            .map(|kept| (kept.key, kept.record.clone()))
    }

    /// Keeps `record`, read from stream `key`'s row, at `path`.
    pub fn keep(&mut self, path: &str, key: i64, record: StreamRecord) {
        self.put(path, key, record, false);
    }

    /// Keeps `record` as written to stream `key`, whose row is updated at
    /// the next [`flush`](Heads::flush).
    pub fn write(&mut self, path: &str, key: i64, record: StreamRecord) {
        self.put(path, key, record, true);
    }

    fn put(&mut self, path: &str, key: i64, record: StreamRecord, unwritten: bool) {
        self.save(path);
        let kept = Kept {
            key,
            record,
            unwritten,
        };
        // The same stream again (every append after the first): in place,
        // without new copies of its path.
        if let Some(old) = self.by_path.get_mut(path) {
            if old.key == key {
                *old = kept;
                return;
            }
        }
        if self.by_path.len() >= MAX_HEADS && !self.by_path.contains_key(path) {
            self.drop_written();
        }
        if let Some(old) = self.by_path.insert(path.to_owned(), kept) {
            self.paths.remove(&old.key);
        }
        self.paths.insert(key, path.to_owned());
    }

    /// Forgets whatever stream was kept at `path`.
    pub fn forget_path(&mut self, path: &str) {
        self.save(path);
        if let Some(kept) = self.by_path.remove(path) {
            self.paths.remove(&kept.key);
        }
    }

    /// Forgets stream `key` (its row is gone, or its path unknown).
    pub fn forget(&mut self, key: i64) {
        if let Some(path) = self.paths.get(&key).cloned() {
            self.forget_path(&path);
        }
    }

    /// Moves stream `key`'s last access forward to `at_ms`, if kept.
    pub fn slide(&mut self, key: i64, at_ms: i64) {
        if let Some(path) = self.paths.get(&key).cloned() {
            self.save(&path);
            if let Some(kept) = self.by_path.get_mut(&path) {
                kept.record.accessed_ms = kept.record.accessed_ms.max(at_ms);
            }
        }
    }

    /// Writes every unwritten record to its row.
    pub fn flush(&mut self, conn: &Connection) -> Result<(), StreamError> {
        for (path, kept) in self.by_path.iter_mut().filter(|(_, kept)| kept.unwritten) {
            // Journaled: a rollback to the job's savepoint undoes the row.
            if self.journaling {
                note(&mut self.journal, path, Some(kept));
            }
            records::update(conn, kept.key, &kept.record)?;
            kept.unwritten = false;
        }
        Ok(())
    }

    /// Starts journaling a job's changes.
    pub fn begin_job(&mut self) {
        self.journal.clear();
        self.journaling = true;
    }

    /// Ends a job: its changes stay when it is kept, and are undone when
    /// it rolled back to its savepoint.
    pub fn end_job(&mut self, kept: bool) {
        self.journaling = false;
        if kept {
            return;
        }
        for (path, before) in self.journal.drain(..) {
            if let Some(now) = self.by_path.remove(&path) {
                self.paths.remove(&now.key);
            }
            if let Some(before) = before {
                self.paths.insert(before.key, path.clone());
                self.by_path.insert(path, before);
            }
        }
    }

    /// Notes `path`'s entry as it was before the running job first changed it.
    fn save(&mut self, path: &str) {
        if self.journaling {
            note(&mut self.journal, path, self.by_path.get(path));
        }
    }

    /// Drops the records whose rows hold them; a later read selects them
    /// again.
    fn drop_written(&mut self) {
        let paths = &mut self.paths;
        self.by_path.retain(|_, kept| {
            if !kept.unwritten {
                paths.remove(&kept.key);
            }
            kept.unwritten
        });
    }

    /// Forgets everything, unwritten records too: for when the
    /// transaction that holds them rolls back, or none is open.
    pub fn clear(&mut self) {
        self.by_path.clear();
        self.paths.clear();
        self.journal.clear();
        self.journaling = false;
    }

    /// Forgets everything when another connection has committed since the
    /// last look. Call it inside a write transaction, before any job.
    pub fn check(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        if self.version != Some(version) {
            self.clear();
            self.version = Some(version);
        }
        Ok(())
    }
}

/// Journals `before` as `path`'s entry unless the job already changed it.
fn note(journal: &mut Vec<(String, Option<Kept>)>, path: &str, before: Option<&Kept>) {
    if !journal.iter().any(|(saved, _)| saved == path) {
        journal.push((path.to_owned(), before.cloned()));
    }
}

#[cfg(test)]
mod tests {
    use super::Heads;
    use crate::record::StreamRecord;
    use crate::rules::Head;
    use crate::StreamConfig;

    fn record(count: u64) -> StreamRecord {
        let mut record = StreamRecord::new(Head::new(StreamConfig::default(), 1), None, 0);
        record.head.count = count;
        record
    }

    fn kept(heads: &Heads, path: &str) -> Option<(i64, u64, bool)> {
        let kept = heads.by_path.get(path)?;
        Some((kept.key, kept.record.head.count, kept.unwritten))
    }

    #[test]
    fn a_job_rolled_back_leaves_the_copy_as_the_jobs_before_it_left_it() {
        let mut heads = Heads::default();
        heads.begin_job();
        heads.write("a", 1, record(1));
        heads.end_job(true);
        heads.begin_job();
        heads.keep("c", 3, record(7));
        heads.end_job(true);

        heads.begin_job();
        heads.write("a", 1, record(2));
        heads.write("a", 1, record(3));
        heads.write("b", 2, record(5));
        heads.forget(3);
        heads.end_job(false);

        assert_eq!(kept(&heads, "a"), Some((1, 1, true)), "still to be written");
        assert_eq!(kept(&heads, "b"), None);
        assert_eq!(kept(&heads, "c"), Some((3, 7, false)));
        assert_eq!(heads.paths.len(), 2);

        heads.begin_job();
        heads.write("a", 1, record(4));
        heads.end_job(true);
        assert_eq!(kept(&heads, "a"), Some((1, 4, true)));
    }

    #[test]
    fn a_flush_inside_a_job_that_rolls_back_leaves_its_records_unwritten() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        super::super::schema::migrate(&conn, 0).expect("schema");
        let mut heads = Heads::default();
        heads.begin_job();
        heads.write("a", 1, record(1));
        heads.end_job(true);

        heads.begin_job();
        heads.flush(&conn).expect("flush");
        assert_eq!(kept(&heads, "a"), Some((1, 1, false)));
        // The savepoint's rollback undoes the row's update: so is the flag.
        heads.end_job(false);
        assert_eq!(kept(&heads, "a"), Some((1, 1, true)));
    }
}
