//! Outbox items: one per effect, keyed after its row so a row's effects
//! are one ordered range.
//!
//! Partition key: the row's partition key value. Sort key:
//! `<row sort key>#$outbox#<revision, 20 digits>#<position, 2 digits>`,
//! where the revision is the one the row write set (every write of a row
//! sets a higher one) and the position is the effect's place in that
//! write: one order per row, across all its sources. Attributes:
//! `__edd_e__` (`<entity type>#outbox`), `rowSk`, `source`, `streamId`,
//! `version`, `effect` (the encoded effect), `enqueuedAt` (epoch ms, by
//! the outbox's clock), the outbox index's keys when one is declared, and
//! while claimed `claimedUntil` (epoch ms) and `claimId`; after a failed
//! delivery `lastErrorCode`, `lastError`, `failedAt`, `failures`, and
//! `parkedAt` while parked (see `failure.rs`). Never the table's TTL
//! attribute.

use serde::de::DeserializeOwned;

use super::{misconfigured, Deliver, DrainReport, Outbox, PendingReport, RowPending};
use crate::app_schema::ENTITY_ATTRIBUTE;
use crate::condition::Condition;
use crate::error::Error;
use crate::event_item::StreamId;
use crate::item::{get_str, get_u64, n, s, AttributeValue, Item};
use crate::projection::{EffectCommit, PendingEffect};
use crate::request::{Put, TableWrite};

/// The most effects one row write commits: a transaction holds 100 items,
/// one of which is the row. A projection whose row has more writes it in
/// parts, splitting between events.
pub const MAX_EFFECTS_PER_WRITE: usize = 99;

pub(crate) const ROW_SK: &str = "rowSk";
pub(crate) const SOURCE: &str = "source";
pub(crate) const STREAM_ID: &str = "streamId";
pub(crate) const VERSION: &str = "version";
pub(crate) const EFFECT: &str = "effect";
pub(crate) const CLAIMED_UNTIL: &str = "claimedUntil";
pub(crate) const CLAIM_ID: &str = "claimId";
pub(crate) const ENQUEUED_AT: &str = "enqueuedAt";
pub(crate) const INDEX: &str = "index";
pub(crate) const LAST_ERROR_CODE: &str = "lastErrorCode";
pub(crate) const LAST_ERROR: &str = "lastError";
pub(crate) const FAILED_AT: &str = "failedAt";
pub(crate) const FAILURES: &str = "failures";
pub(crate) const PARKED_AT: &str = "parkedAt";

/// Every attribute an outbox item may carry besides its keys.
pub(crate) const ATTRIBUTES: &[&str] = &[
    ROW_SK,
    SOURCE,
    STREAM_ID,
    VERSION,
    EFFECT,
    CLAIMED_UNTIL,
    CLAIM_ID,
    ENQUEUED_AT,
    INDEX,
    LAST_ERROR_CODE,
    LAST_ERROR,
    FAILED_AT,
    FAILURES,
    PARKED_AT,
];

/// What separates a row's sort key from its effects' positions.
const OUTBOX_SEPARATOR: &str = "#$outbox#";

/// A committed effect, as a drainer hands it to `deliver`. Consumers
/// deduplicate on `(stream_id, version, index)`: delivery is at least
/// once, and that identity stays an effect's own when its row's revision
/// starts again (a tombstone's TTL expired) or a `rebuild` commits it
/// again under a new revision and position.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// The table key of its row.
    pub row: Item,
    /// The source of the event that produced it.
    pub source: String,
    /// The event's stream instance.
    pub stream_id: StreamId,
    /// The event's version.
    pub version: u64,
    /// The revision of the row write that committed it.
    pub revision: u64,
    /// Its place among that write's effects.
    pub position: u32,
    /// Its place among its event's effects (`(stream_id, version)`).
    pub index: u32,
    /// The effect, encoded.
    pub payload: AttributeValue,
}

impl Effect {
    /// The effect decoded into the outbox's effect type.
    pub fn decode<E: DeserializeOwned>(&self) -> Result<E, Error> {
        serde_dynamo::from_attribute_value(self.payload.clone())
            .map_err(|e| Error::InvalidArgument(format!("an outbox effect does not decode: {e}")))
    }
}

impl Outbox {
    /// The transaction items that commit `effects`, in order, with the
    /// write of row `row_key` that sets `revision`: one put per effect,
    /// on the condition that no item is at its key. More than
    /// [`MAX_EFFECTS_PER_WRITE`] is [`Error::TooManyEffects`].
    pub fn commit_items(
        &self,
        row_key: &Item,
        revision: u64,
        effects: &[PendingEffect],
    ) -> Result<Vec<TableWrite>, Error> {
        let (pk, row_sk) = self.row_parts(row_key)?;
        if effects.len() > MAX_EFFECTS_PER_WRITE {
            return Err(Error::TooManyEffects {
                row: format!("{pk}|{row_sk}"),
                count: effects.len(),
            });
        }
        let (pk_name, sk_name) = super::string_key(self.table.schema())?;
        let table = self.table.schema().name.clone();
        let mut writes = Vec::with_capacity(effects.len());
        let now = (self.clock)();
        let mut index = 0u32;
        for (position, effect) in effects.iter().enumerate() {
            // An event's effects are next to each other in a write.
            let same_event = position > 0
                && effects[position - 1].stream_id == effect.stream_id
                && effects[position - 1].version == effect.version;
            index = if same_event { index + 1 } else { 0 };
            let sk = format!("{row_sk}{OUTBOX_SEPARATOR}{revision:020}#{position:02}");
            let mut item = Item::from([
                (pk_name.clone(), s(pk.clone())),
                (sk_name.clone(), s(sk.clone())),
                (ENTITY_ATTRIBUTE.to_owned(), s(self.marker.clone())),
                (ROW_SK.to_owned(), s(row_sk.clone())),
                (SOURCE.to_owned(), s(effect.source.clone())),
                (STREAM_ID.to_owned(), s(effect.stream_id.to_string())),
                (VERSION.to_owned(), n(effect.version)),
                (EFFECT.to_owned(), effect.payload.clone()),
                (ENQUEUED_AT.to_owned(), n(now)),
                (INDEX.to_owned(), n(index)),
            ]);
            if let Some(index) = &self.index {
                item.insert(index.partition.clone(), s(self.index_partition.clone()));
                if let Some(sort) = &index.sort {
                    item.insert(sort.clone(), s(format!("{pk}{OUTBOX_SEPARATOR}{sk}")));
                }
            }
            let put = Put::new(item).when(Condition::not_exists(pk_name.clone()));
            writes.push(TableWrite::new(table.clone(), put));
        }
        Ok(writes)
    }

    /// A row key's partition and sort key values (strings).
    pub(crate) fn row_parts(&self, row_key: &Item) -> Result<(String, String), Error> {
        let (pk, sk) = &self.row_key;
        match (get_str(row_key, pk), get_str(row_key, sk)) {
            (Some(p), Some(s)) => Ok((p.to_owned(), s.to_owned())),
            _ => Err(Error::InvalidArgument(format!(
                "an outbox row key holds the string attributes {pk} and {sk}"
            ))),
        }
    }

    /// The outbox table key of a row's effects range: its partition, and
    /// the prefix of their sort keys.
    pub(crate) fn range_of(&self, row_key: &Item) -> Result<(String, String), Error> {
        let (pk, row_sk) = self.row_parts(row_key)?;
        Ok((pk, format!("{row_sk}{OUTBOX_SEPARATOR}")))
    }

    /// The outbox table key of an item.
    pub(crate) fn key_of(&self, item: &Item) -> Result<Item, Error> {
        self.table
            .schema()
            .key
            .extract(item)
            .ok_or_else(|| misconfigured("an outbox item lacks its key".to_owned()))
    }

    /// The row key an outbox item belongs to, or `None` when the item is
    /// not one of this outbox's.
    pub(crate) fn row_of(&self, item: &Item) -> Option<Item> {
        if get_str(item, ENTITY_ATTRIBUTE) != Some(self.marker.as_str()) {
            return None;
        }
        let (pk_name, _) = super::string_key(self.table.schema()).ok()?;
        let (pk, sk) = &self.row_key;
        Some(Item::from([
            (pk.clone(), s(get_str(item, &pk_name)?)),
            (sk.clone(), s(get_str(item, ROW_SK)?)),
        ]))
    }

    /// Decodes a stored outbox item.
    pub(crate) fn decode(&self, item: &Item) -> Result<Effect, Error> {
        let bad = |what: &str| Error::ItemDecode {
            entity: self.marker.clone(),
            message: format!("an outbox item has no valid {what}"),
        };
        let row = self.row_of(item).ok_or_else(|| bad("row"))?;
        let (_, sk_name) = super::string_key(self.table.schema())?;
        let sk = get_str(item, &sk_name).ok_or_else(|| bad("sort key"))?;
        let mut tail = sk.rsplit('#');
        let position = tail.next().and_then(|p| p.parse().ok());
        let revision = tail.next().and_then(|r| r.parse().ok());
        let stream_id = get_str(item, STREAM_ID).and_then(|t| t.parse::<StreamId>().ok());
        let position: Option<u32> = position;
        // Items committed before the index was kept: one effect per event
        // was the common case, and the position is the best guess left.
        let index = match get_u64(item, INDEX) {
            Some(index) => u32::try_from(index).ok(),
            None => position,
        };
        Ok(Effect {
            row,
            source: get_str(item, SOURCE).ok_or_else(|| bad(SOURCE))?.to_owned(),
            stream_id: stream_id.ok_or_else(|| bad(STREAM_ID))?,
            version: get_u64(item, VERSION).ok_or_else(|| bad(VERSION))?,
            revision: revision.ok_or_else(|| bad("revision"))?,
            position: position.ok_or_else(|| bad("position"))?,
            index: index.ok_or_else(|| bad(INDEX))?,
            payload: item.get(EFFECT).cloned().ok_or_else(|| bad(EFFECT))?,
        })
    }
}

#[async_trait::async_trait]
impl EffectCommit for Outbox {
    fn commit_items(
        &self,
        row_key: &Item,
        revision: u64,
        effects: &[PendingEffect],
    ) -> Result<Vec<TableWrite>, Error> {
        Outbox::commit_items(self, row_key, revision, effects)
    }

    async fn drain(&self, row_key: &Item, deliver: &dyn Deliver) -> Result<DrainReport, Error> {
        Outbox::drain(self, row_key, deliver).await
    }

    async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error> {
        Outbox::drain_pending(self, deliver).await
    }

    async fn pending(&self, row_key: &Item) -> Result<RowPending, Error> {
        Outbox::pending(self, row_key).await
    }

    async fn pending_rows(&self) -> Result<Vec<RowPending>, Error> {
        Outbox::pending_rows(self).await
    }

    async fn unpark(&self, row_key: &Item) -> Result<Option<super::Parked>, Error> {
        Outbox::unpark(self, row_key).await
    }

    async fn drop_parked(&self, row_key: &Item, effect: &Effect) -> Result<bool, Error> {
        Outbox::drop_parked(self, row_key, effect).await
    }
}
