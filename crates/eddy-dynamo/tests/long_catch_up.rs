//! A long catch-up of one row, shared by `tests/limits.rs` (the write
//! count) and `benches/catch_up.rs` (its time): a shipment row that knows
//! one weighing session, then 1 000 more weighings of that session for
//! `catch_up` to apply, each leaving notices in the outbox. The first of
//! them leaves 50 (a notice per parcel, say), every other one a single
//! notice, so the writes cannot all take the same number of events; the
//! fewest writes DynamoDB's limits allow is computed here from the notices,
//! not assumed.

use std::sync::Arc;

use eddy_dynamo::{EffectCommit, EffectEvent, MultiProjection, Outbox, MAX_EFFECTS_PER_WRITE};

use crate::freight::{Freight, ShipmentKey, ShipmentNotice, ShipmentSummary, WeighEvent};

/// The shipment caught up.
pub const SHIPMENT: &str = "sh-1";
/// The weighings the catch-up applies.
pub const BEHIND: u64 = 1_000;
/// The version of the catch-up's first weighing (the row has the first).
const FIRST: u64 = 2;
/// The notices the catch-up's first weighing leaves.
const MANY: usize = 50;

/// The shipment projection with an outbox (listed by `index`) whose
/// notices are [`notices`].
pub fn projection(f: &Freight, index: &str) -> MultiProjection<ShipmentSummary, ShipmentKey> {
    let outbox = Outbox::new(&f.summaries)
        .and_then(|o| o.with_index(index))
        .expect("outbox");
    let outbox: Arc<dyn EffectCommit> = Arc::new(outbox);
    f.projection_with(Some((outbox, notices)))
        .expect("projection")
}

/// How many notices the weighing at `version` leaves.
fn notices_at(version: u64) -> usize {
    if version == FIRST {
        MANY
    } else {
        1
    }
}

/// [`notices_at`] notices of about 20 bytes each: a write of 100 items
/// stays far under 4 MB, so the 100 items are the limit that binds.
pub fn notices(event: &EffectEvent<'_>, next: Option<&ShipmentSummary>) -> Vec<ShipmentNotice> {
    let Some(row) = next else {
        return Vec::new();
    };
    (0..notices_at(event.version))
        .map(|n| ShipmentNotice {
            shipment_id: row.shipment_id.clone(),
            kind: format!("weighed {} #{n}", event.version),
        })
        .collect()
}

/// The notices the catch-up enqueues.
pub fn notices_enqueued() -> usize {
    (FIRST..FIRST + BEHIND).map(notices_at).sum()
}

/// The fewest writes DynamoDB's limits allow for the catch-up (its
/// notices are small: 100 items are far under 4 MB).
pub fn fewest_writes() -> u64 {
    let small = 1_024;
    let notices = (FIRST..FIRST + BEHIND).map(notices_at);
    fewest_writes_of(small, notices.map(|n| (n, n * small)))
}

/// The fewest writes DynamoDB's limits allow for events leaving
/// `(effect items, their bytes)` each, in order, beside a row of at most
/// `row_bytes`: each write holds the row and at most 99 effect items,
/// 4 MB together, and an event's effects are never split, so events fill
/// a write in order until the next one's effects do not fit (filling
/// every write as far as it goes is the fewest for a sequence cut into
/// runs).
pub fn fewest_writes_of(row_bytes: usize, events: impl IntoIterator<Item = (usize, usize)>) -> u64 {
    let budget = eddy_dynamo::MAX_TRANSACTION_SIZE - row_bytes;
    let (mut writes, mut items, mut bytes) = (0, 0, 0);
    for (count, size) in events.into_iter().filter(|(count, _)| *count > 0) {
        assert!(
            count <= MAX_EFFECTS_PER_WRITE && size <= budget,
            "an event fits one write"
        );
        if count > items || size > bytes {
            writes += 1;
            (items, bytes) = (MAX_EFFECTS_PER_WRITE, budget);
        }
        items -= count;
        bytes -= size;
    }
    writes
}

/// Writes the shipment row with its session's first weighing, then
/// appends the [`BEHIND`] weighings a catch-up of the row applies.
pub async fn fall_behind(f: &Freight, p: &MultiProjection<ShipmentSummary, ShipmentKey>) {
    let session = f.weighings.id([("sessionId", "w-1")]).expect("id");
    let weighing = WeighEvent::Weighed {
        shipment_id: SHIPMENT.into(),
        kg: 1,
    };
    f.weighings
        .append(&session, std::slice::from_ref(&weighing), 0)
        .await
        .expect("append");
    let first = f
        .weighings
        .read_items_range(&session, 1, 1)
        .await
        .expect("read");
    let out = p.apply_batch(first).await.expect("apply");
    assert!(out[0].is_applied(), "{:?}", out[0].first_failure());
    let behind = vec![weighing; BEHIND as usize];
    let mut at = 1;
    // 99 events per append: one transaction's most beside the stream head.
    for chunk in behind.chunks(99) {
        f.weighings
            .append(&session, chunk, at)
            .await
            .expect("append");
        at += chunk.len() as u64;
    }
}
