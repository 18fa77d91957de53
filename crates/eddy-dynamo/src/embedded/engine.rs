//! Table semantics over a [`Store`]: validation, conditions, transactions,
//! index entries, change records and TTL. Shared by every embedded backend.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::feed::trim_by_age;
use super::keys::encode_key;
use super::records::change_record;
use super::store::{in_write, IndexEntry, LoggedChange, Store, Txn, Write};
use super::tables::{Namespace, TableRef};
use crate::error::{CancellationReason, TableError, ValidationError};
use crate::item::{item_size, items_equal, Item, MAX_ITEM_SIZE, MAX_TRANSACTION_SIZE};
use crate::key_schema::{IndexDefinition, TableSchema};
use crate::request::TransactWriteItem;

/// The most items a transaction holds.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;

/// An encoded `(pk, sk)`, as [`encode_key`] makes it.
pub(crate) type EncodedKey = (String, String);

/// One planned change to one item.
pub(super) struct Change {
    pub table: TableRef,
    pub pk: String,
    pub sk: String,
    pub old: Option<Item>,
    pub new: Option<Item>,
}

/// When a write happens, and how long the change log keeps records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteClock {
    pub now: DateTime<Utc>,
    pub retention: std::time::Duration,
}

/// A transaction's writes, each with the table it writes.
pub(crate) type Writes = Vec<(TableRef, TransactWriteItem)>;

/// Validates a transaction, then evaluates its conditions and commits it
/// with its change records in one write transaction of the store. Returns
/// how many records it wrote.
pub(crate) async fn transact(
    store: &dyn Store,
    writes: Writes,
    clock: WriteClock,
) -> Result<usize, TableError> {
    let keys = validate_writes(&writes)?;
    in_write(store, move |txn| {
        decide_and_commit(txn, writes, keys, clock)
    })
    .await
}

/// Updates one item and returns it as written, in one write transaction.
pub(crate) async fn update(
    store: &dyn Store,
    table: TableRef,
    update: TransactWriteItem,
    clock: WriteClock,
) -> Result<(usize, Item), TableError> {
    let writes = vec![(table, update)];
    let keys = validate_writes(&writes)?;
    let (pk, sk) = keys[0].1.clone();
    in_write(store, move |txn| {
        let written = decide_and_commit(txn, writes, keys, clock);
        let records = crate::table::single(written)?;
        let item = txn
            .get(&pk, &sk)?
            .ok_or_else(|| TableError::internal("the updated item is missing"))?;
        Ok((records, item))
    })
    .await
}

/// Evaluates every condition against the items as they are inside the
/// transaction, and applies the changes when all hold.
fn decide_and_commit(
    txn: &mut dyn Txn,
    writes: Writes,
    keys: Vec<(Item, EncodedKey)>,
    clock: WriteClock,
) -> Result<usize, TableError> {
    let mut reasons = Vec::with_capacity(writes.len());
    let mut failed = false;
    let mut changes = Vec::new();
    let mut total = 0;
    for ((table, request), (key, (pk, sk))) in writes.into_iter().zip(keys) {
        let old = txn.get(&pk, &sk)?;
        let holds = request.condition().is_none_or(|c| c.evaluate(old.as_ref()));
        if !holds {
            failed = true;
            reasons.push(CancellationReason {
                code: "ConditionalCheckFailed".into(),
                item: old,
            });
            continue;
        }
        reasons.push(CancellationReason {
            code: "None".into(),
            item: None,
        });
        let new = match request {
            TransactWriteItem::Put(put) => {
                total += item_size(&put.item);
                Some(put.item)
            }
            TransactWriteItem::Update(update) => {
                let mut item = old.clone().unwrap_or(key);
                update.update.apply(&mut item)?;
                table.schema.validate_item(&item)?;
                check_size(&item)?;
                total += item_size(&item);
                Some(item)
            }
            TransactWriteItem::Delete(_) => {
                total += item_size(&key);
                None
            }
            TransactWriteItem::ConditionCheck(_) => {
                total += item_size(&key);
                continue;
            }
        };
        let unchanged = match (&old, &new) {
            (Some(a), Some(b)) => items_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        if !unchanged {
            changes.push(Change {
                table,
                pk,
                sk,
                old,
                new,
            });
        }
    }
    if failed {
        return Err(TableError::TransactionCanceled { reasons });
    }
    check_transaction_size(total)?;
    commit(txn, changes, clock, false)
}

/// Validates every request of a one-table transaction before any item is
/// read (see [`validate_writes`]).
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
pub(crate) fn validate_transaction(
    schema: &TableSchema,
    items: &[TransactWriteItem],
) -> Result<Vec<(Item, EncodedKey)>, TableError> {
    let table = TableRef {
        schema: Arc::new(schema.clone()),
        ns: Namespace::default(),
    };
    let writes: Writes = items.iter().map(|i| (table.clone(), i.clone())).collect();
    validate_writes(&writes)
}

/// Validates every request of a transaction before any item is read: the
/// count, keys and index key types, item sizes, key updates and duplicate
/// targets (the same key of the same table). Returns each request's key
/// and stored key, in order.
pub(crate) fn validate_writes(writes: &Writes) -> Result<Vec<(Item, EncodedKey)>, TableError> {
    if writes.is_empty() {
        return Err(ValidationError::EmptyTransaction.into());
    }
    if writes.len() > MAX_TRANSACTION_ITEMS {
        return Err(ValidationError::TooManyItems {
            count: writes.len(),
        }
        .into());
    }
    let mut seen = HashSet::new();
    let mut keys = Vec::with_capacity(writes.len());
    let mut total = 0;
    for (table, request) in writes {
        let schema = &table.schema;
        let key = match request {
            TransactWriteItem::Put(put) => {
                schema.validate_item(&put.item)?;
                check_size(&put.item)?;
                total += item_size(&put.item);
                schema
                    .key
                    .extract(&put.item)
                    .ok_or_else(|| ValidationError::InvalidKey("missing key".into()))?
            }
            TransactWriteItem::Update(update) => {
                schema.validate_key(&update.key)?;
                if let Some(name) = update
                    .update
                    .attribute_names()
                    .find(|n| schema.key.names().any(|k| k == *n))
                {
                    return Err(ValidationError::InvalidUpdate(format!(
                        "{name} is part of the key and cannot be updated"
                    ))
                    .into());
                }
                update.key.clone()
            }
            TransactWriteItem::Delete(delete) => {
                schema.validate_key(&delete.key)?;
                delete.key.clone()
            }
            TransactWriteItem::ConditionCheck(check) => {
                schema.validate_key(&check.key)?;
                check.key.clone()
            }
        };
        if !matches!(request, TransactWriteItem::Put(_)) {
            // What an update leaves is known once the item is read.
            total += item_size(&key);
        }
        let encoded = table
            .encode_key(&key)
            .ok_or_else(|| ValidationError::InvalidKey("missing key".into()))?;
        if !seen.insert(encoded.clone()) {
            return Err(ValidationError::DuplicateItem.into());
        }
        keys.push((key, encoded));
    }
    check_transaction_size(total)?;
    Ok(keys)
}

/// A transaction's items may total 4 MB: a put its item, an update the
/// item it leaves, a delete or a condition check its key.
fn check_transaction_size(total: usize) -> Result<(), ValidationError> {
    if total > MAX_TRANSACTION_SIZE {
        return Err(ValidationError::TransactionTooLarge { size: total });
    }
    Ok(())
}

fn check_size(item: &Item) -> Result<(), ValidationError> {
    let size = item_size(item);
    if size > MAX_ITEM_SIZE {
        return Err(ValidationError::ItemTooLarge { size });
    }
    Ok(())
}

/// The index entries of an item: one per index whose key attributes it
/// carries (sparse membership).
fn index_entries(table: &TableRef, item: &Item) -> Vec<IndexEntry> {
    table
        .schema
        .indexes
        .iter()
        .filter_map(|index| index_entry(index, item))
        .map(|(idx, ipk, isk)| (table.ns.index(&idx), ipk, isk))
        .collect()
}

/// The item's entry in one index, when it carries the index's key.
pub(crate) fn index_entry(index: &IndexDefinition, item: &Item) -> Option<IndexEntry> {
    encode_key(&index.key, item).map(|(ipk, isk)| (index.name.clone(), ipk, isk))
}

/// How often (in sequence numbers) a commit also trims the log by age, so
/// the log stays bounded without anyone asking.
const TRIM_EVERY: u64 = 1024;

/// Applies planned changes with their change records (attributed to the
/// DynamoDB service when `by_service`: TTL deletions).
pub(super) fn commit(
    txn: &mut dyn Txn,
    changes: Vec<Change>,
    clock: WriteClock,
    by_service: bool,
) -> Result<usize, TableError> {
    let first = txn.last_sequence()?;
    let mut seq = first;
    let mut writes = Vec::with_capacity(changes.len());
    let mut records = Vec::with_capacity(changes.len());
    for change in changes {
        if change.table.ns.logged() {
            seq = seq.checked_add(1).ok_or_else(|| {
                TableError::internal("the change feed's sequence numbers ran out")
            })?;
            let record = change_record(
                &change.table.schema,
                seq,
                change.old,
                change.new.as_ref(),
                clock.now,
                by_service,
            );
            records.push(LoggedChange {
                seq,
                created: clock.now.timestamp(),
                record,
            });
        }
        writes.push(match change.new {
            Some(item) => Write::Put {
                indexes: index_entries(&change.table, &item),
                pk: change.pk,
                sk: change.sk,
                item,
            },
            None => Write::Delete {
                pk: change.pk,
                sk: change.sk,
            },
        });
    }
    let count = records.len();
    txn.apply(writes, records)?;
    if first / TRIM_EVERY != seq / TRIM_EVERY {
        trim_by_age(txn, clock)?;
    }
    Ok(count)
}
