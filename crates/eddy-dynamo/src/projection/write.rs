//! The write of a planned row: the row (or its tombstone) on the condition
//! that it is still as read, with the outbox items of its effects, held to
//! DynamoDB's limits (`limits.rs`) before anything is sent.

use super::core::{ReadRow, RowCore, RowWork};
use super::fold::RowPlan;
use super::limits::{events_that_fit, fits, Limits, ITEM_LIMIT, TRANSACTION_LIMIT};
use crate::app_schema::ENTITY_ATTRIBUTE;
use crate::condition::Condition;
use crate::error::{Error, TableError};
use crate::item::{item_size, n, s, Item, MAX_ITEM_SIZE};
use crate::outbox::MAX_EFFECTS_PER_WRITE;
use crate::request::{Put, TableWrite, TransactWriteItem};
use crate::table::Table;
use crate::tombstone::{tombstone_marker, REVISION_NAME_ATTRIBUTE};

/// A plan held to DynamoDB's limits.
pub(crate) enum Fit {
    /// The writes: the row's put first, then its effects' items.
    Writes(Vec<TableWrite>),
    /// Too large: plan again within these limits.
    Again(Limits),
}

impl<M, K> RowCore<M, K>
where
    M: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
    K: serde::Serialize + Send + Sync + 'static,
{
    /// The writes of a planned row if they fit one write (100 items, 4 MB
    /// together, 400 KB each), or the limits to plan it again within: a
    /// prefix of its effect-producing events, or no new checkpoint entries
    /// when they make the row too large. What no split fits is an error.
    pub(crate) fn fit(
        &self,
        work: &RowWork<M, K>,
        plan: &RowPlan<M>,
        read: &ReadRow,
        limits: &Limits,
    ) -> Result<Fit, Error> {
        let put = self.row_put(work, plan, read)?;
        let row_size = item_size(&put.item);
        if row_size > MAX_ITEM_SIZE {
            if limits.refuse_new.is_none() && plan.new_slots {
                return Ok(Fit::Again(Limits {
                    refuse_new: Some(row_size),
                    ..*limits
                }));
            }
            return Err(Error::LimitExceeded {
                row: work.id.clone(),
                what: "the row item (its state, checkpoints and revision)".into(),
                size: row_size,
                limit: ITEM_LIMIT,
            });
        }
        let table = self.read_model.table().schema().name.clone();
        let mut writes = vec![TableWrite::new(table, put)];
        if plan.effects.is_empty() {
            return Ok(Fit::Writes(writes));
        }
        let (Some(outbox), Some(revision)) = (&self.outbox, plan.revision) else {
            return Err(Error::InvalidArgument(format!(
                "projection {} produced effects without an outbox and a revision",
                self.name
            )));
        };
        // Sized in commits of at most 99 (the outbox refuses more), whose
        // items are the same size wherever they fall.
        let mut effects = Vec::with_capacity(plan.effects.len());
        for chunk in plan.effects.chunks(MAX_EFFECTS_PER_WRITE) {
            effects.extend(outbox.commit_items(&work.key, revision, chunk)?);
        }
        let sizes: Vec<usize> = effects.iter().map(write_size).collect();
        if fits(row_size, &sizes) {
            writes.extend(effects);
            return Ok(Fit::Writes(writes));
        }
        match events_that_fit(&plan.effects, &sizes, row_size) {
            0 => Err(self.unsplittable(work, plan, &sizes, row_size)),
            events => Ok(Fit::Again(Limits {
                cap: Some(events),
                ..*limits
            })),
        }
    }

    /// Why the first effect-producing event of a plan fits no write.
    fn unsplittable(
        &self,
        work: &RowWork<M, K>,
        plan: &RowPlan<M>,
        sizes: &[usize],
        row_size: usize,
    ) -> Error {
        let first = &plan.effects[0];
        let count = plan
            .effects
            .iter()
            .take_while(|e| e.version == first.version && e.stream_id == first.stream_id)
            .count();
        let event = format!(
            "event {} of stream instance {}",
            first.version, first.stream_id
        );
        if count > MAX_EFFECTS_PER_WRITE {
            return Error::TooManyEffects {
                row: work.id.clone(),
                count,
            };
        }
        match sizes[..count].iter().find(|s| **s > MAX_ITEM_SIZE) {
            Some(size) => Error::LimitExceeded {
                row: work.id.clone(),
                what: format!("an outbox effect of {event}"),
                size: *size,
                limit: ITEM_LIMIT,
            },
            None => Error::LimitExceeded {
                row: work.id.clone(),
                what: format!("the row with the outbox effects of {event}"),
                size: row_size + sizes[..count].iter().sum::<usize>(),
                limit: TRANSACTION_LIMIT,
            },
        }
    }

    /// The put of a planned row: its state (or its tombstone), its slots
    /// as planned and the next revision, on the condition that the row is
    /// still as read.
    fn row_put(
        &self,
        work: &RowWork<M, K>,
        plan: &RowPlan<M>,
        read: &ReadRow,
    ) -> Result<Put, Error> {
        let mut item = if plan.removed {
            self.tombstone(&work.key)
        } else {
            self.read_model.to_item(&plan.state)?
        };
        if work
            .key
            .iter()
            .any(|(name, value)| item.get(name) != Some(value))
        {
            return Err(Error::InvalidArgument(format!(
                "projection {}: the row state must keep the key attributes of row {}",
                self.name, work.id
            )));
        }
        self.slots.copy(&plan.slots, &mut item);
        let pk = self.read_model.table().schema().key.partition.name.clone();
        let condition = match (read.item(), &self.revision) {
            (None, _) => Condition::not_exists(pk),
            (Some(_), Some(revision)) => match plan.revision_read {
                Some(value) => Condition::eq(revision.field.clone(), n(value)),
                None => Condition::exists(pk).and(Condition::absent(revision.field.clone())),
            },
            (Some(read), None) => Condition::exists(pk).and(self.slots.guard(read)),
        };
        if let (Some(revision), Some(next)) = (&self.revision, plan.revision) {
            item.insert(revision.field.clone(), n(next));
        }
        Ok(Put::new(item).when(condition))
    }

    /// The tombstone of a removed row: its key and the marker; the slots
    /// and revision are added like a row's.
    fn tombstone(&self, key: &Item) -> Item {
        let mut item = key.clone();
        item.insert(
            ENTITY_ATTRIBUTE.to_owned(),
            s(tombstone_marker(self.read_model.entity_type())),
        );
        if let Some(revision) = &self.revision {
            // So a plain `Entity::create` over the tombstone moves it.
            item.insert(
                REVISION_NAME_ATTRIBUTE.to_owned(),
                s(revision.field.clone()),
            );
        }
        let ttl = self.removal.as_ref().and_then(|r| r.ttl);
        let attribute = self.read_model.table().schema().ttl_attribute.clone();
        if let (Some(ttl), Some(attribute)) = (ttl, attribute) {
            let expires = chrono::Utc::now()
                .timestamp()
                .saturating_add(ttl.as_secs() as i64);
            item.insert(attribute, n(expires));
        }
        item
    }
}

/// The item a row's writes put first: the row.
pub(crate) fn row_item(writes: &[TableWrite]) -> Option<&Item> {
    match writes.first().map(|w| &w.item) {
        Some(TransactWriteItem::Put(put)) => Some(&put.item),
        _ => None,
    }
}

/// The size a write counts toward a transaction's 4 MB: a put's item.
fn write_size(write: &TableWrite) -> usize {
    match &write.item {
        TransactWriteItem::Put(put) => item_size(&put.item),
        TransactWriteItem::Update(update) => item_size(&update.key),
        TransactWriteItem::Delete(delete) => item_size(&delete.key),
        TransactWriteItem::ConditionCheck(check) => item_size(&check.key),
    }
}

/// Writes a row: one `PutItem`, or one `TransactWriteItems` with its outbox
/// items, where a failed condition on the row (the first item) is a lost
/// race like a failed `PutItem`.
pub(crate) async fn write_row(table: &dyn Table, items: Vec<TableWrite>) -> Result<(), TableError> {
    if let [TableWrite {
        item: TransactWriteItem::Put(put),
        ..
    }] = items.as_slice()
    {
        return table.put_item(put.clone()).await;
    }
    // The outbox items may be in another table of the row table's database.
    match table.transact_write_tables(items).await {
        Err(TableError::TransactionCanceled { mut reasons })
            if reasons.first().is_some_and(|r| r.is_condition_failure()) =>
        {
            Err(TableError::ConditionalCheckFailed {
                item: reasons.swap_remove(0).item.map(Box::new),
            })
        }
        other => other,
    }
}
