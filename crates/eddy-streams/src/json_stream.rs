//! Typed JSON stream declarations.

use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{
    Append, Appended, Created, Offset, Payload, ReadFrom, Route, Storage, StreamConfig,
    StreamError, StreamPath,
};

/// A declared JSON stream: an id, a route, and the item type `T`.
///
/// A declaration is an inert value; it names streams and codes their items.
///
/// ```
/// use eddy_streams::{JsonStream, MemoryStorage, ReadFrom};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Order { id: u32, amount: f64 }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let orders = JsonStream::<Order>::new("Shop/Orders", "orders/:workspaceId")?;
/// let params = serde_json::json!({ "workspaceId": "ws-42" });
/// let store = MemoryStorage::new();
/// orders.create(&store, &params).await?;
/// orders.append(&store, &params, &[Order { id: 1, amount: 9.5 }]).await?;
/// let page = orders.read(&store, &params, ReadFrom::Beginning).await?;
/// assert_eq!(page.items, vec![Order { id: 1, amount: 9.5 }]);
/// # Ok::<(), eddy_streams::StreamError>(())
/// # }).unwrap();
/// ```
pub struct JsonStream<T> {
    id: String,
    route: Route,
    item: PhantomData<fn() -> T>,
}

impl<T> Clone for JsonStream<T> {
    fn clone(&self) -> Self {
        JsonStream {
            id: self.id.clone(),
            route: self.route.clone(),
            item: PhantomData,
        }
    }
}

impl<T> fmt::Debug for JsonStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonStream")
            .field("id", &self.id)
            .field("route", &self.route.template())
            .finish()
    }
}

/// Items decoded from one read of a typed stream.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedChunk<T> {
    /// The items, with the offset after each one.
    pub items: Vec<T>,
    /// The offset of each item (its position, before it).
    pub offsets: Vec<Offset>,
    /// Where the next read starts.
    pub next_offset: Offset,
    /// Whether the read reached the tail.
    pub up_to_date: bool,
    /// Whether the stream is closed and the read reached its end.
    pub closed: bool,
}

impl<T: Serialize + DeserializeOwned> JsonStream<T> {
    /// Declares a stream `id` at `route` (a template such as `facts/:workspaceId`).
    pub fn new(id: impl Into<String>, route: &str) -> Result<Self, StreamError> {
        Ok(JsonStream {
            id: id.into(),
            route: Route::new(route)?,
            item: PhantomData,
        })
    }

    /// The declaration id, such as `Shop/Amounts`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The route.
    pub fn route(&self) -> &Route {
        &self.route
    }

    /// The stream configuration: `application/json`.
    pub fn config(&self) -> StreamConfig {
        StreamConfig::json()
    }

    /// The path for `params`.
    pub fn path<P: Serialize + ?Sized>(&self, params: &P) -> Result<StreamPath, StreamError> {
        self.route.render(params)
    }

    /// Encodes items as messages: slices of one buffer, so that a batch
    /// costs one allocation and its messages lie together in memory (a
    /// store that keeps them, like the memory store, then reads and decodes
    /// them without a cache miss per message).
    pub fn encode(&self, items: &[T]) -> Result<Vec<Bytes>, StreamError> {
        let mut buffer = Vec::new();
        let mut ends = Vec::with_capacity(items.len());
        for item in items {
            serde_json::to_writer(&mut buffer, item)
                .map_err(|e| self.decode_error(format!("cannot encode an item: {e}")))?;
            ends.push(buffer.len());
        }
        let buffer = Bytes::from(buffer);
        let mut start = 0;
        Ok(ends
            .into_iter()
            .map(|end| {
                let message = buffer.slice(start..end);
                start = end;
                message
            })
            .collect())
    }

    /// Decodes one message into an item.
    pub fn decode(&self, message: &[u8]) -> Result<T, StreamError> {
        serde_json::from_slice(message)
            .map_err(|e| self.decode_error(format!("a message is not a valid item: {e}")))
    }

    /// Creates the stream for `params` (idempotent).
    pub async fn create<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
    ) -> Result<Created, StreamError> {
        store
            .create(&self.path(params)?, self.config(), Payload::empty())
            .await
    }

    /// Appends items atomically.
    pub async fn append<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
        items: &[T],
    ) -> Result<Appended, StreamError> {
        store
            .append(&self.path(params)?, Append::messages(self.encode(items)?))
            .await
    }

    /// Reads and decodes one chunk (up to 1 MiB).
    pub async fn read<P: Serialize + ?Sized>(
        &self,
        store: &dyn Storage,
        params: &P,
        from: ReadFrom,
    ) -> Result<TypedChunk<T>, StreamError> {
        let chunk = store.read(&self.path(params)?, from, 1 << 20).await?;
        let items = chunk
            .messages
            .iter()
            .map(|m| self.decode(m))
            .collect::<Result<Vec<T>, _>>()?;
        Ok(TypedChunk {
            offsets: (0..items.len()).map(|i| chunk.offset_of(i)).collect(),
            items,
            next_offset: chunk.next_offset,
            up_to_date: chunk.up_to_date,
            closed: chunk.closed,
        })
    }

    fn decode_error(&self, reason: String) -> StreamError {
        StreamError::InvalidItem {
            stream: self.id.clone(),
            reason,
        }
    }
}
