//! Table semantics over a [`Store`]: validation, conditions, transactions,
//! change records and queries. Shared by every embedded backend.

use std::cmp::Ordering;
use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::records::change_record;
use super::store::{in_write, Store, Txn, Write};
use crate::change_feed::ChangeRecord;
use crate::error::{CancellationReason, TableError, ValidationError};
use crate::item::{
    compare_values, item_size, items_equal, parse_number, AttributeValue, Item, MAX_ITEM_SIZE,
};
use crate::key_schema::{KeyDefinition, TableSchema};
use crate::query::{Query, QueryPage};
use crate::request::TransactWriteItem;

/// The most items a transaction holds.
pub(crate) const MAX_TRANSACTION_ITEMS: usize = 100;
/// The most bytes of items one query page returns.
const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// Encodes a key value so equal values (`1` and `1.0` included) encode equally.
pub(crate) fn encode_value(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) => format!("S{s}"),
        AttributeValue::N(n) => match parse_number(n) {
            Some(d) => format!("N{}", d.normalized()),
            None => format!("N{n}"),
        },
        AttributeValue::B(b) => {
            let mut out = String::from("B");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out
        }
        other => format!("?{other:?}"),
    }
}

/// The encoded `(pk, sk)` of an item or key under a key definition.
pub(crate) fn encode_key(def: &KeyDefinition, item: &Item) -> Option<(String, String)> {
    let pk = encode_value(item.get(&def.partition.name)?);
    let sk = match &def.sort {
        Some(sort) => encode_value(item.get(&sort.name)?),
        None => String::new(),
    };
    Some((pk, sk))
}

/// One planned change to one item.
struct Change {
    pk: String,
    sk: String,
    old: Option<Item>,
    new: Option<Item>,
}

/// Validates a transaction, then evaluates its conditions and commits it
/// with its change records in one write transaction of the store. Returns
/// the records written.
pub(crate) fn transact(
    store: &mut dyn Store,
    schema: &TableSchema,
    items: Vec<TransactWriteItem>,
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRecord>, TableError> {
    let keys = validate_transaction(schema, &items)?;
    in_write(store, |txn| {
        decide_and_commit(txn, schema, items, keys, now)
    })
}

/// Updates one item and returns it as written, in one write transaction.
pub(crate) fn update(
    store: &mut dyn Store,
    schema: &TableSchema,
    update: TransactWriteItem,
    now: DateTime<Utc>,
) -> Result<(Vec<ChangeRecord>, Item), TableError> {
    let keys = validate_transaction(schema, std::slice::from_ref(&update))?;
    let (pk, sk) = keys[0].1.clone();
    in_write(store, |txn| {
        let records =
            crate::table::single(decide_and_commit(txn, schema, vec![update], keys, now))?;
        let item = txn
            .get(&pk, &sk)?
            .ok_or_else(|| TableError::internal("the updated item is missing"))?;
        Ok((records, item))
    })
}

/// Evaluates every condition against the items as they are inside the
/// transaction, and applies the changes when all hold.
fn decide_and_commit(
    txn: &mut dyn Txn,
    schema: &TableSchema,
    items: Vec<TransactWriteItem>,
    keys: Vec<(Item, EncodedKey)>,
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRecord>, TableError> {
    let mut reasons = Vec::with_capacity(items.len());
    let mut failed = false;
    let mut changes = Vec::new();
    for (request, (key, (pk, sk))) in items.into_iter().zip(keys) {
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
            TransactWriteItem::Put(put) => Some(put.item),
            TransactWriteItem::Update(update) => {
                let mut item = old.clone().unwrap_or(key);
                update.update.apply(&mut item)?;
                schema.validate_item(&item)?;
                check_size(&item)?;
                Some(item)
            }
            TransactWriteItem::Delete(_) => None,
            TransactWriteItem::ConditionCheck(_) => continue,
        };
        let unchanged = match (&old, &new) {
            (Some(a), Some(b)) => items_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        if !unchanged {
            changes.push(Change { pk, sk, old, new });
        }
    }
    if failed {
        return Err(TableError::TransactionCanceled { reasons });
    }
    commit(txn, schema, changes, now, false)
}

/// An encoded `(pk, sk)`, as [`encode_key`] makes it.
pub(crate) type EncodedKey = (String, String);

/// Validates every request of a transaction before any item is read: the
/// count, keys and index key types, item sizes, key updates and duplicate
/// targets. Returns each request's key and encoded key, in order.
pub(crate) fn validate_transaction(
    schema: &TableSchema,
    items: &[TransactWriteItem],
) -> Result<Vec<(Item, EncodedKey)>, TableError> {
    if items.is_empty() {
        return Err(ValidationError::EmptyTransaction.into());
    }
    if items.len() > MAX_TRANSACTION_ITEMS {
        return Err(ValidationError::TooManyItems { count: items.len() }.into());
    }
    let mut seen = HashSet::new();
    let mut keys = Vec::with_capacity(items.len());
    for request in items {
        let key = match request {
            TransactWriteItem::Put(put) => {
                schema.validate_item(&put.item)?;
                check_size(&put.item)?;
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
        let encoded = encode_key(&schema.key, &key)
            .ok_or_else(|| ValidationError::InvalidKey("missing key".into()))?;
        if !seen.insert(encoded.clone()) {
            return Err(ValidationError::DuplicateItem.into());
        }
        keys.push((key, encoded));
    }
    Ok(keys)
}

/// Deletes the items whose TTL attribute is at or before `now_secs`,
/// recording REMOVE records attributed to the DynamoDB service.
pub(crate) fn expire(
    store: &mut dyn Store,
    schema: &TableSchema,
    now_secs: u64,
    now: DateTime<Utc>,
) -> Result<usize, TableError> {
    let Some(ttl) = &schema.ttl_attribute else {
        return Ok(0);
    };
    let limit = AttributeValue::N(now_secs.to_string());
    in_write(store, |txn| {
        let mut changes = Vec::new();
        for item in txn.all_items()? {
            let expired = match item.get(ttl) {
                Some(v @ AttributeValue::N(_)) => matches!(
                    compare_values(v, &limit),
                    Some(Ordering::Less | Ordering::Equal)
                ),
                _ => false,
            };
            if expired {
                if let Some((pk, sk)) = encode_key(&schema.key, &item) {
                    changes.push(Change {
                        pk,
                        sk,
                        old: Some(item),
                        new: None,
                    });
                }
            }
        }
        let count = changes.len();
        if count > 0 {
            commit(txn, schema, changes, now, true)?;
        }
        Ok(count)
    })
}

fn check_size(item: &Item) -> Result<(), ValidationError> {
    let size = item_size(item);
    if size > MAX_ITEM_SIZE {
        return Err(ValidationError::ItemTooLarge { size });
    }
    Ok(())
}

fn commit(
    txn: &mut dyn Txn,
    schema: &TableSchema,
    changes: Vec<Change>,
    now: DateTime<Utc>,
    by_service: bool,
) -> Result<Vec<ChangeRecord>, TableError> {
    let mut seq = txn.last_sequence()?;
    let mut writes = Vec::with_capacity(changes.len());
    let mut records = Vec::with_capacity(changes.len());
    for change in changes {
        seq = seq
            .checked_add(1)
            .ok_or_else(|| TableError::internal("the change feed's sequence numbers ran out"))?;
        let record = change_record(
            schema,
            seq,
            change.old.as_ref(),
            change.new.as_ref(),
            now,
            by_service,
        );
        records.push((seq, record));
        writes.push(match change.new {
            Some(item) => {
                let indexes = schema
                    .indexes
                    .iter()
                    .filter_map(|index| {
                        encode_key(&index.key, &item).map(|(ipk, _)| (index.name.clone(), ipk))
                    })
                    .collect();
                Write::Put {
                    pk: change.pk,
                    sk: change.sk,
                    item,
                    indexes,
                }
            }
            None => Write::Delete {
                pk: change.pk,
                sk: change.sk,
            },
        });
    }
    let out = records.iter().map(|(_, r)| r.clone()).collect();
    txn.apply(writes, records)?;
    Ok(out)
}

/// Validates a query before it runs, and returns the key it queries.
pub(crate) fn validate_query<'a>(
    schema: &'a TableSchema,
    query: &Query,
) -> Result<&'a KeyDefinition, TableError> {
    let def = match &query.index {
        None => &schema.key,
        Some(name) => &schema.index(name)?.key,
    };
    if !def.partition.kind.matches(&query.partition) {
        return Err(ValidationError::InvalidQuery(format!(
            "the partition value must be of type {:?}",
            def.partition.kind
        ))
        .into());
    }
    if query.limit == Some(0) {
        return Err(ValidationError::InvalidQuery("limit must be at least 1".into()).into());
    }
    if query.sort.is_some() && def.sort.is_none() {
        return Err(ValidationError::InvalidQuery(
            "the key has no sort attribute to condition".into(),
        )
        .into());
    }
    Ok(def)
}

/// Runs a query against the store.
pub(crate) fn query(
    store: &dyn Store,
    schema: &TableSchema,
    query: &Query,
) -> Result<QueryPage, TableError> {
    let def = validate_query(schema, query)?;
    let mut items = store.partition(query.index.as_deref(), &encode_value(&query.partition))?;
    if let (Some(cond), Some(sort)) = (&query.sort, &def.sort) {
        items.retain(|item| item.get(&sort.name).is_some_and(|v| cond.matches(v)));
    }
    let order = |a: &Item, b: &Item| order_items(schema, def, a, b);
    items.sort_by(order);
    if !query.forward {
        items.reverse();
    }
    if let Some(start) = &query.exclusive_start_key {
        for name in def.names().chain(schema.key.names()) {
            if !start.contains_key(name) {
                return Err(
                    ValidationError::InvalidQuery(format!("the paging key lacks {name}")).into(),
                );
            }
        }
        items.retain(|item| {
            let ord = order(item, start);
            if query.forward {
                ord == Ordering::Greater
            } else {
                ord == Ordering::Less
            }
        });
    }
    let limit = query.limit.unwrap_or(usize::MAX);
    let mut page = QueryPage::default();
    let mut bytes = 0;
    let total = items.len();
    for item in items {
        if page.items.len() >= limit || bytes >= MAX_PAGE_BYTES {
            break;
        }
        bytes += item_size(&item);
        page.items.push(item);
    }
    if page.items.len() < total {
        if let Some(last) = page.items.last() {
            let mut key = Item::new();
            for name in def.names().chain(schema.key.names()) {
                if let Some(v) = last.get(name) {
                    key.insert(name.to_owned(), v.clone());
                }
            }
            page.last_evaluated_key = Some(key);
        }
    }
    Ok(page)
}

/// Orders items by the sort key of `def`, then by the table key so the order
/// is total.
fn order_items(schema: &TableSchema, def: &KeyDefinition, a: &Item, b: &Item) -> Ordering {
    let by_sort = def
        .sort
        .as_ref()
        .and_then(|s| Some((a.get(&s.name)?, b.get(&s.name)?)))
        .and_then(|(x, y)| compare_values(x, y))
        .unwrap_or(Ordering::Equal);
    by_sort.then_with(|| encode_key(&schema.key, a).cmp(&encode_key(&schema.key, b)))
}
