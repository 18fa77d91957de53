//! Event streams: versioned, append-only sequences of events per stream
//! instance, each event its own item, appended under optimistic concurrency.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::app_schema::{compose, to_item, AppSchema};
use crate::condition::Condition;
use crate::entity::query_all;
use crate::error::{Error, TableError};
use crate::event_item::{EventItem, ImageCache, StreamId, StreamIdentity};
use crate::item::{s, AttributeValue, Item};
use crate::query::{Query, SortCondition};
use crate::request::{ConditionCheck, Put, TransactWriteItem};
use crate::table::Table;
use crate::variants::{decode_variant, variant_names};

/// The most events one append writes: a transaction holds 100 items, one of
/// which checks the expected version.
pub const MAX_APPEND: usize = 99;

/// A decoded event with its place in the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent<E> {
    /// The stream instance.
    pub stream_id: StreamId,
    /// The version, from 1.
    pub version: u64,
    /// The event type (enum variant name).
    pub event_type: String,
    /// The event.
    pub event: E,
    /// When it was appended (RFC 3339).
    pub timestamp: String,
    /// Optional metadata.
    pub metadata: Option<serde_json::Value>,
}

/// A named event stream of a table.
///
/// `E` is the stream's event enum in serde's default (externally tagged)
/// representation: the variant name is the event type. Each stream
/// instance is identified by the composite attributes of its [`StreamId`].
pub struct EventStream<E> {
    table: Arc<dyn Table>,
    app: AppSchema,
    name: String,
    id_attributes: Vec<String>,
    event_types: &'static [&'static str],
    events: PhantomData<fn() -> E>,
}

impl<E> Clone for EventStream<E> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            app: self.app.clone(),
            name: self.name.clone(),
            id_attributes: self.id_attributes.clone(),
            event_types: self.event_types,
            events: PhantomData,
        }
    }
}

impl<E> std::fmt::Debug for EventStream<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("name", &self.name)
            .field("event_types", &self.event_types)
            .finish()
    }
}

/// Declares an event stream: its table, app schema, name, event enum `E`
/// and the attributes composing a stream id.
///
/// Fails with `InvalidArgument` when `E` is not an externally tagged enum
/// or no id attribute is given.
pub fn make_stream<E: Serialize + DeserializeOwned>(
    table: Arc<dyn Table>,
    app: AppSchema,
    name: impl Into<String>,
    id_attributes: &[&str],
) -> Result<EventStream<E>, Error> {
    let name = name.into();
    let event_types = variant_names::<E>().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the events of stream {name} must be an externally tagged serde enum"
        ))
    })?;
    if id_attributes.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "stream {name} needs at least one id attribute"
        )));
    }
    Ok(EventStream {
        table,
        app,
        name,
        id_attributes: id_attributes.iter().map(|a| (*a).to_owned()).collect(),
        event_types,
        events: PhantomData,
    })
}

fn version_sort_key(version: u64) -> String {
    format!("$event#{version:020}")
}

impl<E: Serialize + DeserializeOwned> EventStream<E> {
    /// The stream name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The full identity of this stream: app, schema version and name.
    pub fn identity(&self) -> StreamIdentity {
        StreamIdentity {
            app: self.app.clone(),
            name: self.name.clone(),
        }
    }

    /// The event types (variant names) of this stream.
    pub fn event_types(&self) -> &'static [&'static str] {
        self.event_types
    }

    /// The table.
    pub fn table(&self) -> &Arc<dyn Table> {
        &self.table
    }

    /// A stream id from attribute values; fails with `KeyComposeError` when
    /// it does not hold exactly the stream's id attributes.
    pub fn id<K: Into<String>, V: Into<String>>(
        &self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<StreamId, Error> {
        let id = StreamId::new(pairs);
        self.check_id(&id)?;
        Ok(id)
    }

    fn check_id(&self, id: &StreamId) -> Result<(), Error> {
        for attribute in &self.id_attributes {
            if id.get(attribute).is_none_or(str::is_empty) {
                return Err(Error::KeyCompose {
                    entity: self.name.clone(),
                    attribute: attribute.clone(),
                    reason: "the stream id lacks it".into(),
                });
            }
        }
        if id.attributes().len() != self.id_attributes.len() {
            return Err(Error::KeyCompose {
                entity: self.name.clone(),
                attribute: id
                    .attributes()
                    .keys()
                    .find(|k| !self.id_attributes.contains(k))
                    .cloned()
                    .unwrap_or_default(),
                reason: "not an id attribute of this stream".into(),
            });
        }
        Ok(())
    }

    fn partition(&self, id: &StreamId) -> Result<String, Error> {
        self.check_id(id)?;
        let values: Item = id
            .attributes()
            .iter()
            .map(|(k, v)| (k.clone(), s(v.clone())))
            .collect();
        compose(
            &self.app.stream_prefix(&self.name),
            &self.id_attributes,
            &values,
            &self.name,
        )
    }

    fn key(&self, id: &StreamId, version: u64) -> Result<Item, Error> {
        let schema = self.table.schema();
        let sk = schema.key.sort.as_ref().map_or("sk", |a| a.name.as_str());
        Ok(Item::from([
            (schema.key.partition.name.clone(), s(self.partition(id)?)),
            (sk.to_owned(), s(version_sort_key(version))),
        ]))
    }

    /// Encodes an event into its type and data.
    pub fn encode(&self, event: &E) -> Result<(String, AttributeValue), Error> {
        match serde_json::to_value(event).map_err(|e| Error::Encode(e.to_string()))? {
            serde_json::Value::String(event_type) => Ok((event_type, AttributeValue::Null(true))),
            serde_json::Value::Object(map) if map.len() == 1 => {
                let (event_type, data) = map
                    .into_iter()
                    .next()
                    .ok_or_else(|| Error::Encode("empty event".into()))?;
                let data = serde_dynamo::to_attribute_value(data)
                    .map_err(|e| Error::Encode(e.to_string()))?;
                Ok((event_type, data))
            }
            _ => Err(Error::Encode(format!(
                "an event of stream {} is not an enum variant",
                self.name
            ))),
        }
    }

    /// Decodes a stored event; `UnknownEventType` when its type is not one
    /// of this stream's, `EventDecodeError` when its data does not fit.
    pub fn decode(&self, item: &EventItem) -> Result<StoredEvent<E>, Error> {
        self.decode_owned(item.clone())
    }

    /// [`decode`](Self::decode), taking the stored event.
    pub(crate) fn decode_owned(&self, item: EventItem) -> Result<StoredEvent<E>, Error> {
        if !self.event_types.contains(&item.event_type.as_str()) {
            return Err(Error::UnknownEventType {
                stream: self.name.clone(),
                event_type: item.event_type,
            });
        }
        let failed = |message: String| Error::EventDecode {
            stream: self.name.clone(),
            event_type: item.event_type.clone(),
            message,
        };
        // As the externally tagged form `{type: data}` (the bare type for a
        // unit variant) decodes.
        let event =
            decode_variant(&item.event_type, item.data).map_err(|e| failed(e.to_string()))?;
        let metadata = item
            .metadata
            .map(serde_dynamo::from_attribute_value::<_, serde_json::Value>)
            .transpose()
            .map_err(|e| failed(format!("metadata: {e}")))?;
        Ok(StoredEvent {
            stream_id: item.stream_id,
            version: item.version,
            event_type: item.event_type,
            event,
            timestamp: item.timestamp,
            metadata,
        })
    }

    /// Appends events after `expected_version` (0 for a new stream) in one
    /// transaction and returns the new version. Fails with `VersionConflict`
    /// when the stream is not at `expected_version`; nothing is written then.
    pub async fn append(
        &self,
        id: &StreamId,
        events: &[E],
        expected_version: u64,
    ) -> Result<u64, Error> {
        self.append_with_metadata(id, events, expected_version, None)
            .await
    }

    /// [`append`](Self::append) with metadata stored on every event.
    pub async fn append_with_metadata(
        &self,
        id: &StreamId,
        events: &[E],
        expected_version: u64,
        metadata: Option<&serde_json::Value>,
    ) -> Result<u64, Error> {
        if events.is_empty() {
            return Err(Error::InvalidArgument(
                "append needs at least one event".into(),
            ));
        }
        if events.len() > MAX_APPEND {
            return Err(Error::InvalidArgument(format!(
                "one append writes at most {MAX_APPEND} events, got {}; append in several steps",
                events.len()
            )));
        }
        let overflow = || Error::CounterOverflow {
            counter: format!("the version of stream {}({id})", self.name),
        };
        let last = expected_version
            .checked_add(events.len() as u64)
            .ok_or_else(overflow)?;
        let metadata = metadata.map(to_item).transpose()?.map(AttributeValue::M);
        let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let pk_name = self.table.schema().key.partition.name.clone();
        let mut writes: Vec<TransactWriteItem> = Vec::with_capacity(events.len() + 1);
        if expected_version > 0 {
            writes.push(
                ConditionCheck {
                    key: self.key(id, expected_version)?,
                    condition: Condition::exists(pk_name.clone()),
                }
                .into(),
            );
        }
        for (offset, event) in events.iter().enumerate() {
            let version = expected_version + 1 + offset as u64; // at most `last`
            let (event_type, data) = self.encode(event)?;
            let stored = EventItem {
                stream: self.identity(),
                stream_id: id.clone(),
                version,
                event_type,
                data,
                timestamp: timestamp.clone(),
                metadata: metadata.clone(),
            };
            let mut item = stored.attributes();
            item.extend(self.key(id, version)?);
            writes.push(
                Put::new(item)
                    .when(Condition::not_exists(pk_name.clone()))
                    .into(),
            );
        }
        match self.table.transact_write_items(writes).await {
            Ok(()) => Ok(last),
            Err(e @ TableError::TransactionCanceled { .. }) if e.is_condition_failure() => {
                Err(Error::VersionConflict {
                    stream: format!("{}({id})", self.name),
                    expected: expected_version,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn read_items(
        &self,
        id: &StreamId,
        sort: SortCondition,
        backward: bool,
        limit: Option<usize>,
    ) -> Result<Vec<EventItem>, Error> {
        let mut query = Query::partition(s(self.partition(id)?)).sort(sort);
        if backward {
            query = query.backward();
        }
        let items = match limit {
            Some(limit) => self.table.query(query.limit(limit)).await?.items,
            None => query_all(self.table.as_ref(), query).await?,
        };
        let mut cache = ImageCache::default();
        items
            .iter()
            .filter_map(|i| EventItem::from_image(i, i, &mut cache).transpose())
            .collect()
    }

    /// The stored (undecoded) events with versions in `from..=to`.
    pub async fn read_items_range(
        &self,
        id: &StreamId,
        from: u64,
        to: u64,
    ) -> Result<Vec<EventItem>, Error> {
        if from > to {
            return Ok(Vec::new());
        }
        let sort = SortCondition::Between(s(version_sort_key(from)), s(version_sort_key(to)));
        self.read_items(id, sort, false, None).await
    }

    /// Every event of the stream instance, in version order.
    pub async fn read(&self, id: &StreamId) -> Result<Vec<StoredEvent<E>>, Error> {
        self.read_from(id, 1).await
    }

    /// The events from `version` on, in version order.
    pub async fn read_from(
        &self,
        id: &StreamId,
        version: u64,
    ) -> Result<Vec<StoredEvent<E>>, Error> {
        let items = self
            .read_items_range(id, version.max(1), u64::MAX / 2)
            .await?;
        items.into_iter().map(|i| self.decode_owned(i)).collect()
    }

    /// The version of the last event, 0 for a stream with none.
    pub async fn current_version(&self, id: &StreamId) -> Result<u64, Error> {
        let last = self
            .read_items(id, SortCondition::BeginsWith(s("$event#")), true, Some(1))
            .await?;
        Ok(last.first().map_or(0, |e| e.version))
    }
}
