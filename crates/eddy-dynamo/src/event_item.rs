//! The stored form of one event, and reading it back from an item.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::app_schema::{parse_stream_partition, AppSchema, ENTITY_ATTRIBUTE};
use crate::error::Error;
use crate::item::{get_str, get_u64, n, s, AttributeValue, Item};

/// The id of one stream instance: its composite attributes and their values.
///
/// Shared, not copied: every event of an instance names it, so a clone is
/// a reference count.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId(Arc<BTreeMap<String, String>>);

impl StreamId {
    /// A stream id from attribute/value pairs.
    pub fn new<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        Self(Arc::new(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        ))
    }

    /// The value of one attribute.
    pub fn get(&self, attribute: &str) -> Option<&str> {
        self.0.get(attribute).map(String::as_str)
    }

    /// The attributes and values, ordered by attribute.
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    pub(crate) fn to_attribute(&self) -> AttributeValue {
        AttributeValue::M(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), s(v.clone())))
                .collect(),
        )
    }

    pub(crate) fn from_attribute(value: &AttributeValue) -> Option<Self> {
        let AttributeValue::M(map) = value else {
            return None;
        };
        let mut id = BTreeMap::new();
        for (k, v) in map {
            match v {
                AttributeValue::S(text) => id.insert(k.clone(), text.clone()),
                _ => return None,
            };
        }
        Some(Self(Arc::new(id)))
    }

    /// Whether `value` is the attribute form of this id (what
    /// [`from_attribute`](Self::from_attribute) would read back as it).
    fn is_attribute(&self, value: &AttributeValue) -> bool {
        let AttributeValue::M(map) = value else {
            return false;
        };
        map.len() == self.0.len()
            && map.iter().all(|(k, v)| match v {
                AttributeValue::S(text) => self.0.get(k) == Some(text),
                _ => false,
            })
    }
}

/// Characters with a meaning in the text form of a stream id, and their escapes.
const ESCAPES: [(char, &str); 4] = [('%', "%25"), (',', "%2C"), ('=', "%3D"), ('#', "%23")];

fn escape_part(text: &str, out: &mut String) {
    for c in text.chars() {
        match ESCAPES.iter().find(|(special, _)| *special == c) {
            Some((_, escaped)) => out.push_str(escaped),
            None => out.push(c),
        }
    }
}

fn unescape_part(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at..at + 3)?;
        let (c, _) = ESCAPES.iter().find(|(_, escaped)| *escaped == code)?;
        out.push(*c);
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl std::fmt::Display for StreamId {
    /// The reversible text form: `attr=value` pairs in attribute order,
    /// separated by `,`, with `%`, `,`, `=` and `#` escaped (`%25`, `%2C`,
    /// `%3D`, `%23`), so it never contains `#` and parses back exactly
    /// ([`StreamId::from_str`](std::str::FromStr)).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            escape_part(k, &mut out);
            out.push('=');
            escape_part(v, &mut out);
        }
        f.write_str(&out)
    }
}

impl std::str::FromStr for StreamId {
    type Err = Error;

    /// Parses the text form [`Display`](std::fmt::Display) writes.
    fn from_str(text: &str) -> Result<Self, Error> {
        let bad =
            || Error::InvalidArgument(format!("{text:?} is not the text form of a stream id"));
        if text.is_empty() {
            return Ok(Self::default());
        }
        let mut id = BTreeMap::new();
        for pair in text.split(',') {
            let (k, v) = pair.split_once('=').ok_or_else(bad)?;
            let (k, v) = (
                unescape_part(k).ok_or_else(bad)?,
                unescape_part(v).ok_or_else(bad)?,
            );
            if id.insert(k, v).is_some() {
                return Err(bad());
            }
        }
        Ok(Self(Arc::new(id)))
    }
}

/// The full identity of an event stream: the application and schema version
/// that own it, and its name. Two applications (or two versions of one)
/// sharing a table each have their own streams, even under one name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamIdentity {
    /// The application and its schema version.
    pub app: AppSchema,
    /// The stream name.
    pub name: String,
}

impl std::fmt::Display for StreamIdentity {
    /// `<app>#v<version>#<name>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#v{}#{}", self.app.name, self.app.version, self.name)
    }
}

/// An event as stored, with its data not yet decoded into an event type.
#[derive(Debug, Clone, PartialEq)]
pub struct EventItem {
    /// The stream it belongs to.
    pub stream: StreamIdentity,
    /// The stream instance.
    pub stream_id: StreamId,
    /// The event's version in its stream instance, from 1.
    pub version: u64,
    /// The event type (the enum variant name).
    pub event_type: String,
    /// The event data.
    pub data: AttributeValue,
    /// When the event was appended (RFC 3339).
    pub timestamp: String,
    /// Optional metadata.
    pub metadata: Option<AttributeValue>,
}

/// The attributes of an event item besides its keys.
const EVENT_ATTRIBUTES: [&str; 8] = [
    ENTITY_ATTRIBUTE,
    STREAM_NAME,
    STREAM_ID,
    VERSION,
    EVENT_TYPE,
    DATA,
    TIMESTAMP,
    METADATA,
];
const STREAM_NAME: &str = "streamName";
const STREAM_ID: &str = "streamId";
const VERSION: &str = "version";
const EVENT_TYPE: &str = "eventType";
const DATA: &str = "data";
const TIMESTAMP: &str = "timestamp";
const METADATA: &str = "metadata";

/// The entity marker of a stream's events.
pub(crate) fn event_marker(stream_name: &str) -> String {
    format!("{stream_name}#event")
}

impl EventItem {
    /// Reads an event from an item; `Ok(None)` when the item is not an
    /// event at all (a read-model row, an outbox item). The application and
    /// schema version come from the item's partition key.
    pub fn from_item(item: &Item) -> Result<Option<Self>, Error> {
        Self::from_image(item, item, &mut ImageCache::default())
    }

    /// Reads an event from a change record's new image, finding its
    /// application in the record's keys; reuses what `cache` kept from the
    /// previous record where this one has the same partition key and stream
    /// id (a batch holds runs of one instance's events).
    pub(crate) fn from_image(
        item: &Item,
        keys: &Item,
        cache: &mut ImageCache,
    ) -> Result<Option<Self>, Error> {
        let Some(marker) = get_str(item, ENTITY_ATTRIBUTE) else {
            return Ok(None);
        };
        let Some(stream_name) = marker.strip_suffix("#event") else {
            return Ok(None);
        };
        let bad = |what: &str| {
            Error::RecordDecode(format!(
                "event item of stream {stream_name} has no valid {what}"
            ))
        };
        if get_str(item, STREAM_NAME) != Some(stream_name) {
            return Err(bad(STREAM_NAME));
        }
        let app = stream_app(keys, stream_name, cache).ok_or_else(|| bad("partition key"))?;
        let stream_id = match (item.get(STREAM_ID), &cache.stream_id) {
            (Some(value), Some(id)) if id.is_attribute(value) => id.clone(),
            (value, _) => {
                let id = value
                    .and_then(StreamId::from_attribute)
                    .ok_or_else(|| bad(STREAM_ID))?;
                cache.stream_id = Some(id.clone());
                id
            }
        };
        let version = get_u64(item, VERSION)
            .filter(|v| *v > 0)
            .ok_or_else(|| bad(VERSION))?;
        let event_type = get_str(item, EVENT_TYPE)
            .ok_or_else(|| bad(EVENT_TYPE))?
            .to_owned();
        let data = item
            .get(DATA)
            .cloned()
            .unwrap_or(AttributeValue::Null(true));
        let timestamp = get_str(item, TIMESTAMP).unwrap_or_default().to_owned();
        Ok(Some(Self {
            stream: StreamIdentity {
                app,
                name: stream_name.to_owned(),
            },
            stream_id,
            version,
            event_type,
            data,
            timestamp,
            metadata: item.get(METADATA).cloned(),
        }))
    }

    /// The item's attributes, without its key.
    pub(crate) fn attributes(&self) -> Item {
        let mut item = HashMap::from([
            (
                ENTITY_ATTRIBUTE.to_owned(),
                s(event_marker(&self.stream.name)),
            ),
            (STREAM_NAME.to_owned(), s(self.stream.name.clone())),
            (STREAM_ID.to_owned(), self.stream_id.to_attribute()),
            (VERSION.to_owned(), n(self.version)),
            (EVENT_TYPE.to_owned(), s(self.event_type.clone())),
            (DATA.to_owned(), self.data.clone()),
            (TIMESTAMP.to_owned(), s(self.timestamp.clone())),
        ]);
        if let Some(metadata) = &self.metadata {
            item.insert(METADATA.to_owned(), metadata.clone());
        }
        item
    }
}

/// What decoding the previous change record found: the stream partition
/// key text it parsed, and its stream id. Parsing is skipped, and the id
/// shared, when the next record has the same.
#[derive(Debug, Default)]
pub(crate) struct ImageCache {
    partition: Option<(String, AppSchema, String)>,
    stream_id: Option<StreamId>,
}

/// The app schema of an event item of `stream`, from its partition key: the
/// one key attribute composed as a partition of that stream.
fn stream_app(keys: &Item, stream: &str, cache: &mut ImageCache) -> Option<AppSchema> {
    let mut found: Option<AppSchema> = None;
    for (name, value) in keys {
        let AttributeValue::S(text) = value else {
            continue;
        };
        if EVENT_ATTRIBUTES.contains(&name.as_str()) {
            continue;
        }
        if !matches!(&cache.partition, Some((known, ..)) if known == text) {
            let Some((app, name)) = parse_stream_partition(text) else {
                continue;
            };
            cache.partition = Some((text.clone(), app, name));
        }
        let Some((_, app, name)) = &cache.partition else {
            continue;
        };
        if name != stream {
            continue;
        }
        match &found {
            None => found = Some(app.clone()),
            // Two key attributes naming different apps: not an item we wrote.
            Some(other) if other != app => return None,
            Some(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stream_ids_round_trip_through_their_text_form(
            pairs in proptest::collection::btree_map(".{0,6}", ".{0,8}", 0..4)
        ) {
            let id = StreamId::new(pairs);
            let text = id.to_string();
            prop_assert!(!text.contains('#'), "{}", text);
            prop_assert_eq!(text.parse::<StreamId>().unwrap(), id);
        }
    }

    #[test]
    fn the_text_form_escapes_separators_and_refuses_garbage() {
        let id = StreamId::new([("a=b", "x,y#z%"), ("c", "")]);
        assert_eq!(id.to_string(), "a%3Db=x%2Cy%23z%25,c=");
        for bad in ["novalue", "a=1,a=2", "a=%zz", "a=%2"] {
            assert!(bad.parse::<StreamId>().is_err(), "{bad}");
        }
    }
}
