//! Queries: validated as DynamoDB validates them, then answered as one
//! ordered range of a table or index partition. A page decodes only the
//! items it returns.

use std::cmp::Ordering;
use std::ops::Bound;

use super::keys::{encode_value, prefix_end};
use super::store::{KeyRange, Store};
use super::tables::TableRef;
use crate::error::{TableError, ValidationError};
use crate::item::{compare_values, item_size, AttributeValue, Item, ScalarType};
use crate::key_schema::{KeyDefinition, TableSchema};
use crate::query::{Query, QueryPage, Scan, SortCondition};

/// The most bytes of items one query page returns.
const MAX_PAGE_BYTES: usize = 1024 * 1024;

fn invalid(message: impl Into<String>) -> TableError {
    ValidationError::InvalidQuery(message.into()).into()
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
    if !def.partition.kind.matches(&query.partition) || encode_value(&query.partition).is_none() {
        return Err(invalid(format!(
            "the partition value must be a valid {:?}",
            def.partition.kind
        )));
    }
    if query.limit == Some(0) {
        return Err(invalid("limit must be at least 1"));
    }
    if let Some(condition) = &query.sort {
        let Some(sort) = &def.sort else {
            return Err(invalid("the key has no sort attribute to condition"));
        };
        validate_sort(sort.kind, condition)?;
    }
    if let Some(start) = &query.exclusive_start_key {
        for name in def.names().chain(schema.key.names()) {
            if start.get(name).is_none_or(|v| encode_value(v).is_none()) {
                return Err(invalid(format!("the paging key lacks a valid {name}")));
            }
        }
    }
    Ok(def)
}

/// The operands of a sort condition must have the sort key's type, as
/// DynamoDB requires; `BETWEEN` needs its bounds in order and `begins_with`
/// a string or binary key.
fn validate_sort(kind: ScalarType, condition: &SortCondition) -> Result<(), TableError> {
    let operands: Vec<&AttributeValue> = match condition {
        SortCondition::Eq(v)
        | SortCondition::Lt(v)
        | SortCondition::Le(v)
        | SortCondition::Gt(v)
        | SortCondition::Ge(v)
        | SortCondition::BeginsWith(v) => vec![v],
        SortCondition::Between(lo, hi) => vec![lo, hi],
    };
    if operands
        .iter()
        .any(|v| !kind.matches(v) || encode_value(v).is_none())
    {
        return Err(invalid(format!(
            "a sort key condition needs valid {kind:?} operands, as the key is declared"
        )));
    }
    if let SortCondition::Between(lo, hi) = condition {
        if compare_values(lo, hi) == Some(Ordering::Greater) {
            return Err(invalid(
                "BETWEEN needs its lower bound at or below its upper bound",
            ));
        }
    }
    if matches!(condition, SortCondition::BeginsWith(_)) && kind == ScalarType::N {
        return Err(invalid("begins_with needs a string or binary sort key"));
    }
    Ok(())
}

/// Runs a query against the store.
pub(crate) fn run(
    store: &dyn Store,
    table: &TableRef,
    query: &Query,
) -> Result<QueryPage, TableError> {
    let schema = &table.schema;
    let def = validate_query(schema, query)?;
    let range = key_range(table, def, query)?;
    let limit = query.limit.unwrap_or(usize::MAX);
    let mut page = QueryPage::default();
    let mut bytes = 0;
    let more = store.query(&range, &mut |item| {
        bytes += item_size(&item);
        page.items.push(item);
        page.items.len() < limit && bytes < MAX_PAGE_BYTES
    })?;
    if more {
        let names = def.names().chain(schema.key.names());
        page.last_evaluated_key = page.items.last().map(|last| key_of(names, last));
    }
    Ok(page)
}

/// Runs a scan of the table's own items against the store.
pub(crate) fn scan(
    store: &dyn Store,
    table: &TableRef,
    scan: &Scan,
) -> Result<QueryPage, TableError> {
    if scan.limit == Some(0) {
        return Err(invalid("limit must be at least 1"));
    }
    let after = match &scan.exclusive_start_key {
        None => None,
        Some(start) => Some(
            table
                .encode_key(start)
                .ok_or_else(|| invalid("the paging key lacks a valid table key"))?,
        ),
    };
    let limit = scan.limit.unwrap_or(usize::MAX);
    let mut page = QueryPage::default();
    let mut bytes = 0;
    let more = store.scan(after.as_ref(), &mut |pk, item| {
        if !table.ns.owns(pk) {
            return true;
        }
        bytes += item_size(&item);
        page.items.push(item);
        page.items.len() < limit && bytes < MAX_PAGE_BYTES
    })?;
    if more {
        let names = table.schema.key.names();
        page.last_evaluated_key = page.items.last().map(|last| key_of(names, last));
    }
    Ok(page)
}

/// The attributes `names` of `item`: a paging key.
fn key_of<'a>(names: impl Iterator<Item = &'a str>, item: &Item) -> Item {
    names
        .filter_map(|name| Some((name.to_owned(), item.get(name)?.clone())))
        .collect()
}

/// The range of encoded keys a (validated) query covers.
fn key_range(table: &TableRef, def: &KeyDefinition, query: &Query) -> Result<KeyRange, TableError> {
    let encode = |v: &AttributeValue| {
        encode_value(v).ok_or_else(|| TableError::internal("a validated key value did not encode"))
    };
    let (lower, upper) = match &query.sort {
        None => (Bound::Unbounded, Bound::Unbounded),
        Some(SortCondition::Eq(v)) => (Bound::Included(encode(v)?), Bound::Included(encode(v)?)),
        Some(SortCondition::Lt(v)) => (Bound::Unbounded, Bound::Excluded(encode(v)?)),
        Some(SortCondition::Le(v)) => (Bound::Unbounded, Bound::Included(encode(v)?)),
        Some(SortCondition::Gt(v)) => (Bound::Excluded(encode(v)?), Bound::Unbounded),
        Some(SortCondition::Ge(v)) => (Bound::Included(encode(v)?), Bound::Unbounded),
        Some(SortCondition::Between(lo, hi)) => {
            (Bound::Included(encode(lo)?), Bound::Included(encode(hi)?))
        }
        Some(SortCondition::BeginsWith(prefix)) => {
            let start = encode(prefix)?;
            let end = prefix_end(&start).map_or(Bound::Unbounded, Bound::Excluded);
            (Bound::Included(start), end)
        }
    };
    let after = match &query.exclusive_start_key {
        None => None,
        Some(start) => {
            let sort = match &def.sort {
                Some(attr) => start.get(&attr.name).map(encode).transpose()?,
                None => None,
            };
            let (pk, sk) = table
                .encode_key(start)
                .ok_or_else(|| TableError::internal("a validated paging key did not encode"))?;
            Some((sort.unwrap_or_default(), pk, sk))
        }
    };
    let partition = encode(&query.partition)?;
    Ok(KeyRange {
        // A table partition is a stored partition key; an index partition
        // is an index key value, under the table's own index name.
        partition: match query.index {
            None => table.ns.pk(partition),
            Some(_) => partition,
        },
        index: query.index.as_deref().map(|name| table.ns.index(name)),
        lower,
        upper,
        after,
        forward: query.forward,
    })
}
