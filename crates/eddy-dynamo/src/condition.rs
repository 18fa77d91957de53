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

/// The type of an attribute value, as `attribute_type` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttributeType {
    /// A string (`S`).
    S,
    /// A number (`N`).
    N,
    /// Binary (`B`).
    B,
    /// A boolean (`BOOL`).
    Bool,
    /// `NULL`.
    Null,
    /// A map (`M`).
    M,
    /// A list (`L`).
    L,
    /// A string set (`SS`).
    Ss,
    /// A number set (`NS`).
    Ns,
    /// A binary set (`BS`).
    Bs,
}

impl AttributeType {
    /// The type of a value.
    pub fn of(value: &AttributeValue) -> Self {
        match value {
            AttributeValue::S(_) => AttributeType::S,
            AttributeValue::N(_) => AttributeType::N,
            AttributeValue::B(_) => AttributeType::B,
            AttributeValue::Bool(_) => AttributeType::Bool,
            AttributeValue::Null(_) => AttributeType::Null,
            AttributeValue::M(_) => AttributeType::M,
            AttributeValue::L(_) => AttributeType::L,
            AttributeValue::Ss(_) => AttributeType::Ss,
            AttributeValue::Ns(_) => AttributeType::Ns,
            AttributeValue::Bs(_) => AttributeType::Bs,
        }
    }

    /// The name DynamoDB's `attribute_type` function takes: `S`, `NULL`, `BOOL`…
    pub fn code(self) -> &'static str {
        match self {
            AttributeType::S => "S",
            AttributeType::N => "N",
            AttributeType::B => "B",
            AttributeType::Bool => "BOOL",
            AttributeType::Null => "NULL",
            AttributeType::M => "M",
            AttributeType::L => "L",
            AttributeType::Ss => "SS",
            AttributeType::Ns => "NS",
            AttributeType::Bs => "BS",
        }
    }
}

/// A condition on one item, over top-level attributes.
///
/// Mirrors DynamoDB's condition expressions: an absent item has no
/// attributes, a comparison with an absent attribute or a value of another
/// type is false (and `<>` true). An attribute holding `NULL` exists for
/// `attribute_exists`, as on DynamoDB; [`Condition::absent`] treats it as
/// absent.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `attribute_exists(name)`
    AttributeExists(String),
    /// `attribute_not_exists(name)`
    AttributeNotExists(String),
    /// `attribute_type(name, type)`: the attribute exists with this type.
    AttributeType(String, AttributeType),
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

    /// `attribute_type(name, type)`.
    pub fn has_type(name: impl Into<String>, kind: AttributeType) -> Self {
        Condition::AttributeType(name.into(), kind)
    }

    /// The attribute is absent or `NULL`:
    /// `attribute_not_exists(name) OR attribute_type(name, NULL)`. How every
    /// guard of this crate tests for "no value".
    pub fn absent(name: impl Into<String>) -> Self {
        let name = name.into();
        Condition::not_exists(name.clone()).or(Condition::has_type(name, AttributeType::Null))
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
            Condition::AttributeType(name, kind) => {
                get(name).is_some_and(|v| AttributeType::of(v) == *kind)
            }
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
