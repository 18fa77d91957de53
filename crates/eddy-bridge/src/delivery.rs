//! [`StreamDelivery`]: the outbox's consumer that appends to streams.

use std::sync::Arc;

use bytes::Bytes;
use eddy_dynamo::{BoxError, Deliver, DeliveryError, Effect, LastFailure, PendingReport};
use eddy_streams::{Append, Offset, Payload, Storage, StreamConfig, StreamError, StreamPath};
use futures::future::BoxFuture;

use crate::status::Published;
use crate::{dead_letter, producer, BridgeError, Route};

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
/// delivered again and written once. A stream that never existed is
/// created with the delivery's configuration (a JSON stream by default);
/// a deleted one is not, unless [`recreate_deleted`](Self::recreate_deleted)
/// says so. Each message is the effect's payload as JSON, unless
/// [`with_encoder`](Self::with_encoder) says otherwise.
///
/// A failure that retrying cannot fix (see [`BridgeError::is_permanent`])
/// parks the effect's row by default: the outbox keeps it at the row's
/// head, shows it, and tries it no more until an operator retries or
/// skips it. With [`dead_letter`](Self::dead_letter) it is appended to a
/// dead-letter stream instead, and the row goes on.
#[derive(Clone)]
pub struct StreamDelivery {
    store: Arc<dyn Storage>,
    route: Route,
    name: String,
    config: StreamConfig,
    encode: Encode,
    on_permanent: OnPermanent,
    skip_to: Option<StreamPath>,
    recreate_deleted: bool,
    published: Published,
}

/// What a delivery does with an effect whose delivery failed for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnPermanent {
    /// Park its row (the default): the effect stays at the row's head,
    /// visible, until an operator retries or skips it.
    Park,
    /// Append it, with why it failed, to this dead-letter stream, once,
    /// and go on with the row.
    DeadLetter(StreamPath),
}

impl std::fmt::Debug for StreamDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamDelivery")
            .field("route", &self.route)
            .field("name", &self.name)
            .field("config", &self.config)
            .field("on_permanent", &self.on_permanent)
            .field("skip_to", &self.skip_to)
            .field("recreate_deleted", &self.recreate_deleted)
            .finish_non_exhaustive()
    }
}

/// What delivering one effect did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivered {
    /// Appended; the stream's tail after it.
    Appended(Offset),
    /// It was in the stream already (a redelivery).
    Duplicate,
    /// A later effect of its row is in the stream already, so this one
    /// was delivered before it (a redelivery after an expired claim).
    Superseded,
    /// Its delivery failed for good and it is in the dead-letter stream
    /// (now or by an earlier try): the failure's code.
    DeadLettered(&'static str),
}

/// The longest projection name: the producer ids it starts stay short.
const MAX_NAME_BYTES: usize = 64;

impl StreamDelivery {
    /// Delivers into `store` along `route`, as producers named after
    /// `name`: the projection's name, 1 to 64 ASCII letters, digits, `-`,
    /// `_` or `.`. Rows of different read models never share a producer
    /// (their keys differ); the name tells apart projections whose
    /// effects share a stream, and no name is a prefix of another's ids
    /// (it cannot hold the `:` that ends it), so two projections of
    /// different names never collide. Any other name is refused.
    pub fn new(
        store: Arc<dyn Storage>,
        route: Route,
        name: impl Into<String>,
    ) -> Result<Self, BridgeError> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(BridgeError::Name { name });
        }
        Ok(StreamDelivery {
            store,
            route,
            name,
            config: StreamConfig::json(),
            encode: Arc::new(payload_json),
            on_permanent: OnPermanent::Park,
            skip_to: None,
            recreate_deleted: false,
            published: Published::default(),
        })
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

    /// Appends each effect whose delivery fails for good to the JSON
    /// stream `path` (created when it never existed), once, with why (see
    /// the `dead_letter` module), and goes on with its row, instead of
    /// parking the row.
    pub fn dead_letter(mut self, path: StreamPath) -> Self {
        self.on_permanent = OnPermanent::DeadLetter(path);
        self
    }

    /// Where an operator's skip moves a parked effect
    /// ([`Deliver::dead_letter`], the command group's `skip --dead-letter`);
    /// by default the [`dead_letter`](Self::dead_letter) stream, if any.
    pub fn skip_to(mut self, path: StreamPath) -> Self {
        self.skip_to = Some(path);
        self
    }

    /// Whether a stream that was deleted (the store still knows its
    /// tombstone) is created again for the next effect (default `false`:
    /// the effect fails for good with `stream/gone`). A stream that never
    /// existed is always created.
    pub fn recreate_deleted(mut self, recreate: bool) -> Self {
        self.recreate_deleted = recreate;
        self
    }

    /// What a permanent failure does.
    pub fn on_permanent(&self) -> &OnPermanent {
        &self.on_permanent
    }

    /// Appends `effect` to its stream, once. A permanent failure is
    /// dead-lettered when the delivery says so, and returned otherwise.
    pub async fn deliver_effect(&self, effect: &Effect) -> Result<Delivered, BridgeError> {
        match self.append_effect(effect).await {
            Err(failure) if failure.is_permanent() => match &self.on_permanent {
                OnPermanent::DeadLetter(path) => {
                    let code = failure.code();
                    self.append_dead_letter(
                        effect,
                        path,
                        code,
                        &eddy_dynamo::error_chain(&failure),
                    )
                    .await?;
                    Ok(Delivered::DeadLettered(code))
                }
                OnPermanent::Park => Err(failure),
            },
            delivered => delivered,
        }
    }

    /// Appends `effect` to its route's stream.
    async fn append_effect(&self, effect: &Effect) -> Result<Delivered, BridgeError> {
        let path = self.route.path(effect).map_err(BridgeError::Route)?;
        let message = (self.encode)(effect).map_err(BridgeError::Encode)?;
        let producer = producer::position(&self.name, effect)?;
        self.append_once(&path, &self.config, message, producer)
            .await
    }

    /// Appends `effect` with its failure to the dead-letter stream `path`,
    /// as its own producer there (so once, however often a crash makes
    /// this run again).
    async fn append_dead_letter(
        &self,
        effect: &Effect,
        path: &StreamPath,
        code: &str,
        message: &str,
    ) -> Result<(), BridgeError> {
        let target = self.route.path(effect).ok().map(|p| p.to_string());
        let failure = dead_letter::Failure { code, message };
        let record = dead_letter::record(&self.name, effect, target.clone(), &failure, true)?;
        let producer = dead_letter::producer(&self.name, effect)?;
        let json = StreamConfig::json();
        let appended = match self
            .append_once(path, &json, record, producer.clone())
            .await
        {
            // The payload may be why it failed: recorded without it (the
            // same producer position, so still once).
            Err(BridgeError::Store {
                source: StreamError::TooLarge { .. },
                ..
            }) => {
                let record = dead_letter::record(&self.name, effect, target, &failure, false)?;
                self.append_once(path, &json, record, producer).await
            }
            appended => appended,
        };
        match appended {
            Ok(_) => Ok(()),
            // The dead-letter stream refuses it too: the caller parks it.
            Err(BridgeError::Store { path, source }) => {
                Err(BridgeError::DeadLetter { path, source })
            }
            Err(other) => Err(other),
        }
    }

    /// Appends one message as `producer` to `path`, creating the stream
    /// with `config` when it never existed (or was deleted, when the
    /// delivery allows it).
    async fn append_once(
        &self,
        path: &StreamPath,
        config: &StreamConfig,
        message: Bytes,
        producer: eddy_streams::ProducerPosition,
    ) -> Result<Delivered, BridgeError> {
        // A JSON stream would split a top-level array into its elements.
        let body = if config.is_json() {
            let mut wrapped = Vec::with_capacity(message.len() + 2);
            wrapped.push(b'[');
            wrapped.extend_from_slice(&message);
            wrapped.push(b']');
            Bytes::from(wrapped)
        } else {
            message
        };
        let append = Append::body(body)
            .with_content_type(config.content_type.clone())
            .with_producer(producer);
        let failed = |source| BridgeError::Store {
            path: path.to_string(),
            source,
        };
        let mut created = false;
        loop {
            match self.store.append(path, append.clone()).await {
                Ok(appended) if appended.duplicate => return Ok(Delivered::Duplicate),
                Ok(appended) => return Ok(Delivered::Appended(appended.next_offset)),
                Err(StreamError::ProducerFenced {
                    current, received, ..
                }) if current > received => return Ok(Delivered::Superseded),
                // Never existed (or its tombstone was swept): created. A
                // deleted stream (its tombstone says so) only when allowed.
                Err(StreamError::NotFound { .. }) if !created => {}
                Err(StreamError::Gone { .. }) if !created && self.recreate_deleted => {}
                Err(source) => return Err(failed(source)),
            }
            self.store
                .create(path, config.clone(), Payload::empty())
                .await
                .map_err(failed)?;
            created = true;
        }
    }

    /// Appends a parked `effect` (its delivery failed with `failure`) to
    /// the stream an operator's skip moves it to, once.
    pub async fn dead_letter_effect(
        &self,
        effect: &Effect,
        failure: &LastFailure,
    ) -> Result<(), BridgeError> {
        let path = match (&self.skip_to, &self.on_permanent) {
            (Some(path), _) | (None, OnPermanent::DeadLetter(path)) => path,
            (None, OnPermanent::Park) => return Err(BridgeError::NoDeadLetter),
        };
        self.append_dead_letter(effect, path, &failure.code, &failure.message)
            .await
    }
}

/// The effect's payload as JSON.
pub(crate) fn payload_json(effect: &Effect) -> Result<Bytes, BoxError> {
    let value: serde_json::Value = serde_dynamo::from_attribute_value(effect.payload.clone())?;
    Ok(Bytes::from(serde_json::to_vec(&value)?))
}

impl Deliver for StreamDelivery {
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivery = self.clone();
        Box::pin(async move {
            match delivery.deliver_effect(&effect).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_permanent() => Err(DeliveryError::permanent(e.code(), e).into()),
                Err(e) => Err(DeliveryError::transient(e.code(), e).into()),
            }
        })
    }

    fn dead_letter(
        &self,
        effect: Effect,
        failure: LastFailure,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivery = self.clone();
        Box::pin(async move {
            delivery.dead_letter_effect(&effect, &failure).await?;
            Ok(())
        })
    }

    /// Publishes the pass's parked rows for `eddy status` (see the
    /// `status` module).
    fn pass_done<'a>(&'a self, report: &'a PendingReport) -> BoxFuture<'a, ()> {
        Box::pin(
            self.published
                .after_pass(self.store.as_ref(), &self.name, report),
        )
    }
}
