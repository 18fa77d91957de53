//! The app schema and the key format every entity and stream item uses.

use crate::error::Error;
use crate::item::{AttributeValue, Item};

/// The attribute that names what an item is: an entity type, or
/// `<stream name>#event` for events.
pub const ENTITY_ATTRIBUTE: &str = "__edd_e__";

/// An application's name and version: the namespace of every key it writes,
/// so several apps (or versions) can share one table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppSchema {
    /// The application name.
    pub name: String,
    /// The schema version.
    pub version: u32,
}

impl AppSchema {
    /// An app schema.
    pub fn new(name: impl Into<String>, version: u32) -> Self {
        Self {
            name: name.into(),
            version,
        }
    }

    /// The partition key prefix of everything of this kind: `<app>#v<version>#<kind>`.
    pub(crate) fn prefix(&self, kind: &str) -> String {
        format!("{}#v{}#{}", escape(&self.name), self.version, escape(kind))
    }

    /// The partition key prefix of a stream's events: `<app>#v<version>#$stream#<name>`.
    pub(crate) fn stream_prefix(&self, stream: &str) -> String {
        format!(
            "{}#v{}#$stream#{}",
            escape(&self.name),
            self.version,
            escape(stream)
        )
    }
}

/// Reads the app schema and stream name back from the partition key of a
/// stream's events (`<app>#v<version>#$stream#<name>#<attr>=<value>…`), or
/// `None` when the text is not one.
pub(crate) fn parse_stream_partition(text: &str) -> Option<(AppSchema, String)> {
    let mut parts = text.split('#');
    let app = unescape(parts.next()?)?;
    let version = parts.next()?.strip_prefix('v')?.parse().ok()?;
    if parts.next()? != "$stream" {
        return None;
    }
    let name = unescape(parts.next()?)?;
    parts.next()?; // a stream id has at least one attribute
    Some((AppSchema::new(app, version), name))
}

/// Escapes the separator: `%` becomes `%25` and `#` becomes `%23`, so
/// composed keys split unambiguously.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(text, &mut out);
    out
}

/// Appends `text`, escaped, to `out`.
fn escape_into(text: &str, out: &mut String) {
    let mut rest = text;
    while let Some(at) = rest.find(['%', '#']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b'%' {
            "%25"
        } else {
            "%23"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Reverses [`escape`]; `None` for text it cannot have produced.
pub(crate) fn unescape(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "25" => '%',
            "23" => '#',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    if rest.contains('#') {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

/// Composes `<prefix>#<attr>=<value>#...` from the named attributes of
/// `values`. A composite attribute must be a string, number or boolean; a
/// `NULL` one is missing.
///
/// This is the documented key format: for an entity `Order` of app `shop`
/// version 1 with partition composite `[orderId]`, the partition key of order
/// `o-1` is `shop#v1#Order#orderId=o-1`.
pub(crate) fn compose(
    prefix: &str,
    composite: &[String],
    values: &Item,
    owner: &str,
) -> Result<String, Error> {
    let mut key = String::with_capacity(prefix.len() + 16 * composite.len());
    key.push_str(prefix);
    for attribute in composite {
        let text = match values.get(attribute) {
            Some(AttributeValue::S(s)) => s.as_str(),
            Some(AttributeValue::N(n)) => n.as_str(),
            Some(AttributeValue::Bool(true)) => "true",
            Some(AttributeValue::Bool(false)) => "false",
            Some(AttributeValue::Null(_)) | None => {
                return Err(Error::KeyCompose {
                    entity: owner.to_owned(),
                    attribute: attribute.clone(),
                    reason: "the attribute is missing".into(),
                })
            }
            Some(_) => {
                return Err(Error::KeyCompose {
                    entity: owner.to_owned(),
                    attribute: attribute.clone(),
                    reason: "a key attribute must be a string, number or boolean".into(),
                })
            }
        };
        key.push('#');
        escape_into(attribute, &mut key);
        key.push('=');
        escape_into(text, &mut key);
    }
    Ok(key)
}

/// Serializes a value into an item (a map of attributes).
pub(crate) fn to_item<T: serde::Serialize + ?Sized>(value: &T) -> Result<Item, Error> {
    serde_dynamo::to_item(value).map_err(|e| Error::Encode(e.to_string()))
}
