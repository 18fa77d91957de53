//! The checkpoint layout of multi-source rows: a map field with one entry
//! per source instance (`<source>#<stream id>`), and scalar fields mapped
//! per source, each owned by one instance (`instanceField`).

use std::collections::BTreeMap;

use super::slots::CheckpointSlots;
use crate::condition::Condition;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::{get_present, n, s, AttributeValue, Item};

/// Where a multi-source projection keeps its checkpoints: a map field, and
/// optionally a scalar field per source. Built with [`Checkpoints::map`] or
/// [`Checkpoints::fields`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoints {
    pub(crate) map: Option<String>,
    pub(crate) fields: BTreeMap<String, SourceField>,
}

/// A source's checkpoint kept in a scalar field of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceField {
    pub(crate) field: String,
    pub(crate) offset: i64,
    pub(crate) instance_field: Option<String>,
}

impl SourceField {
    /// The checkpoint in `field`, stored as the version itself.
    pub fn new(field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            offset: 0,
            instance_field: None,
        }
    }

    /// The field stores the version plus `offset` (an existing 0-based
    /// counter is `offset(-1)`).
    pub fn offset(mut self, offset: i64) -> Self {
        self.offset = offset;
        self
    }

    /// The field naming the stream instance that owns the scalar. An empty
    /// one (a new row, or one written before the projection) is adopted by
    /// the first instance that writes it; another instance goes to the map,
    /// or fails with `ProjectionSourceConflict` without one. Without an
    /// instance field, every instance of the source shares the scalar: only
    /// right when one instance feeds each row.
    pub fn instance_field(mut self, field: impl Into<String>) -> Self {
        self.instance_field = Some(field.into());
        self
    }
}

impl Checkpoints {
    /// One entry per source instance in the map `field`.
    pub fn map(field: impl Into<String>) -> Self {
        Self {
            map: Some(field.into()),
            fields: BTreeMap::new(),
        }
    }

    /// No map: every source must be given a field ([`Self::source`]).
    pub fn fields() -> Self {
        Self::default()
    }

    /// Keeps `source`'s checkpoint in a scalar field of its own.
    pub fn source(mut self, source: impl Into<String>, field: SourceField) -> Self {
        self.fields.insert(source.into(), field);
        self
    }

    /// Every attribute the layout writes.
    pub(crate) fn attributes(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.map.iter().map(String::as_str).collect();
        for f in self.fields.values() {
            names.push(&f.field);
            names.extend(f.instance_field.as_deref());
        }
        names
    }
}

/// The map entry of an instance: `<source>#<stream id>` (a stream id's text
/// never holds `#`).
pub(crate) fn entry_name(source: &str, instance: &StreamId) -> String {
    format!("{source}#{instance}")
}

/// Where one instance's checkpoint lives in a row.
enum Slot<'a> {
    Field(&'a SourceField),
    Map(&'a str),
}

impl Checkpoints {
    /// Decides where `instance` of `source` keeps its checkpoint in `slots`.
    fn slot(
        &self,
        slots: &Item,
        source: &str,
        instance: &StreamId,
        row: &str,
    ) -> Result<Slot<'_>, Error> {
        if let Some(field) = self.fields.get(source) {
            let owner = field
                .instance_field
                .as_deref()
                .and_then(|f| match get_present(slots, f) {
                    Some(AttributeValue::S(owner)) => Some(owner.as_str()),
                    _ => None,
                });
            match owner {
                None => return Ok(Slot::Field(field)),
                Some(owner) if owner == instance.to_string() => return Ok(Slot::Field(field)),
                Some(owner) if self.map.is_none() => {
                    return Err(Error::ProjectionSourceConflict {
                        row: row.to_owned(),
                        owner: owner.to_owned(),
                        instance: instance.to_string(),
                    })
                }
                Some(_) => {}
            }
        }
        match &self.map {
            Some(map) => Ok(Slot::Map(map)),
            None => Err(Error::InvalidArgument(format!(
                "source {source} has no checkpoint field and the projection declares no checkpoint map"
            ))),
        }
    }
}

impl CheckpointSlots for Checkpoints {
    fn read(
        &self,
        slots: &Item,
        source: &str,
        instance: &StreamId,
        row: &str,
    ) -> Result<Option<u64>, Error> {
        match self.slot(slots, source, instance, row)? {
            Slot::Field(field) => {
                let Some(stored) = read_signed(slots, &field.field, row)? else {
                    return Ok(None);
                };
                let version = stored.saturating_sub(field.offset);
                Ok(Some(u64::try_from(version).unwrap_or(0)))
            }
            Slot::Map(map) => match get_present(slots, map) {
                None => Ok(None),
                Some(AttributeValue::M(entries)) => {
                    let name = entry_name(source, instance);
                    match get_present(entries, &name) {
                        None => Ok(None),
                        Some(AttributeValue::N(text)) => {
                            text.trim().parse().map(Some).map_err(|_| {
                                decode_error(row, map, format!("entry {name} holds {text}"))
                            })
                        }
                        Some(other) => Err(decode_error(
                            row,
                            map,
                            format!("entry {name} holds {other:?}"),
                        )),
                    }
                }
                Some(other) => Err(decode_error(row, map, format!("{other:?} is not a map"))),
            },
        }
    }

    fn record(&self, slots: &mut Item, source: &str, instance: &StreamId, checkpoint: u64) {
        // `read` succeeded for this instance before it moved, so the slot is
        // decided the same way here.
        match self.slot(slots, source, instance, "") {
            Ok(Slot::Field(field)) => {
                let stored = i64::try_from(checkpoint)
                    .unwrap_or(i64::MAX)
                    .saturating_add(field.offset);
                slots.insert(field.field.clone(), n(stored));
                if let Some(owner) = &field.instance_field {
                    slots.insert(owner.clone(), s(instance.to_string()));
                }
            }
            Ok(Slot::Map(map)) => {
                let name = entry_name(source, instance);
                match slots.get_mut(map) {
                    Some(AttributeValue::M(entries)) => {
                        entries.insert(name, n(checkpoint));
                    }
                    _ => {
                        slots.insert(
                            map.to_owned(),
                            AttributeValue::M(Item::from([(name, n(checkpoint))])),
                        );
                    }
                }
            }
            Err(_) => {}
        }
    }

    fn copy(&self, from: &Item, into: &mut Item) {
        for name in self.attributes() {
            if let Some(value) = get_present(from, name) {
                into.insert(name.to_owned(), value.clone());
            }
        }
    }

    fn guard(&self, read: &Item) -> Condition {
        self.attributes()
            .into_iter()
            .map(|name| match get_present(read, name) {
                Some(value) => Condition::eq(name.to_owned(), value.clone()),
                None => Condition::absent(name.to_owned()),
            })
            .reduce(Condition::and)
            .unwrap_or_else(|| Condition::exists(String::new()))
    }

    fn instances(&self, slots: &Item) -> Vec<(String, StreamId)> {
        let mut found = Vec::new();
        for (source, field) in &self.fields {
            let owner = field
                .instance_field
                .as_deref()
                .and_then(|f| match get_present(slots, f) {
                    Some(AttributeValue::S(owner)) => owner.parse::<StreamId>().ok(),
                    _ => None,
                });
            found.extend(owner.map(|o| (source.clone(), o)));
        }
        if let Some(AttributeValue::M(entries)) =
            self.map.as_deref().and_then(|m| get_present(slots, m))
        {
            for name in entries.keys() {
                if let Some((source, id)) = name.split_once('#') {
                    found.extend(
                        id.parse::<StreamId>()
                            .ok()
                            .map(|id| (source.to_owned(), id)),
                    );
                }
            }
        }
        found.sort();
        found.dedup();
        found
    }

    fn clear(&self, slots: &mut Item) {
        for name in self.attributes() {
            slots.remove(name);
        }
    }
}

fn decode_error(row: &str, field: &str, message: String) -> Error {
    Error::ItemDecode {
        entity: row.to_owned(),
        message: format!("{field}: {message}, not an unsigned integer"),
    }
}

/// A field-mapped checkpoint as stored (it may be below zero by its offset).
fn read_signed(item: &Item, field: &str, row: &str) -> Result<Option<i64>, Error> {
    match get_present(item, field) {
        None => Ok(None),
        Some(AttributeValue::N(text)) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| decode_error(row, field, format!("holds {text}"))),
        Some(other) => Err(decode_error(row, field, format!("holds {other:?}"))),
    }
}
