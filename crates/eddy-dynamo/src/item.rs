//! The item model: attribute values, items, keys, item size and value ordering.
//!
//! Attribute values are `serde_dynamo`'s [`AttributeValue`], the same type that
//! `aws_lambda_events` uses for stream images, so one decoding path serves
//! records from the embedded change feed and records delivered by Lambda.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::str::FromStr;

use bigdecimal::BigDecimal;

pub use serde_dynamo::AttributeValue;

/// An item: attribute names to values, as DynamoDB stores it.
pub type Item = HashMap<String, AttributeValue>;

/// The largest item DynamoDB stores: 400 KB, names and values included.
pub const MAX_ITEM_SIZE: usize = 400 * 1024;

/// The most a transaction's items may total: 4 MB.
pub const MAX_TRANSACTION_SIZE: usize = 4 * 1024 * 1024;

/// The scalar type of a key attribute, as declared in a table's key schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScalarType {
    /// A string (`S`).
    S,
    /// A number (`N`).
    N,
    /// Binary (`B`).
    B,
}

impl ScalarType {
    /// Whether `value` has this type.
    pub fn matches(self, value: &AttributeValue) -> bool {
        matches!(
            (self, value),
            (ScalarType::S, AttributeValue::S(_))
                | (ScalarType::N, AttributeValue::N(_))
                | (ScalarType::B, AttributeValue::B(_))
        )
    }
}

/// The size DynamoDB bills and limits for an item: attribute name bytes plus
/// value sizes, as its documentation states them.
///
/// Strings and binaries count their bytes; a number one byte per two
/// significant digits (leading and trailing zeros, the sign, the decimal
/// point and the exponent do not count) plus one; booleans and nulls one
/// byte; lists and maps three bytes, plus one byte per element, plus their
/// elements (map names included).
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn number_size(n: &str) -> usize {
    let mantissa = n.trim().split(['e', 'E']).next().unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    significant.len().div_ceil(2) + 1
}

/// The size of one attribute value, as [`item_size`] counts it.
pub fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::Ss(s) => s.iter().map(String::len).sum(),
        AttributeValue::Ns(s) => s.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(s) => s.iter().map(Vec::len).sum(),
    }
}

/// Parses a DynamoDB number, or `None` when the text is not one.
pub(crate) fn parse_number(n: &str) -> Option<BigDecimal> {
    BigDecimal::from_str(n.trim()).ok()
}

/// Orders two scalar values the way DynamoDB orders sort keys and comparison
/// operands: strings by UTF-8 bytes, numbers by value, binaries by bytes.
/// Values of different or non-scalar types (or malformed numbers) have no order.
pub fn compare_values(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    match (a, b) {
        (AttributeValue::S(a), AttributeValue::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (AttributeValue::B(a), AttributeValue::B(b)) => Some(a.cmp(b)),
        (AttributeValue::N(a), AttributeValue::N(b)) => {
            Some(parse_number(a)?.cmp(&parse_number(b)?))
        }
        _ => None,
    }
}

/// Whether two values are equal in DynamoDB's sense: same type, and for
/// numbers the same value (`1.0` equals `1`).
pub fn values_equal(a: &AttributeValue, b: &AttributeValue) -> bool {
    match (a, b) {
        (AttributeValue::N(_), AttributeValue::N(_)) => {
            compare_values(a, b) == Some(Ordering::Equal)
        }
        (AttributeValue::Ns(a), AttributeValue::Ns(b)) => {
            a.len() == b.len()
                && a.iter().all(|x| {
                    b.iter().any(|y| {
                        values_equal(&AttributeValue::N(x.clone()), &AttributeValue::N(y.clone()))
                    })
                })
        }
        (AttributeValue::Ss(a), AttributeValue::Ss(b)) => {
            a.len() == b.len() && a.iter().all(|x| b.contains(x))
        }
        (AttributeValue::Bs(a), AttributeValue::Bs(b)) => {
            a.len() == b.len() && a.iter().all(|x| b.contains(x))
        }
        (AttributeValue::M(a), AttributeValue::M(b)) => items_equal(a, b),
        (AttributeValue::L(a), AttributeValue::L(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_equal(x, y))
        }
        _ => a == b,
    }
}

/// Whether two items hold the same attributes with equal values.
pub fn items_equal(a: &Item, b: &Item) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| values_equal(v, w)))
}

/// Shorthand for a string value.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// Shorthand for a number value.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The value of an attribute, or `None` when it is absent or `NULL`: this
/// crate reads `NULL` as absent everywhere (guards, checkpoints, revisions,
/// keys).
pub fn get_present<'a>(item: &'a Item, name: &str) -> Option<&'a AttributeValue> {
    item.get(name)
        .filter(|v| !matches!(v, AttributeValue::Null(_)))
}

/// Removes the top-level attributes holding `NULL` (serde's `None`), so an
/// optional field without a value is stored absent.
pub(crate) fn drop_nulls(item: &mut Item) {
    item.retain(|_, v| !matches!(v, AttributeValue::Null(_)));
}

/// Reads a number attribute as `u64`, or `None` when absent or not an
/// unsigned integer.
pub fn get_u64(item: &Item, name: &str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.trim().parse().ok(),
        _ => None,
    }
}

/// Reads a string attribute, or `None` when absent or not a string.
pub fn get_str<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}
