//! The seam between a projection's row write and the outbox: the effects an
//! applied event produces, and how they are committed with the row.
//!
//! The row core collects each applied event's effects (in fold order) and,
//! when a write has any, asks the projection's [`EffectCommit`] for the
//! transaction items that commit them; the row put and those items go to the
//! table in one `TransactWriteItems`. A write without effects stays one
//! `PutItem`.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::{AttributeValue, Item};
use crate::outbox::{Deliver, DrainReport, Effect, Parked, PendingReport, RowPending};
use crate::request::TableWrite;

/// An effect of an applied event, encoded, waiting to be committed with its
/// row's write.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEffect {
    /// The source of the event that produced it.
    pub source: String,
    /// The event's stream instance.
    pub stream_id: StreamId,
    /// The event's version.
    pub version: u64,
    /// The effect, encoded through the outbox's schema.
    pub payload: AttributeValue,
}

/// How effects are committed in the same transaction as their row, and
/// delivered afterwards: the [`Outbox`](crate::Outbox) implements it.
#[async_trait]
pub trait EffectCommit: Send + Sync {
    /// The transaction items that commit `effects` (in delivery order) with
    /// the write of the row `row_key` that sets `revision`. Called once per
    /// row write that has effects; revisions grow with every write of a
    /// row, so `(revision, position)` orders a row's effects across all its
    /// sources.
    fn commit_items(
        &self,
        row_key: &Item,
        revision: u64,
        effects: &[PendingEffect],
    ) -> Result<Vec<TableWrite>, Error>;

    /// Delivers the pending effects of the row `row_key`, in order (see
    /// [`Outbox::drain`](crate::Outbox::drain)).
    async fn drain(&self, row_key: &Item, deliver: &dyn Deliver) -> Result<DrainReport, Error>;

    /// Delivers the pending effects of every row that has some (see
    /// [`Outbox::drain_pending`](crate::Outbox::drain_pending)).
    async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error>;

    /// The pending effects of the row `row_key`.
    async fn pending(&self, row_key: &Item) -> Result<RowPending, Error>;

    /// Every row with pending effects.
    async fn pending_rows(&self) -> Result<Vec<RowPending>, Error>;

    /// Unparks the row `row_key` (see
    /// [`Outbox::unpark`](crate::Outbox::unpark)).
    async fn unpark(&self, row_key: &Item) -> Result<Option<Parked>, Error>;

    /// Drops the parked head `effect` of the row `row_key` (see
    /// [`Outbox::drop_parked`](crate::Outbox::drop_parked)).
    async fn drop_parked(&self, row_key: &Item, effect: &Effect) -> Result<bool, Error>;
}

/// The applied event an outbox's `effects` sees.
#[derive(Debug, Clone, Copy)]
pub struct EffectEvent<'a> {
    /// The source that read it.
    pub source: &'a str,
    /// Its stream instance.
    pub stream_id: &'a StreamId,
    /// Its version.
    pub version: u64,
    /// Its event type (the enum variant name).
    pub event_type: &'a str,
    pub(crate) data: &'a AttributeValue,
}

impl EffectEvent<'_> {
    /// The event's data, decoded into `T` (the variant's fields).
    pub fn data<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_dynamo::from_attribute_value(self.data.clone()).map_err(|e| Error::EventDecode {
            stream: self.source.to_owned(),
            event_type: self.event_type.to_owned(),
            message: e.to_string(),
        })
    }
}

/// `outbox.effects`, with the effect type encoded away: the encoded effects
/// of an applied event given the row's next state (`None`: the event
/// removed the row).
pub(crate) type EffectsFn<M> =
    Arc<dyn Fn(&EffectEvent<'_>, Option<&M>) -> Result<Vec<AttributeValue>, Error> + Send + Sync>;

/// A projection's outbox: what its events produce, and where it goes.
pub(crate) struct OutboxDecl<M> {
    pub effects: EffectsFn<M>,
    pub commit: Arc<dyn EffectCommit>,
}

impl<M> Clone for OutboxDecl<M> {
    fn clone(&self) -> Self {
        Self {
            effects: Arc::clone(&self.effects),
            commit: Arc::clone(&self.commit),
        }
    }
}

/// Encodes effects of type `X` with the outbox's schema (serde).
pub(crate) fn encode_effects<X: serde::Serialize>(
    effects: Vec<X>,
) -> Result<Vec<AttributeValue>, Error> {
    effects
        .iter()
        .map(|x| serde_dynamo::to_attribute_value(x).map_err(|e| Error::Encode(e.to_string())))
        .collect()
}
