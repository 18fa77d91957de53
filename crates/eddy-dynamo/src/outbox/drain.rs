//! Delivery: per row, claim the head effect, deliver it, delete it, and
//! repeat, so a row's effects reach the consumer in order, at least once.
//!
//! - A claim sets `claimedUntil` (now + `claim_for`) and a random
//!   `claimId`, on the condition that the item exists and is unclaimed or
//!   its claim has expired. A live claim of another drainer stops this
//!   drain (the row is busy); a vanished head is read again.
//! - A delivered effect is deleted whatever its claim says now: if the
//!   claim expired mid-delivery and another drainer took the effect over,
//!   the delete still removes it, so drainers never re-claim one another's
//!   heads in turn. A duplicate of it may then reach the consumer after
//!   the next effect: consumers deduplicate on `(stream id, version)`. The
//!   delete is conditioned on the effect itself (source, stream id,
//!   version, enqueue time), never on its key alone, which a row started
//!   again after its tombstone expired can reuse.
//! - A head that does not decode is released and reported as the row's
//!   failure; it stays at the head. `drain_pending` reports each row's
//!   failure with the row and goes on with the others.
//! - A failed delivery releases the claim (if still ours), records the
//!   failure on the head and leaves the effect there: reported as
//!   undelivered, never an error. A permanent failure (see `failure.rs`)
//!   parks the row instead: reported as parked, and no drain claims its
//!   head until it is unparked or dropped.

use std::collections::HashSet;
use std::future::Future;

use futures::future::BoxFuture;
use futures::StreamExt;

use super::failure::{LastFailure, Parked};
use super::item::{Effect, CLAIMED_UNTIL, CLAIM_ID, PARKED_AT};
use super::Outbox;
use crate::condition::{Comparator, Condition};
use crate::error::{BoxError, Error, TableError};
use crate::item::{n, s, Item};
use crate::query::Query;
use crate::request::{Delete, UpdateItem};
use crate::update::Update;

/// Hands an effect to its consumer: `Ok` once the consumer has it.
/// Implemented by every `Fn(Effect) -> impl Future<Output = Result<(),
/// BoxError>>`.
pub trait Deliver: Send + Sync {
    /// Delivers one effect. A failure that retrying cannot fix is a
    /// [`DeliveryError::permanent`](super::DeliveryError::permanent)
    /// (anywhere in the error's source chain): it parks the row.
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>>;

    /// Moves a parked effect aside (to a dead-letter stream, say) before
    /// an operator drops it from the outbox, exactly once however often it
    /// is called. By default there is nowhere to move it: an error.
    fn dead_letter(
        &self,
        effect: Effect,
        failure: LastFailure,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let _ = (effect, failure);
        Box::pin(async { Err("this consumer has no dead-letter stream".into()) })
    }

    /// Sees the report of each [`drain_pending`](super::Outbox::drain_pending)
    /// pass, once the pass is over: every row with pending effects was
    /// looked at, so its parked rows are all the outbox's parked rows. A
    /// consumer that shows operators what is stuck publishes it here. By
    /// default, nothing.
    fn pass_done<'a>(&'a self, report: &'a PendingReport) -> BoxFuture<'a, ()> {
        let _ = report;
        Box::pin(async {})
    }
}

impl<F, Fut> Deliver for F
where
    F: Fn(Effect) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self(effect))
    }
}

/// An effect a drain could not deliver: it stays at its row's head.
#[derive(Debug)]
pub struct Undelivered {
    /// The effect.
    pub effect: Effect,
    /// Why `deliver` failed.
    pub error: BoxError,
}

/// What draining one row did.
#[derive(Debug, Default)]
pub struct DrainReport {
    /// Effects delivered (and deleted), in order.
    pub delivered: usize,
    /// The head effect whose delivery failed, if one did.
    pub undelivered: Option<Undelivered>,
    /// Whether the drain stopped at a head another drainer holds a live
    /// claim on.
    pub busy: bool,
    /// The head effect, when the row is parked (its delivery failed
    /// permanently, now or before): the drain stopped there.
    pub parked: Option<Parked>,
}

/// What `drain_pending` did over every row with pending effects.
#[derive(Debug, Default)]
pub struct PendingReport {
    /// Rows that had pending effects.
    pub rows: usize,
    /// Effects delivered, over all rows.
    pub delivered: usize,
    /// Rows whose head effect could not be delivered, with why.
    pub undelivered: Vec<Undelivered>,
    /// Rows another drainer was busy with.
    pub busy: usize,
    /// Rows whose head is parked, with why (parked now or before).
    pub parked: Vec<Parked>,
    /// Index entries that named no pending effect any more (the index is
    /// eventually consistent on DynamoDB): skipped.
    pub stale: usize,
    /// Rows whose drain failed (their table key, and why): each row's
    /// failure is its own, and the sweep went on. Their effects stay
    /// pending.
    pub failed: Vec<(Item, Error)>,
}

/// One step of a row's drain.
enum Claimed {
    Head(Item, String),
    Empty,
    Busy,
    /// The head is parked: nobody claims it.
    Parked(Item),
}

impl Outbox {
    /// Delivers the pending effects of one row (its table key, as
    /// `Entity::key` makes it), strictly in order: claim the head, deliver
    /// it, delete it, repeat until none is left, a delivery fails, or
    /// another drainer holds the head.
    pub async fn drain(&self, row_key: &Item, deliver: &dyn Deliver) -> Result<DrainReport, Error> {
        let mut report = DrainReport::default();
        loop {
            let (item, claim) = match self.claim_head(row_key).await? {
                Claimed::Head(item, claim) => (item, claim),
                Claimed::Empty => return Ok(report),
                Claimed::Busy => {
                    report.busy = true;
                    return Ok(report);
                }
                Claimed::Parked(item) => {
                    let failure = LastFailure::of(&item);
                    let effect = self.decode(&item)?;
                    report.parked = failure.map(|failure| Parked { effect, failure });
                    return Ok(report);
                }
            };
            let key = self.key_of(&item)?;
            let effect = match self.decode(&item) {
                Ok(effect) => effect,
                Err(e) => {
                    // It stays at the head (never skipped), unclaimed, so
                    // the next drain reports it at once.
                    self.release(key, claim).await?;
                    return Err(e);
                }
            };
            match deliver.deliver(effect.clone()).await {
                Ok(()) => {
                    self.delete_delivered(key, &item).await?;
                    crate::metrics::delivered(self.read_model());
                    report.delivered += 1;
                }
                Err(error) => {
                    crate::metrics::delivery_failed(self.read_model());
                    let failure = self.record_failure(key, claim, error.as_ref()).await?;
                    if failure.parked {
                        report.parked = Some(Parked { effect, failure });
                    } else {
                        report.undelivered = Some(Undelivered { effect, error });
                    }
                    return Ok(report);
                }
            }
        }
    }

    /// Claims the head effect of a row.
    async fn claim_head(&self, row_key: &Item) -> Result<Claimed, Error> {
        loop {
            let Some(item) = self.head_item(row_key).await? else {
                return Ok(Claimed::Empty);
            };
            if item.contains_key(PARKED_AT) {
                return Ok(Claimed::Parked(item));
            }
            let now = (self.clock)();
            let until =
                now.saturating_add(u64::try_from(self.claim_for.as_millis()).unwrap_or(u64::MAX));
            let claim = format!("{:016x}", fastrand::u64(..));
            let (pk_name, _) = super::string_key(self.table.schema())?;
            let free = Condition::absent(CLAIMED_UNTIL).or(Condition::compare(
                CLAIMED_UNTIL,
                Comparator::Le,
                n(now),
            ));
            let request = UpdateItem::new(
                self.key_of(&item)?,
                Update::new()
                    .set(CLAIMED_UNTIL, n(until))
                    .set(CLAIM_ID, s(claim.clone())),
            )
            .when(
                Condition::exists(pk_name)
                    .and(Condition::absent(PARKED_AT))
                    .and(free),
            );
            match self.table.update_item(request).await {
                Ok(claimed) => return Ok(Claimed::Head(claimed, claim)),
                // Deleted since the query (another drainer delivered it).
                Err(TableError::ConditionalCheckFailed { item: None }) => continue,
                Err(TableError::ConditionalCheckFailed { item: Some(now) }) => {
                    // Parked by the drainer that held it meanwhile.
                    if now.contains_key(PARKED_AT) {
                        return Ok(Claimed::Parked(*now));
                    }
                    return Ok(Claimed::Busy);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Deletes a delivered effect, whatever its claim says now (another
    /// drainer may have taken an expired claim over), but only if the item
    /// at its key is still that effect: a key reused meanwhile (the row
    /// started again at the same revision after its tombstone expired)
    /// holds a newer effect that was never delivered.
    async fn delete_delivered(&self, key: Item, delivered: &Item) -> Result<(), Error> {
        let delete = Delete::new(key).when(self.same_effect(delivered));
        match self.table.delete_item(delete).await {
            Ok(()) | Err(TableError::ConditionalCheckFailed { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives a claim back, if it is still ours.
    async fn release(&self, key: Item, claim: String) -> Result<(), Error> {
        let request = UpdateItem::new(key, Update::new().remove(CLAIMED_UNTIL).remove(CLAIM_ID))
            .when(Condition::eq(CLAIM_ID, s(claim)));
        match self.table.update_item(request).await {
            Ok(_) | Err(TableError::ConditionalCheckFailed { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Drains every row with pending effects, found through the outbox
    /// index (see [`with_index`](Self::with_index)): rows that receive no
    /// further events still get their effects delivered. The index is read
    /// a page at a time; each page's new rows are drained `concurrency` at
    /// a time, each in order. An index entry whose row has nothing pending
    /// any more (an eventually consistent index) is skipped and counted as
    /// stale. A row whose drain fails (a head that does not decode, a
    /// table failure) is reported in [`PendingReport::failed`] and the
    /// sweep goes on; the call fails only when the index cannot be read.
    pub async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error> {
        let query = self.index_query()?;
        let mut seen = HashSet::new();
        let mut report = PendingReport::default();
        let mut start = None;
        loop {
            let page = self.table.query(query.clone().start_after(start)).await?;
            let mut rows = Vec::new();
            for entry in &page.items {
                match self.row_of(entry) {
                    Some(row) if seen.insert(self.range_of(&row)?) => rows.push(row),
                    Some(_) => {}
                    None => report.stale += 1,
                }
            }
            // Built before awaiting: a closure held across the await would
            // keep this future from being `Send`.
            let drains: Vec<BoxFuture<'_, (Item, Result<DrainReport, Error>)>> = rows
                .into_iter()
                .map(|row| {
                    Box::pin(async move {
                        let drained = self.drain(&row, deliver).await;
                        (row, drained)
                    }) as BoxFuture<'_, _>
                })
                .collect();
            let drained: Vec<_> = futures::stream::iter(drains)
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            for (row, drained) in drained {
                match drained {
                    Ok(done) => report.add(done),
                    // One row's failure is its own: the sweep goes on.
                    Err(e) => report.failed.push((row, e)),
                }
            }
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => {
                    deliver.pass_done(&report).await;
                    return Ok(report);
                }
            }
        }
    }
}

/// Index entries read per page.
const PENDING_PAGE: usize = 500;

impl Outbox {
    /// The query of the outbox index's entries, a page at a time.
    pub(crate) fn index_query(&self) -> Result<Query, Error> {
        let index = self.index.as_ref().ok_or_else(|| {
            Error::InvalidArgument(
                "listing rows with pending effects needs the outbox's sparse index: declare it with with_index".into(),
            )
        })?;
        Ok(Query::partition(s(self.index_partition.clone()))
            .on_index(index.name.clone())
            .limit(PENDING_PAGE))
    }
}

impl PendingReport {
    fn add(&mut self, row: DrainReport) {
        if row.delivered == 0 && row.undelivered.is_none() && !row.busy && row.parked.is_none() {
            self.stale += 1;
            return;
        }
        self.rows += 1;
        self.delivered += row.delivered;
        self.busy += usize::from(row.busy);
        self.undelivered.extend(row.undelivered);
        self.parked.extend(row.parked);
    }
}
