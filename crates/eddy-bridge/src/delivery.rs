//! [`StreamDelivery`]: the outbox's consumer that appends to streams.

use std::sync::Arc;

use bytes::Bytes;
use eddy_dynamo::{BoxError, Deliver, Effect};
use eddy_streams::{Append, Offset, Payload, Storage, StreamConfig, StreamError};
use futures::future::BoxFuture;

use crate::{producer, BridgeError, Route};

/// How an effect becomes a message.
type Encode = Arc<dyn Fn(&Effect) -> Result<Bytes, BoxError> + Send + Sync>;

/// Delivers outbox effects into durable streams of any [`Storage`]
/// (SQLite, PostgreSQL, DynamoDB, or a remote `eddy serve` through
/// `RemoteStorage`), exactly once and in each row's order: give it to
/// [`Outbox::drain`](eddy_dynamo::Outbox::drain), `drain_pending`,
/// `process_batch_delivering` or the Lambda handler as their
/// [`Deliver`].
///
/// Each effect is one message, appended as the row's idempotent producer
/// (see the `producer` module): a delivery that a crash cut short is
/// delivered again and written once. A stream that does not exist yet is
/// created with the delivery's configuration (a JSON stream by default);
/// each message is then the effect's payload as JSON, unless
/// [`with_encoder`](Self::with_encoder) says otherwise.
#[derive(Clone)]
pub struct StreamDelivery {
    store: Arc<dyn Storage>,
    route: Route,
    name: String,
    config: StreamConfig,
    encode: Encode,
}

impl std::fmt::Debug for StreamDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDelivery")
            .field("route", &self.route)
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What delivering one effect did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// Appended; the stream's tail after it.
    Appended(Offset),
    /// It was in the stream already (a redelivery).
    Duplicate,
    /// A later effect of its row is in the stream already, so this one
    /// was delivered before it (a redelivery after an expired claim).
    Superseded,
}

impl StreamDelivery {
    /// Delivers into `store` along `route`, as producers named after
    /// `name` (the projection's name: it tells rows of different
    /// projections apart when they share a stream; visible ASCII).
    pub fn new(store: Arc<dyn Storage>, route: Route, name: impl Into<String>) -> Self {
        StreamDelivery {
            store,
            route,
            name: name.into(),
            config: StreamConfig::json(),
            encode: Arc::new(payload_json),
        }
    }

    /// Creates missing streams with `config` (default: JSON streams).
    pub fn with_config(mut self, config: StreamConfig) -> Self {
        self.config = config;
        self
    }

    /// Makes each effect's message with `encode` (on a JSON stream, one
    /// JSON value) instead of its payload as JSON.
    pub fn with_encoder(
        mut self,
        encode: impl Fn(&Effect) -> Result<Bytes, BoxError> + Send + Sync + 'static,
    ) -> Self {
        self.encode = Arc::new(encode);
        self
    }

    /// Appends `effect` to its stream, once.
    pub async fn deliver_effect(&self, effect: &Effect) -> Result<Delivered, BridgeError> {
        let path = self.route.path(effect).map_err(BridgeError::Route)?;
        let message = (self.encode)(effect).map_err(BridgeError::Encode)?;
        // A JSON stream would split a top-level array into its elements.
        let body = if self.config.is_json() {
            let mut wrapped = Vec::with_capacity(message.len() + 2);
            wrapped.push(b'[');
            wrapped.extend_from_slice(&message);
            wrapped.push(b']');
            Bytes::from(wrapped)
        } else {
            message
        };
        let producer = producer::position(&self.name, effect)?;
        let append = Append::body(body)
            .with_content_type(self.config.content_type.clone())
            .with_producer(producer);
        let mut created = false;
        loop {
            match self.store.append(&path, append.clone()).await {
                Ok(appended) if appended.duplicate => return Ok(Delivered::Duplicate),
                Ok(appended) => return Ok(Delivered::Appended(appended.next_offset)),
                Err(StreamError::ProducerFenced {
                    current, received, ..
                }) if current > received => return Ok(Delivered::Superseded),
                Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) if !created => {
                    self.store
                        .create(&path, self.config.clone(), Payload::empty())
                        .await
                        .map_err(|source| BridgeError::Store {
                            path: path.to_string(),
                            source,
                        })?;
                    created = true;
                }
                Err(source) => {
                    return Err(BridgeError::Store {
                        path: path.to_string(),
                        source,
                    })
                }
            }
        }
    }
}

/// The effect's payload as JSON.
fn payload_json(effect: &Effect) -> Result<Bytes, BoxError> {
    let value: serde_json::Value = serde_dynamo::from_attribute_value(effect.payload.clone())?;
    Ok(Bytes::from(serde_json::to_vec(&value)?))
}

impl Deliver for StreamDelivery {
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivery = self.clone();
        Box::pin(async move {
            delivery.deliver_effect(&effect).await?;
            Ok(())
        })
    }
}
