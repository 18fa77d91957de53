//! The in-memory store: ordered maps, lost on drop. For tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::store::{Store, Txn, Write};
use crate::change_feed::ChangeRecord;
use crate::error::TableError;
use crate::item::Item;

type Key = (String, String);

#[derive(Default)]
pub(crate) struct MemoryStore {
    items: BTreeMap<Key, Item>,
    index: HashMap<(String, String), BTreeSet<Key>>,
    memberships: HashMap<Key, Vec<(String, String)>>,
    changes: BTreeMap<u64, ChangeRecord>,
    checkpoints: HashMap<String, String>,
}

impl MemoryStore {
    fn remove(&mut self, key: &Key) {
        self.items.remove(key);
        for member in self.memberships.remove(key).unwrap_or_default() {
            if let Some(set) = self.index.get_mut(&member) {
                set.remove(key);
            }
        }
    }
}

impl Txn for MemoryStore {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        Ok(self.items.get(&(pk.to_owned(), sk.to_owned())).cloned())
    }

    fn last_sequence(&self) -> Result<u64, TableError> {
        Ok(self.changes.keys().next_back().copied().unwrap_or(0))
    }

    fn all_items(&self) -> Result<Vec<Item>, TableError> {
        Ok(self.items.values().cloned().collect())
    }

    fn apply(
        &mut self,
        writes: Vec<Write>,
        records: Vec<(u64, ChangeRecord)>,
    ) -> Result<(), TableError> {
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
                    for member in &indexes {
                        self.index
                            .entry(member.clone())
                            .or_default()
                            .insert(key.clone());
                    }
                    self.memberships.insert(key.clone(), indexes);
                    self.items.insert(key, item);
                }
                Write::Delete { pk, sk } => self.remove(&(pk, sk)),
            }
        }
        self.changes.extend(records);
        Ok(())
    }
}

impl Store for MemoryStore {
    fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
        Txn::get(self, pk, sk)
    }

    fn partition(&self, index: Option<&str>, pk: &str) -> Result<Vec<Item>, TableError> {
        Ok(match index {
            None => self
                .items
                .range((pk.to_owned(), String::new())..)
                .take_while(|((p, _), _)| p == pk)
                .map(|(_, item)| item.clone())
                .collect(),
            Some(index) => self
                .index
                .get(&(index.to_owned(), pk.to_owned()))
                .map(|keys| {
                    keys.iter()
                        .filter_map(|k| self.items.get(k).cloned())
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The handle's lock is the only writer, and `apply` comes last and
    /// cannot fail half-way: the work is atomic as it is.
    fn write(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Txn) -> Result<(), TableError>,
    ) -> Result<(), TableError> {
        work(self)
    }

    fn changes_after(&self, after: u64, limit: usize) -> Result<Vec<ChangeRecord>, TableError> {
        Ok(self
            .changes
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, r)| r.clone())
            .collect())
    }

    fn load_checkpoint(&self, consumer: &str) -> Result<Option<String>, TableError> {
        Ok(self.checkpoints.get(consumer).cloned())
    }

    fn save_checkpoint(&mut self, consumer: &str, sequence: &str) -> Result<(), TableError> {
        self.checkpoints
            .insert(consumer.to_owned(), sequence.to_owned());
        Ok(())
    }
}
