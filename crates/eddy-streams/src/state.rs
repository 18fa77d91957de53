//! State streams: keyed rows in named collections, as a log of changes.
//!
//! A state stream is a JSON stream whose messages are either row changes
//! (insert, update, upsert or delete of the row with a key in a collection)
//! or controls (`snapshot-start`, `snapshot-end`, `reset`). On the wire a
//! change is `{"type": collection, "key": key, "value": row, "old_value":
//! row?, "headers": {"operation": "insert" | "update" | "upsert" | "delete",
//! ...}}` and a control is `{"headers": {"control": "reset" | ..., "offset":
//! offset?}}`, the shape the Durable Streams state protocol uses and the
//! `@durable-streams/state` package writes and reads.
//!
//! What other writers put in a message is kept: any JSON `value` (`null`
//! included), and every header of a change or a control, so that decoding
//! and encoding again gives the same message.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    Append, Appended, Created, Offset, Payload, ReadFrom, Route, Storage, StreamConfig,
    StreamError, StreamPath,
};

/// What a change does to its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// A new row.
    Insert,
    /// A new value for a row (materializers treat it like insert).
    Update,
    /// A row inserted, or updated if its key is present. The
    /// `@durable-streams/state` package writes it; the protocol's JSON
    /// schema lists only the three others, so [`StateStream::upsert`] writes
    /// [`Operation::Update`].
    Upsert,
    /// The row is removed.
    Delete,
}

/// A control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// A snapshot of every row follows.
    SnapshotStart,
    /// The snapshot is complete.
    SnapshotEnd,
    /// Forget every row: what follows rebuilds the state.
    Reset,
}

/// A control message: what it signals, and its headers.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlMessage {
    /// What the control signals.
    pub control: Control,
    /// The headers besides `control`, kept as they are: the protocol's
    /// `offset` (the stream position the control applies at), and any other.
    pub headers: Map<String, Value>,
}

impl ControlMessage {
    /// A control with no other header.
    pub fn new(control: Control) -> Self {
        ControlMessage {
            control,
            headers: Map::new(),
        }
    }

    /// The same control, naming the stream `offset` it applies at. Offsets
    /// are text, as other servers' offsets have other forms than Eddy's.
    pub fn with_offset(mut self, offset: impl Into<String>) -> Self {
        self.headers
            .insert(OFFSET_HEADER.to_owned(), Value::String(offset.into()));
        self
    }

    /// The `offset` header, when it is text.
    pub fn offset(&self) -> Option<&str> {
        self.headers.get(OFFSET_HEADER).and_then(Value::as_str)
    }
}

/// The control header naming the stream position a control applies at.
const OFFSET_HEADER: &str = "offset";

/// A change to one keyed row.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The collection the row belongs to.
    pub collection: String,
    /// The row key.
    pub key: String,
    /// What happens to the row.
    pub operation: Operation,
    /// The new row: any JSON value, `null` included (`Some(Value::Null)`).
    /// Absent (`None`) only for deletes: the other operations need one.
    pub value: Option<Value>,
    /// The previous row, when the writer knows it (`null` kept as for
    /// `value`).
    pub old_value: Option<Value>,
    /// Further headers, kept as they are.
    pub headers: Map<String, Value>,
}

/// One message of a state stream.
#[derive(Clone, Debug, PartialEq)]
pub enum StateMessage {
    /// A row change.
    Change(Change),
    /// A control.
    Control(ControlMessage),
}

impl From<ControlMessage> for StateMessage {
    fn from(control: ControlMessage) -> Self {
        StateMessage::Control(control)
    }
}

impl From<Control> for StateMessage {
    fn from(control: Control) -> Self {
        StateMessage::Control(ControlMessage::new(control))
    }
}

impl StateMessage {
    /// A `reset` control.
    pub fn reset() -> Self {
        Control::Reset.into()
    }

    /// A `snapshot-start` control.
    pub fn snapshot_start() -> Self {
        Control::SnapshotStart.into()
    }

    /// A `snapshot-end` control.
    pub fn snapshot_end() -> Self {
        Control::SnapshotEnd.into()
    }

    /// Decodes a stored message.
    pub fn decode(message: &[u8]) -> Result<Self, StreamError> {
        let wire: Wire = serde_json::from_slice(message)
            .map_err(|e| StreamError::InvalidState(e.to_string()))?;
        wire.try_into()
    }

    /// Encodes the message for storage; a change that is not a delete
    /// needs a value (which may be `null`), as in [`decode`](Self::decode),
    /// and no further header may be named `operation` or `control` (the
    /// message's kind writes those).
    pub fn encode(&self) -> Result<Bytes, StreamError> {
        let headers = match self {
            StateMessage::Change(change) => {
                has_value_if_needed(change.operation, change.value.as_ref())?;
                &change.headers
            }
            StateMessage::Control(control) => &control.headers,
        };
        if let Some(name) = KIND_HEADERS.iter().find(|h| headers.contains_key(**h)) {
            return Err(StreamError::InvalidState(format!(
                "the header `{name}` is the message's kind, not a further header"
            )));
        }
        serde_json::to_vec(&Wire::from(self))
            .map(Bytes::from)
            .map_err(|e| StreamError::InvalidState(e.to_string()))
    }
}

/// The headers that say what kind of message it is.
const KIND_HEADERS: [&str; 2] = ["operation", "control"];

/// Every operation but delete carries the row it writes.
fn has_value_if_needed(operation: Operation, value: Option<&Value>) -> Result<(), StreamError> {
    if operation != Operation::Delete && value.is_none() {
        return Err(StreamError::InvalidState(
            "an insert, update or upsert needs a `value` (`null` is one)".to_owned(),
        ));
    }
    Ok(())
}

/// Deserializes a field that is present as `Some`, even when it is `null`
/// (serde's default makes `null` and absent both `None`).
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(field).map(Some)
}

#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    collection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    value: Option<Value>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    old_value: Option<Value>,
    headers: WireHeaders,
}

#[derive(Serialize, Deserialize)]
struct WireHeaders {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operation: Option<Operation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    control: Option<Control>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl From<&StateMessage> for Wire {
    fn from(message: &StateMessage) -> Self {
        match message {
            StateMessage::Control(control) => Wire {
                collection: None,
                key: None,
                value: None,
                old_value: None,
                headers: WireHeaders {
                    operation: None,
                    control: Some(control.control),
                    extra: control.headers.clone(),
                },
            },
            StateMessage::Change(change) => Wire {
                collection: Some(change.collection.clone()),
                key: Some(change.key.clone()),
                value: change.value.clone(),
                old_value: change.old_value.clone(),
                headers: WireHeaders {
                    operation: Some(change.operation),
                    control: None,
                    extra: change.headers.clone(),
                },
            },
        }
    }
}

impl TryFrom<Wire> for StateMessage {
    type Error = StreamError;

    fn try_from(wire: Wire) -> Result<Self, Self::Error> {
        let invalid = |reason: &str| Err(StreamError::InvalidState(reason.to_owned()));
        match (wire.headers.control, wire.headers.operation) {
            (Some(control), None) => Ok(StateMessage::Control(ControlMessage {
                control,
                headers: wire.headers.extra,
            })),
            (None, Some(operation)) => {
                let (Some(collection), Some(key)) = (wire.collection, wire.key) else {
                    return invalid("a change needs `type` (its collection) and `key`");
                };
                has_value_if_needed(operation, wire.value.as_ref())?;
                Ok(StateMessage::Change(Change {
                    collection,
                    key,
                    operation,
                    value: wire.value,
                    old_value: wire.old_value,
                    headers: wire.headers.extra,
                }))
            }
            (Some(_), Some(_)) => invalid("a message is either a change or a control, not both"),
            (None, None) => invalid("headers need an `operation` or a `control`"),
        }
    }
}

type Validator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// One collection of a state stream: its key field and row type check.
#[derive(Clone)]
pub struct Collection {
    key_field: String,
    validate: Validator,
}

impl fmt::Debug for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collection")
            .field("key_field", &self.key_field)
            .finish()
    }
}

/// A declared state stream: an id, a route, and its collections.
///
/// ```
/// use eddy_streams::{MemoryStorage, StateStream, StateMessage};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// #[serde(rename_all = "camelCase")]
/// struct Card { issue_id: String, total: f64 }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let board = StateStream::new("Tracker/Board", "board")?.collection::<Card>("card", "issueId");
/// let store = MemoryStorage::new();
/// board.create(&store, &()).await?;
/// board.append(&store, &(), &[
///     board.upsert("card", &Card { issue_id: "a".into(), total: 1.0 })?,
///     board.upsert("card", &Card { issue_id: "b".into(), total: 2.0 })?,
///     board.remove("card", "a")?,
/// ]).await?;
/// let state = board.materialize(&store, &()).await?;
/// let cards = state.rows::<Card>("card")?;
/// assert_eq!(cards.keys().collect::<Vec<_>>(), ["b"]);
/// # Ok::<(), eddy_streams::StreamError>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct StateStream {
    id: String,
    route: Route,
    collections: BTreeMap<String, Collection>,
}

impl StateStream {
    /// Declares a state stream `id` at `route`, with no collections yet.
    pub fn new(id: impl Into<String>, route: &str) -> Result<Self, StreamError> {
        Ok(StateStream {
            id: id.into(),
            route: Route::new(route)?,
            collections: BTreeMap::new(),
        })
    }

    /// Adds a collection whose rows are `R`, keyed by the field `key_field`.
    pub fn collection<R: Serialize + DeserializeOwned>(
        mut self,
        name: &str,
        key_field: &str,
    ) -> Self {
        let validate: Validator = Arc::new(|value: &Value| {
            serde_json::from_value::<R>(value.clone())
                .map(drop)
                .map_err(|e| e.to_string())
        });
        self.collections.insert(
            name.to_owned(),
            Collection {
                key_field: key_field.to_owned(),
                validate,
            },
        );
        self
    }

    /// The declaration id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The route.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The collection names.
    pub fn collections(&self) -> impl Iterator<Item = &str> {
        self.collections.keys().map(String::as_str)
    }

    /// The path for `params`.
    pub fn path<P: Serialize + ?Sized>(&self, params: &P) -> Result<StreamPath, StreamError> {
        self.route.render(params)
    }

    /// An update of `row` in `collection`, keyed by the collection's key field.
    pub fn upsert<R: Serialize>(
        &self,
        collection: &str,
        row: &R,
    ) -> Result<StateMessage, StreamError> {
        let value =
            serde_json::to_value(row).map_err(|e| StreamError::InvalidState(e.to_string()))?;
        let key = self.key_of(collection, &value)?;
        let message = StateMessage::Change(Change {
            collection: collection.to_owned(),
            key,
            operation: Operation::Update,
            value: Some(value),
            old_value: None,
            headers: Map::new(),
        });
        self.validate(&message)?;
        Ok(message)
    }

    /// A delete of the row with `key` in `collection`.
    pub fn remove(
        &self,
        collection: &str,
        key: impl Into<String>,
    ) -> Result<StateMessage, StreamError> {
        let message = StateMessage::Change(Change {
            collection: collection.to_owned(),
            key: key.into(),
            operation: Operation::Delete,
            value: None,
            old_value: None,
            headers: Map::new(),
        });
        self.validate(&message)?;
        Ok(message)
    }

    /// Checks a message against the declaration: a known collection, a row of
    /// the collection's type whose key field equals the change's key.
    pub fn validate(&self, message: &StateMessage) -> Result<(), StreamError> {
        let StateMessage::Change(change) = message else {
            return Ok(());
        };
        let collection = self.collection_named(&change.collection)?;
        if let Some(value) = &change.value {
            (collection.validate)(value).map_err(|e| {
                StreamError::InvalidState(format!(
                    "a `{}` row does not match its type: {e}",
                    change.collection
                ))
            })?;
            let key = self.key_of(&change.collection, value)?;
            if key != change.key {
                return Err(StreamError::InvalidState(format!(
                    "the change key `{}` differs from the row's `{}` field `{key}`",
                    change.key, collection.key_field
                )));
            }
        }
        Ok(())
    }

    /// Creates the stream for `params` (idempotent).
    pub async fn create<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
    ) -> Result<Created, StreamError> {
        store
            .create(&self.path(params)?, StreamConfig::json(), Payload::empty())
            .await
    }

    /// Validates every message, then appends them all atomically, in order.
    pub async fn append<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
        messages: &[StateMessage],
    ) -> Result<Appended, StreamError> {
        let encoded = messages
            .iter()
            .map(|m| self.validate(m).and_then(|()| m.encode()))
            .collect::<Result<Vec<_>, _>>()?;
        store
            .append(&self.path(params)?, Append::messages(encoded))
            .await
    }

    /// Reads the whole stream into collections. A message that does not
    /// decode fails the read with [`StreamError::UndecodableState`], which
    /// names its offset; [`materialize_with`](Self::materialize_with) can
    /// skip such messages instead.
    ///
    /// Rows are not checked against the collections' types: other writers
    /// may use collections this declaration does not name.
    pub async fn materialize<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
    ) -> Result<Materialized, StreamError> {
        self.materialize_with(store, params, Undecodable::Fail)
            .await
    }

    /// Reads the whole stream into collections, doing with a message that
    /// does not decode what `undecodable` says.
    pub async fn materialize_with<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
        undecodable: Undecodable,
    ) -> Result<Materialized, StreamError> {
        let path = self.path(params)?;
        let mut state = Materialized::default();
        let mut from = ReadFrom::Beginning;
        loop {
            let chunk = store.read(&path, from, 1 << 20).await?;
            for (index, message) in chunk.messages.iter().enumerate() {
                let offset = chunk.offset_of(index);
                match (StateMessage::decode(message), undecodable) {
                    (Ok(message), _) => state.apply(message),
                    (Err(e), Undecodable::Skip) => state.skipped.push(Skipped {
                        offset,
                        reason: e.to_string(),
                    }),
                    (Err(e), Undecodable::Fail) => {
                        return Err(StreamError::UndecodableState {
                            path: path.to_string(),
                            offset,
                            reason: e.to_string(),
                        })
                    }
                }
            }
            if chunk.up_to_date {
                return Ok(state);
            }
            from = ReadFrom::Offset(chunk.next_offset);
        }
    }

    fn collection_named(&self, name: &str) -> Result<&Collection, StreamError> {
        self.collections.get(name).ok_or_else(|| {
            StreamError::InvalidState(format!("stream `{}` has no collection `{name}`", self.id))
        })
    }

    fn key_of(&self, collection: &str, value: &Value) -> Result<String, StreamError> {
        let field = &self.collection_named(collection)?.key_field;
        match value.get(field) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => Err(StreamError::InvalidState(format!(
                "a `{collection}` row needs its key field `{field}` as a string or number"
            ))),
        }
    }
}

/// What a read of a state stream does with a message that does not decode
/// (not JSON, or not a change or control of the protocol).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Undecodable {
    /// Fail the read with [`StreamError::UndecodableState`] (code
    /// `state/undecodable`), naming the message's offset. The default: a
    /// state that leaves out a change would be wrong without a sign.
    #[default]
    Fail,
    /// Skip the message and go on; each one skipped is listed in
    /// [`Materialized::skipped`], so that the caller sees what is missing.
    Skip,
}

/// A message a read skipped because it does not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Where the message is in the stream.
    pub offset: Offset,
    /// Why it does not decode.
    pub reason: String,
}

/// The rows a state stream describes, by collection and key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Materialized {
    /// Rows by collection, then by key. A row may be any JSON value,
    /// `null` included.
    pub collections: BTreeMap<String, BTreeMap<String, Value>>,
    /// Whether a snapshot has started and not yet ended.
    pub in_snapshot: bool,
    /// The messages skipped as undecodable, in stream order (only with
    /// [`Undecodable::Skip`]).
    pub skipped: Vec<Skipped>,
}

impl Materialized {
    /// Applies one message. Insert, update and upsert all set the row, so
    /// an upsert inserts a missing row and updates a present one; a
    /// change without a value (which decoding refuses) sets `null`.
    pub fn apply(&mut self, message: StateMessage) {
        match message {
            StateMessage::Control(control) => match control.control {
                Control::Reset => self.collections.clear(),
                Control::SnapshotStart => self.in_snapshot = true,
                Control::SnapshotEnd => self.in_snapshot = false,
            },
            StateMessage::Change(change) => {
                match change.operation {
                    Operation::Delete => {
                        // A collection without rows is not kept, so that
                        // the rows alone say what is there (as after a
                        // compaction that dropped the collection's every
                        // change).
                        if let Some(rows) = self.collections.get_mut(&change.collection) {
                            rows.remove(&change.key);
                            if rows.is_empty() {
                                self.collections.remove(&change.collection);
                            }
                        }
                    }
                    Operation::Insert | Operation::Update | Operation::Upsert => {
                        let rows = self.collections.entry(change.collection).or_default();
                        rows.insert(change.key, change.value.unwrap_or(Value::Null));
                    }
                }
            }
        }
    }

    /// The rows of `collection`, decoded as `R`.
    pub fn rows<R: DeserializeOwned>(
        &self,
        collection: &str,
    ) -> Result<BTreeMap<String, R>, StreamError> {
        let Some(rows) = self.collections.get(collection) else {
            return Ok(BTreeMap::new());
        };
        rows.iter()
            .map(|(key, value)| {
                serde_json::from_value(value.clone())
                    .map(|row| (key.clone(), row))
                    .map_err(|e| {
                        StreamError::InvalidState(format!("row `{key}` of `{collection}`: {e}"))
                    })
            })
            .collect()
    }
}
