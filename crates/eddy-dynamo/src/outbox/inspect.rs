//! What is pending, for status reports: a row's effects and its oldest
//! claim ([`Outbox::pending`]), and every row with pending effects found
//! through the outbox index ([`Outbox::pending_rows`]). Reads only.

use std::collections::HashSet;
use std::time::Duration;

use super::failure::LastFailure;
use super::item::{Effect, CLAIMED_UNTIL, ENQUEUED_AT};
use super::Outbox;
use crate::error::Error;
use crate::item::{get_u64, s, Item};
use crate::query::{Query, SortCondition};

/// A claim held on one of a row's effects.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingClaim {
    /// The claimed effect.
    pub effect: Effect,
    /// When the claim expires (epoch milliseconds).
    pub until: u64,
    /// Whether it has expired already (by the outbox's clock): its
    /// drainer crashed or is slow, and the next drain takes it over.
    pub expired: bool,
    /// How long it still holds (zero once expired).
    pub remaining: Duration,
}

/// A row's pending effects.
#[derive(Debug, Clone, PartialEq)]
pub struct RowPending {
    /// The row's table key.
    pub row: Item,
    /// How many effects wait for delivery.
    pub effects: usize,
    /// The next one to deliver.
    pub head: Option<Effect>,
    /// How long ago the head was committed (by the outbox's clock; `None`
    /// for an item written before outbox items recorded it).
    pub head_age: Option<Duration>,
    /// The oldest claim on one of them (the one expiring first), if any
    /// is claimed.
    pub oldest_claim: Option<PendingClaim>,
    /// The head's last failed delivery, if one failed; `parked` when it
    /// failed permanently and the row waits for an operator.
    pub head_failure: Option<LastFailure>,
}

impl RowPending {
    /// Whether the row's head is parked.
    pub fn is_parked(&self) -> bool {
        self.head_failure.as_ref().is_some_and(|f| f.parked)
    }
}

impl Outbox {
    /// The pending effects of one row (its table key): how many, the head,
    /// and the oldest claim.
    pub async fn pending(&self, row_key: &Item) -> Result<RowPending, Error> {
        let (pk, prefix) = self.range_of(row_key)?;
        let query = Query::partition(s(pk)).sort(SortCondition::BeginsWith(s(prefix)));
        let now = (self.clock)();
        let mut pending = RowPending {
            row: row_key.clone(),
            effects: 0,
            head: None,
            head_age: None,
            oldest_claim: None,
            head_failure: None,
        };
        let mut start = None;
        loop {
            let page = self.table.query(query.clone().start_after(start)).await?;
            for item in &page.items {
                pending.effects += 1;
                let until = get_u64(item, CLAIMED_UNTIL);
                if pending.head.is_none() || until.is_some() {
                    let effect = self.decode(item)?;
                    if let Some(until) = until {
                        let older = pending
                            .oldest_claim
                            .as_ref()
                            .is_none_or(|c| until < c.until);
                        if older {
                            pending.oldest_claim = Some(PendingClaim {
                                effect: effect.clone(),
                                until,
                                expired: until <= now,
                                remaining: Duration::from_millis(until.saturating_sub(now)),
                            });
                        }
                    }
                    if pending.head.is_none() {
                        pending.head_age = get_u64(item, ENQUEUED_AT)
                            .map(|at| Duration::from_millis(now.saturating_sub(at)));
                        pending.head = Some(effect);
                        pending.head_failure = LastFailure::of(item);
                    }
                }
            }
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => return Ok(pending),
            }
        }
    }

    /// Every row with pending effects, found through the outbox index
    /// (see [`with_index`](Self::with_index)), in index order. Entries of
    /// an eventually consistent index whose row has nothing pending any
    /// more are left out. Sets the backlog gauges
    /// (`eddy_dynamo_outbox_pending_effects`,
    /// `eddy_dynamo_outbox_oldest_pending_age_seconds`,
    /// `eddy_dynamo_outbox_parked_rows`).
    pub async fn pending_rows(&self) -> Result<Vec<RowPending>, Error> {
        let mut seen = HashSet::new();
        let mut rows = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .table
                .query(self.index_query()?.start_after(start))
                .await?;
            for entry in &page.items {
                if let Some(row) = self.row_of(entry) {
                    if seen.insert(self.range_of(&row)?) {
                        let pending = self.pending(&row).await?;
                        if pending.effects > 0 {
                            rows.push(pending);
                        }
                    }
                }
            }
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => {
                    let effects = rows.iter().map(|r| r.effects).sum();
                    let oldest = rows.iter().filter_map(|r| r.head_age).max();
                    let oldest =
                        oldest.map_or(0, |age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
                    let parked = rows.iter().filter(|r| r.is_parked()).count();
                    crate::metrics::backlog(self.read_model(), effects, oldest, parked);
                    return Ok(rows);
                }
            }
        }
    }
}
