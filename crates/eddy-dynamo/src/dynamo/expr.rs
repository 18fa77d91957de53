//! Rendering typed conditions, updates and key conditions into DynamoDB
//! expressions. Every attribute name becomes a `#nN` placeholder and every
//! value a `:vN` placeholder: no caller string is ever part of the
//! expression text.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue as Sdk;

use super::convert::to_sdk;
use crate::condition::{Comparator, Condition};
use crate::item::AttributeValue;
use crate::query::SortCondition;
use crate::update::{Update, UpdateAction};

/// The placeholders of one request's expressions.
#[derive(Debug, Default)]
pub(crate) struct Placeholders {
    /// Placeholder to attribute name (`ExpressionAttributeNames`).
    names: HashMap<String, String>,
    /// Attribute name to placeholder, so each name gets one.
    by_name: HashMap<String, String>,
    values: HashMap<String, Sdk>,
}

impl Placeholders {
    /// The placeholder of an attribute name (one per distinct name).
    pub(crate) fn name(&mut self, name: &str) -> String {
        if let Some(placeholder) = self.by_name.get(name) {
            return placeholder.clone();
        }
        let placeholder = format!("#n{}", self.names.len());
        self.names.insert(placeholder.clone(), name.to_owned());
        self.by_name.insert(name.to_owned(), placeholder.clone());
        placeholder
    }

    /// A fresh placeholder for a value.
    pub(crate) fn value(&mut self, value: &AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), to_sdk(value));
        placeholder
    }

    /// `ExpressionAttributeNames`, or `None` when there are none.
    pub(crate) fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    /// `ExpressionAttributeValues`, or `None` when there are none.
    pub(crate) fn values(&self) -> Option<HashMap<String, Sdk>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }

    /// Renders a condition expression.
    pub(crate) fn condition(&mut self, condition: &Condition) -> String {
        match condition {
            Condition::AttributeExists(name) => format!("attribute_exists({})", self.name(name)),
            Condition::AttributeNotExists(name) => {
                format!("attribute_not_exists({})", self.name(name))
            }
            Condition::AttributeType(name, kind) => {
                let n = self.name(name);
                let v = self.value(&AttributeValue::S(kind.code().to_owned()));
                format!("attribute_type({n}, {v})")
            }
            Condition::Compare(name, op, value) => {
                let n = self.name(name);
                let v = self.value(value);
                format!("{n} {} {v}", operator(*op))
            }
            Condition::BeginsWith(name, prefix) => {
                let n = self.name(name);
                let v = self.value(prefix);
                format!("begins_with({n}, {v})")
            }
            Condition::And(all) => self.join(all, " AND ", true),
            Condition::Or(any) => self.join(any, " OR ", false),
            Condition::Not(inner) => format!("NOT ({})", self.condition(inner)),
        }
    }

    /// Joins sub-conditions; an empty list holds when `empty_holds` (an
    /// empty AND holds and an empty OR does not, as `evaluate` says).
    fn join(&mut self, parts: &[Condition], sep: &str, empty_holds: bool) -> String {
        if parts.is_empty() {
            return self.always(empty_holds);
        }
        // Each part is wrapped once and nothing else is: DynamoDB refuses
        // redundant parentheses such as `((a))`.
        let rendered: Vec<String> = parts
            .iter()
            .map(|c| format!("({})", self.condition(c)))
            .collect();
        rendered.join(sep)
    }

    /// A condition that always holds (or never does), for empty `And`/`Or`.
    fn always(&mut self, holds: bool) -> String {
        let v = self.value(&AttributeValue::N("0".into()));
        if holds {
            format!("{v} = {v}")
        } else {
            format!("{v} <> {v}")
        }
    }

    /// Renders an update expression, or `None` for an update without actions.
    pub(crate) fn update(&mut self, update: &Update) -> Option<String> {
        let (mut set, mut remove, mut add) = (Vec::new(), Vec::new(), Vec::new());
        for action in &update.actions {
            match action {
                UpdateAction::Set(name, value) => {
                    let n = self.name(name);
                    let v = self.value(value);
                    set.push(format!("{n} = {v}"));
                }
                UpdateAction::Remove(name) => remove.push(self.name(name)),
                UpdateAction::Add(name, value) => {
                    let n = self.name(name);
                    let v = self.value(value);
                    add.push(format!("{n} {v}"));
                }
            }
        }
        let mut clauses = Vec::new();
        for (keyword, parts) in [("SET", set), ("REMOVE", remove), ("ADD", add)] {
            if !parts.is_empty() {
                clauses.push(format!("{keyword} {}", parts.join(", ")));
            }
        }
        (!clauses.is_empty()).then(|| clauses.join(" "))
    }

    /// Renders a query's key condition.
    pub(crate) fn key_condition(
        &mut self,
        partition_name: &str,
        partition: &AttributeValue,
        sort: Option<(&str, &SortCondition)>,
    ) -> String {
        let pk = self.name(partition_name);
        let pv = self.value(partition);
        let mut expression = format!("{pk} = {pv}");
        if let Some((sort_name, condition)) = sort {
            let sk = self.name(sort_name);
            let rendered = match condition {
                SortCondition::Eq(v) => format!("{sk} = {}", self.value(v)),
                SortCondition::Lt(v) => format!("{sk} < {}", self.value(v)),
                SortCondition::Le(v) => format!("{sk} <= {}", self.value(v)),
                SortCondition::Gt(v) => format!("{sk} > {}", self.value(v)),
                SortCondition::Ge(v) => format!("{sk} >= {}", self.value(v)),
                SortCondition::Between(lo, hi) => {
                    let lo = self.value(lo);
                    let hi = self.value(hi);
                    format!("{sk} BETWEEN {lo} AND {hi}")
                }
                SortCondition::BeginsWith(prefix) => {
                    format!("begins_with({sk}, {})", self.value(prefix))
                }
            };
            expression.push_str(" AND ");
            expression.push_str(&rendered);
        }
        expression
    }
}

fn operator(op: Comparator) -> &'static str {
    match op {
        Comparator::Eq => "=",
        Comparator::Ne => "<>",
        Comparator::Lt => "<",
        Comparator::Le => "<=",
        Comparator::Gt => ">",
        Comparator::Ge => ">=",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{n, s};

    #[test]
    fn user_strings_never_reach_the_expression() {
        let hostile = "x) OR attribute_exists(pk";
        let mut p = Placeholders::default();
        let c = Condition::eq(hostile, s(hostile)).and(Condition::not_exists(hostile));
        let rendered = p.condition(&c);
        assert!(!rendered.contains(hostile), "{rendered}");
        assert_eq!(rendered, "(#n0 = :v0) AND (attribute_not_exists(#n0))");
        let nested = p.condition(&Condition::exists("a").or(Condition::exists("b")).not());
        assert_eq!(
            nested,
            "NOT ((attribute_exists(#n1)) OR (attribute_exists(#n2)))"
        );
        assert_eq!(p.names().unwrap()["#n0"], hostile);
        let update = p.update(&Update::new().set("a", n(1)).remove("b").add("c", n(2)));
        assert_eq!(
            update.as_deref(),
            Some("SET #n1 = :v1 REMOVE #n2 ADD #n3 :v2")
        );
    }
}
