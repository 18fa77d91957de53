//! TTL: deleting the items whose TTL attribute has passed, as DynamoDB's
//! background sweep does, with REMOVE records attributed to the DynamoDB
//! service. The sweep goes in steps: each is one write transaction that
//! loads at most [`EXPIRY_STEP`] items, in key order after the last one the
//! step before loaded, so the table's writers get in between steps instead
//! of waiting for a sweep of the whole file (it used to load every item in
//! one transaction).

use std::cmp::Ordering;

use super::engine::{commit, Change, WriteClock};
use super::store::{in_write, Store, Txn};
use super::tables::TableRef;
use crate::error::TableError;
use crate::item::{compare_values, AttributeValue};

/// The most items one step of a sweep loads.
pub(crate) const EXPIRY_STEP: usize = 256;

/// Deletes the items whose TTL attribute is at or before `now_secs`, a
/// step at a time; returns how many it deleted. An item written behind the
/// sweep's position is left for the next sweep, as DynamoDB's own sweep
/// may take days to come by.
pub(crate) async fn expire(
    store: &dyn Store,
    table: TableRef,
    now_secs: u64,
    clock: WriteClock,
) -> Result<usize, TableError> {
    let Some(ttl) = table.schema.ttl_attribute.clone() else {
        return Ok(0);
    };
    let limit = AttributeValue::N(now_secs.to_string());
    let mut after: Option<(String, String)> = None;
    let mut expired = 0;
    loop {
        let (table, ttl, limit) = (table.clone(), ttl.clone(), limit.clone());
        let (count, last) = in_write(store, move |txn| {
            step(txn, &table, &ttl, &limit, after.as_ref(), clock)
        })
        .await?;
        expired += count;
        match last {
            Some(key) => after = Some(key),
            None => return Ok(expired),
        }
    }
}

/// One step: the next items after `after`, the expired ones of `table`
/// deleted. Returns how many, and the last key loaded when more may follow.
fn step(
    txn: &mut dyn Txn,
    table: &TableRef,
    ttl: &str,
    limit: &AttributeValue,
    after: Option<&(String, String)>,
    clock: WriteClock,
) -> Result<(usize, Option<(String, String)>), TableError> {
    let items = txn.items_after(after, EXPIRY_STEP)?;
    let last = match items.last() {
        Some((pk, sk, _)) if items.len() == EXPIRY_STEP => Some((pk.clone(), sk.clone())),
        _ => None,
    };
    let mut changes = Vec::new();
    for (pk, sk, item) in items {
        if !table.ns.owns(&pk) {
            continue;
        }
        let due = match item.get(ttl) {
            Some(v @ AttributeValue::N(_)) => matches!(
                compare_values(v, limit),
                Some(Ordering::Less | Ordering::Equal)
            ),
            _ => false,
        };
        if due {
            changes.push(Change {
                table: table.clone(),
                pk,
                sk,
                old: Some(item),
                new: None,
            });
        }
    }
    let count = changes.len();
    if count > 0 {
        commit(txn, changes, clock, true)?;
    }
    Ok((count, last))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::embedded::engine::{transact, Writes};
    use crate::embedded::memory::MemoryStore;
    use crate::embedded::store::{Completion, KeyRange, LoggedChange, Work, Write};
    use crate::embedded::tables::Namespace;
    use crate::item::{n, s, Item};
    use crate::key_schema::TableSchema;
    use crate::request::Put;

    /// The memory store, counting how many items each write transaction
    /// loaded in bulk (the TTL sweep's reads), and the write transactions.
    #[derive(Default)]
    struct Counting {
        inner: MemoryStore,
        largest: Arc<AtomicUsize>,
        works: Arc<AtomicUsize>,
    }

    struct CountingTxn<'a> {
        txn: &'a mut dyn Txn,
    }

    impl Txn for CountingTxn<'_> {
        fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
            self.txn.get(pk, sk)
        }
        fn last_sequence(&self) -> Result<u64, TableError> {
            self.txn.last_sequence()
        }
        fn items_after(
            &self,
            after: Option<&(String, String)>,
            limit: usize,
        ) -> Result<Vec<(String, String, Item)>, TableError> {
            let items = self.txn.items_after(after, limit)?;
            // Counted through a cell: the method takes `&self`.
            LOADED.with(|l| l.set(l.get() + items.len()));
            Ok(items)
        }
        fn apply(&mut self, w: Vec<Write>, r: Vec<LoggedChange>) -> Result<(), TableError> {
            self.txn.apply(w, r)
        }
        fn save_checkpoint(&mut self, c: &str, s: u64) -> Result<(), TableError> {
            self.txn.save_checkpoint(c, s)
        }
        fn checkpoints(&self) -> Result<Vec<u64>, TableError> {
            self.txn.checkpoints()
        }
        fn trimmed_through(&self) -> Result<u64, TableError> {
            self.txn.trimmed_through()
        }
        fn oldest(&self, limit: usize) -> Result<Vec<(u64, i64)>, TableError> {
            self.txn.oldest(limit)
        }
        fn trim_through(&mut self, seq: u64) -> Result<(), TableError> {
            self.txn.trim_through(seq)
        }
        fn table_schema(&self, name: &str) -> Result<Option<String>, TableError> {
            self.txn.table_schema(name)
        }
        fn save_table_schema(&mut self, name: &str, schema: &str) -> Result<(), TableError> {
            self.txn.save_table_schema(name, schema)
        }
    }

    thread_local! {
        static LOADED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    impl Store for Counting {
        fn get(&self, pk: &str, sk: &str) -> Result<Option<Item>, TableError> {
            self.inner.get(pk, sk)
        }
        fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Option<Item>>, TableError> {
            self.inner.get_many(keys)
        }
        fn query(
            &self,
            range: &KeyRange,
            visit: &mut dyn FnMut(Item) -> bool,
        ) -> Result<bool, TableError> {
            self.inner.query(range, visit)
        }
        fn scan(
            &self,
            after: Option<&(String, String)>,
            visit: &mut dyn FnMut(&str, Item) -> bool,
        ) -> Result<bool, TableError> {
            self.inner.scan(after, visit)
        }
        fn changes_after(
            &self,
            after: Option<u64>,
            limit: usize,
        ) -> Result<Vec<crate::change_feed::ChangeRecord>, TableError> {
            self.inner.changes_after(after, limit)
        }
        fn load_checkpoint(&self, consumer: &str) -> Result<Option<u64>, TableError> {
            self.inner.load_checkpoint(consumer)
        }
        fn write(&self, work: Work) {
            let (largest, works) = (self.largest.clone(), self.works.clone());
            self.inner.write(Box::new(move |txn| {
                LOADED.with(|l| l.set(0));
                let mut counting = CountingTxn { txn };
                let done: Result<Completion, ()> = work(&mut counting);
                let loaded = LOADED.with(|l| l.get());
                largest.fetch_max(loaded, Ordering::SeqCst);
                works.fetch_add(1, Ordering::SeqCst);
                done
            }));
        }
        fn blocking(&self) -> bool {
            false
        }
    }

    fn clock() -> WriteClock {
        WriteClock {
            now: chrono::Utc::now(),
            retention: std::time::Duration::from_secs(86_400),
        }
    }

    /// Regression (issue 25): the TTL sweep loaded every item of the file
    /// inside one write transaction, so every writer waited for the whole
    /// sweep. Now it sweeps in steps of at most `EXPIRY_STEP` items, each
    /// its own transaction, writers getting in between.
    #[tokio::test]
    async fn the_ttl_sweep_loads_a_bounded_step_per_transaction() {
        let store = Counting::default();
        let schema = TableSchema::single_table("sweep").with_ttl("expires");
        let table = TableRef {
            schema: Arc::new(schema),
            ns: Namespace::default(),
        };
        let items = 1_000;
        for chunk in 0..items / 100 {
            let writes: Writes = (0..100)
                .map(|i| {
                    let at = chunk * 100 + i;
                    let mut item = Item::from([
                        ("pk".to_owned(), s(format!("p{at:04}"))),
                        ("sk".to_owned(), s("s")),
                    ]);
                    // Every other item has expired.
                    item.insert("expires".into(), n(if at % 2 == 0 { 10 } else { 1_000 }));
                    (table.clone(), Put::new(item).into())
                })
                .collect();
            transact(&store, writes, clock()).await.unwrap();
        }
        store.largest.store(0, Ordering::SeqCst);
        store.works.store(0, Ordering::SeqCst);
        let expired = expire(&store, table.clone(), 500, clock()).await.unwrap();
        assert_eq!(expired, items / 2);
        let largest = store.largest.load(Ordering::SeqCst);
        assert!(
            largest <= EXPIRY_STEP,
            "one transaction loaded {largest} items"
        );
        assert!(store.works.load(Ordering::SeqCst) >= items / EXPIRY_STEP);
        let left = expire(&store, table, 500, clock()).await.unwrap();
        assert_eq!(left, 0, "every expired item was swept");
    }
}
