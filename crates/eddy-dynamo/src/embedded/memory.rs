//! The in-memory store: ordered maps under one lock, lost on drop. Queries
//! are range scans of the maps, as on SQLite's indexes, so both embedded
//! backends have the same cost shape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use super::feed::check_readable;
use super::store::{
    max_lower, min_upper, IndexEntry, IndexEntryKey, KeyRange, LoggedChange, Store, Txn, Work,
    Write,
};
use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;

type Key = (String, String);

#[derive(Default)]
struct Data {
    items: BTreeMap<Key, Item>,
    /// `(index, partition)` to the entries of that partition, in order.
    index: HashMap<Key, BTreeSet<IndexEntryKey>>,
    memberships: HashMap<Key, Vec<IndexEntry>>,
    changes: BTreeMap<u64, (i64, ChangeRecord)>,
    last_seq: u64,
    trimmed: u64,
    checkpoints: HashMap<String, u64>,
    tables: HashMap<String, String>,
}

/// The memory store. Works run under its lock and fail only before they
/// apply anything, so each is atomic without a rollback log.
#[derive(Default)]
pub(crate) struct MemoryStore {
    data: Mutex<Data>,
}

impl MemoryStore {
    fn lock(&self) -> Result<MutexGuard<'_, Data>, TableError> {
        self.data.lock().map_err(|_| {
            TableError::internal("the table is poisoned by an earlier panic; reopen it")
        })
    }
}

impl Data {
    fn remove(&mut self, key: &Key) {
        self.items.remove(key);
        for (idx, ipk, isk) in self.memberships.remove(key).unwrap_or_default() {
            if let Some(set) = self.index.get_mut(&(idx, ipk)) {
                set.remove(&(isk, key.0.clone(), key.1.clone()));
            }
        }
    }
}

impl Txn for Data {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        Ok(self.items.get(&(pk.to_owned(), sk.to_owned())).cloned())
    }

    fn last_sequence(&self) -> Result<u64, TableError> {
        Ok(self.last_seq)
    }

    fn items_after(
        &self,
        after: Option<&(String, String)>,
        limit: usize,
    ) -> Result<Vec<(String, String, Item)>, TableError> {
        let from = match after {
            Some(key) => Bound::Excluded(key.clone()),
            None => Bound::Unbounded,
        };
        Ok(self
            .items
            .range((from, Bound::Unbounded))
            .take(limit)
            .map(|((pk, sk), item)| (pk.clone(), sk.clone(), item.clone()))
            .collect())
    }

    fn apply(&mut self, writes: Vec<Write>, records: Vec<LoggedChange>) -> Result<(), TableError> {
        for write in writes {
            match write {
                Write::Put {
                    pk,
                    sk,
                    item,
                    indexes,
                } => {
                    let key = (pk, sk);
                    self.remove(&key);
                    for (idx, ipk, isk) in &indexes {
                        self.index
                            .entry((idx.clone(), ipk.clone()))
                            .or_default()
                            .insert((isk.clone(), key.0.clone(), key.1.clone()));
                    }
                    self.memberships.insert(key.clone(), indexes);
                    self.items.insert(key, item);
                }
                Write::Delete { pk, sk } => self.remove(&(pk, sk)),
            }
        }
        for change in records {
            self.last_seq = self.last_seq.max(change.seq);
            self.changes
                .insert(change.seq, (change.created, change.record));
        }
        Ok(())
    }

    fn save_checkpoint(&mut self, consumer: &str, sequence: u64) -> Result<(), TableError> {
        self.checkpoints.insert(consumer.to_owned(), sequence);
        Ok(())
    }

    fn checkpoints(&self) -> Result<Vec<u64>, TableError> {
        Ok(self.checkpoints.values().copied().collect())
    }

    fn trimmed_through(&self) -> Result<u64, TableError> {
        Ok(self.trimmed)
    }

    fn oldest(&self, limit: usize) -> Result<Vec<(u64, i64)>, TableError> {
        Ok(self
            .changes
            .iter()
            .take(limit)
            .map(|(seq, (created, _))| (*seq, *created))
            .collect())
    }

    fn trim_through(&mut self, seq: u64) -> Result<(), TableError> {
        self.changes = self.changes.split_off(&seq.saturating_add(1));
        self.trimmed = self.trimmed.max(seq);
        Ok(())
    }

    fn table_schema(&self, name: &str) -> Result<Option<String>, TableError> {
        Ok(self.tables.get(name).cloned())
    }

    fn save_table_schema(&mut self, name: &str, schema: &str) -> Result<(), TableError> {
        self.tables.insert(name.to_owned(), schema.to_owned());
        Ok(())
    }
}

/// Visits the entries in order (or reversed) until `visit` returns false;
/// returns whether entries remain after the last one visited.
fn visit_in_order<T>(
    entries: impl DoubleEndedIterator<Item = T>,
    forward: bool,
    mut visit: impl FnMut(T) -> bool,
) -> bool {
    let mut entries: Box<dyn Iterator<Item = T>> = if forward {
        Box::new(entries)
    } else {
        Box::new(entries.rev())
    };
    while let Some(entry) = entries.next() {
        if !visit(entry) {
            return entries.next().is_some();
        }
    }
    false
}

/// Whether no key lies within the bounds (`BTreeMap::range` panics then).
fn is_empty<K: Ord>(lower: &Bound<K>, upper: &Bound<K>) -> bool {
    match (lower, upper) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

/// Bounds on `(sort key, pk, sk)` entries from bounds on the sort key:
/// `v + "\0"` is the smallest text above `v`.
fn entry_bounds(
    lower: &Bound<String>,
    upper: &Bound<String>,
) -> (Bound<IndexEntryKey>, Bound<IndexEntryKey>) {
    let first = |sort: String| (sort, String::new(), String::new());
    let lower = match lower {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(v) => Bound::Included(first(v.clone())),
        Bound::Excluded(v) => Bound::Included(first(format!("{v}\0"))),
    };
    let upper = match upper {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(v) => Bound::Excluded(first(format!("{v}\0"))),
        Bound::Excluded(v) => Bound::Excluded(first(v.clone())),
    };
    (lower, upper)
}

/// Narrows bounds to the entries after (or, backward, before) a position.
fn narrow<K: Ord>(
    (lower, upper): (Bound<K>, Bound<K>),
    after: Option<K>,
    forward: bool,
) -> (Bound<K>, Bound<K>) {
    match after {
        None => (lower, upper),
        Some(at) if forward => (max_lower(lower, Bound::Excluded(at)), upper),
        Some(at) => (lower, min_upper(upper, Bound::Excluded(at))),
    }
}

impl Store for MemoryStore {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        self.lock()?.get(pk, sk)
    }

    fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, TableError> {
        let data = self.lock()?;
        keys.iter().map(|(pk, sk)| data.get(pk, sk)).collect()
    }

    fn scan(
        &self,
        after: Option<&(String, String)>,
        visit: &mut dyn FnMut(&str, Item) -> bool,
    ) -> Result<bool, TableError> {
        let data = self.lock()?;
        let from = after.map_or(Bound::Unbounded, |key| Bound::Excluded(key.clone()));
        let mut entries = data.items.range((from, Bound::Unbounded));
        for ((pk, _), item) in entries.by_ref() {
            if !visit(pk, item.clone()) {
                break;
            }
        }
        Ok(entries.next().is_some())
    }

    fn query(
        &self,
        range: &KeyRange,
        visit: &mut dyn FnMut(Item) -> bool,
    ) -> Result<bool, TableError> {
        let data = self.lock()?;
        let pk = &range.partition;
        let Some(index) = &range.index else {
            // The table: entries are `(pk, sk)`, the sort key is `sk`.
            let within = |b: &Bound<String>, edge: Bound<Key>| match b {
                Bound::Included(sk) => Bound::Included((pk.clone(), sk.clone())),
                Bound::Excluded(sk) => Bound::Excluded((pk.clone(), sk.clone())),
                Bound::Unbounded => edge,
            };
            let bounds = (
                within(&range.lower, Bound::Included((pk.clone(), String::new()))),
                within(
                    &range.upper,
                    Bound::Excluded((format!("{pk}\0"), String::new())),
                ),
            );
            let after = range.after.as_ref().map(|(_, p, s)| (p.clone(), s.clone()));
            let (lower, upper) = narrow(bounds, after, range.forward);
            if is_empty(&lower, &upper) {
                return Ok(false);
            }
            let entries = data.items.range((lower, upper));
            return Ok(visit_in_order(entries, range.forward, |(_, item)| {
                visit(item.clone())
            }));
        };
        let Some(entries) = data.index.get(&(index.clone(), pk.clone())) else {
            return Ok(false);
        };
        let bounds = entry_bounds(&range.lower, &range.upper);
        let (lower, upper) = narrow(bounds, range.after.clone(), range.forward);
        if is_empty(&lower, &upper) {
            return Ok(false);
        }
        let entries = entries.range((lower, upper));
        Ok(visit_in_order(entries, range.forward, |(_, pk, sk)| {
            // Entries and items change together: an entry always has its item.
            match data.items.get(&(pk.clone(), sk.clone())) {
                Some(item) => visit(item.clone()),
                None => true,
            }
        }))
    }

    fn changes_after(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, TableError> {
        let data = self.lock()?;
        if let Some(after) = after {
            check_readable(after, data.trimmed)?;
        }
        Ok(data
            .changes
            .range(after.unwrap_or(0).saturating_add(1)..)
            .take(limit)
            .map(|(_, (_, r))| r.clone())
            .collect())
    }

    fn load_checkpoint(&self, consumer: &str) -> Result<Option<u64>, TableError> {
        Ok(self.lock()?.checkpoints.get(consumer).copied())
    }

    fn write(&self, work: Work) {
        let mut guard = match self.lock() {
            Ok(guard) => guard,
            Err(e) => {
                let _ = work(&mut Refused(e.to_string()));
                return;
            }
        };
        let done = work(&mut *guard);
        drop(guard);
        if let Ok(done) = done {
            done(Ok(()));
        }
    }

    fn blocking(&self) -> bool {
        false
    }
}

/// A transaction that refuses everything: how a work learns that its store
/// cannot write (poisoned, or its transaction could not begin).
pub(crate) struct Refused(pub String);

impl Refused {
    fn fail<T>(&self) -> Result<T, TableError> {
        Err(TableError::internal(&self.0))
    }
}

impl Txn for Refused {
    fn get(&self, _: &str, _: &str) -> Result<Option<Item>, TableError> {
        self.fail()
    }
    fn last_sequence(&self) -> Result<u64, TableError> {
        self.fail()
    }
    fn items_after(
        &self,
        _: Option<&(String, String)>,
        _: usize,
    ) -> Result<Vec<(String, String, Item)>, TableError> {
        self.fail()
    }
    fn apply(&mut self, _: Vec<Write>, _: Vec<LoggedChange>) -> Result<(), TableError> {
        self.fail()
    }
    fn save_checkpoint(&mut self, _: &str, _: u64) -> Result<(), TableError> {
        self.fail()
    }
    fn checkpoints(&self) -> Result<Vec<u64>, TableError> {
        self.fail()
    }
    fn trimmed_through(&self) -> Result<u64, TableError> {
        self.fail()
    }
    fn oldest(&self, _: usize) -> Result<Vec<(u64, i64)>, TableError> {
        self.fail()
    }
    fn trim_through(&mut self, _: u64) -> Result<(), TableError> {
        self.fail()
    }
    fn table_schema(&self, _: &str) -> Result<Option<String>, TableError> {
        self.fail()
    }
    fn save_table_schema(&mut self, _: &str, _: &str) -> Result<(), TableError> {
        self.fail()
    }
}
