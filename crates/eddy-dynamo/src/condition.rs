//! Typed condition expressions, evaluated against the item as it is.

use std::cmp::Ordering;

use crate::item::{compare_values, values_equal, AttributeValue, Item};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparator {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A condition on one item, over top-level attributes.
///
/// Mirrors DynamoDB's condition expressions: an absent item has no
/// attributes, a comparison with an absent attribute or a value of another
/// type is false (and `<>` true).
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `attribute_exists(name)`
    AttributeExists(String),
    /// `attribute_not_exists(name)`
    AttributeNotExists(String),
    /// `name <op> value`
    Compare(String, Comparator, AttributeValue),
    /// `begins_with(name, prefix)` on a string or binary attribute.
    BeginsWith(String, AttributeValue),
    /// All of the conditions.
    And(Vec<Condition>),
    /// Any of the conditions.
    Or(Vec<Condition>),
    /// The negation.
    Not(Box<Condition>),
}

impl Condition {
    /// `attribute_exists(name)`.
    pub fn exists(name: impl Into<String>) -> Self {
        Condition::AttributeExists(name.into())
    }

    /// `attribute_not_exists(name)`.
    pub fn not_exists(name: impl Into<String>) -> Self {
        Condition::AttributeNotExists(name.into())
    }

    /// `name = value`.
    pub fn eq(name: impl Into<String>, value: AttributeValue) -> Self {
        Condition::Compare(name.into(), Comparator::Eq, value)
    }

    /// `name <op> value`.
    pub fn compare(name: impl Into<String>, op: Comparator, value: AttributeValue) -> Self {
        Condition::Compare(name.into(), op, value)
    }

    /// Both this and `other`.
    pub fn and(self, other: Condition) -> Self {
        match self {
            Condition::And(mut all) => {
                all.push(other);
                Condition::And(all)
            }
            first => Condition::And(vec![first, other]),
        }
    }

    /// This or `other`.
    pub fn or(self, other: Condition) -> Self {
        Condition::Or(vec![self, other])
    }

    /// The negation of this condition.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Self {
        Condition::Not(Box::new(self))
    }

    /// Evaluates the condition against the item (`None`: no item).
    pub fn evaluate(&self, item: Option<&Item>) -> bool {
        let get = |name: &str| item.and_then(|i| i.get(name));
        match self {
            Condition::AttributeExists(name) => get(name).is_some(),
            Condition::AttributeNotExists(name) => get(name).is_none(),
            Condition::Compare(name, op, value) => match get(name) {
                None => *op == Comparator::Ne,
                Some(actual) => compare(actual, *op, value),
            },
            Condition::BeginsWith(name, prefix) => match (get(name), prefix) {
                (Some(AttributeValue::S(s)), AttributeValue::S(p)) => s.starts_with(p.as_str()),
                (Some(AttributeValue::B(b)), AttributeValue::B(p)) => b.starts_with(p),
                _ => false,
            },
            Condition::And(all) => all.iter().all(|c| c.evaluate(item)),
            Condition::Or(any) => any.iter().any(|c| c.evaluate(item)),
            Condition::Not(inner) => !inner.evaluate(item),
        }
    }
}

fn compare(actual: &AttributeValue, op: Comparator, expected: &AttributeValue) -> bool {
    match op {
        Comparator::Eq => values_equal(actual, expected),
        Comparator::Ne => !values_equal(actual, expected),
        _ => match compare_values(actual, expected) {
            None => false,
            Some(ord) => match op {
                Comparator::Lt => ord == Ordering::Less,
                Comparator::Le => ord != Ordering::Greater,
                Comparator::Gt => ord == Ordering::Greater,
                Comparator::Ge => ord != Ordering::Less,
                Comparator::Eq | Comparator::Ne => false,
            },
        },
    }
}
