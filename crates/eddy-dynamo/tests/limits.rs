//! Row writes at DynamoDB's limits. A write that would exceed a
//! transaction's 100 items or 4 MB commits a prefix of the row's events
//! with their effects and moves the checkpoints to it; the next write takes
//! the rest, and the outbox keeps the commit order. What no split can fit
//! (one event's effects, the row itself) fails with an error naming the
//! row and the limit, and a checkpoint map that is full refuses new
//! instances only.

use std::sync::{Arc, Mutex};

use eddy_dynamo::{
    AttributeValue, BoxError, Effect, EffectCommit, EffectEvent, EventItem, RebuildInstances,
};

use crate::common::TestTable;
use crate::freight::{shipment, Freight, NoticesFn, ShipmentNotice, ShipmentSummary, WeighEvent};
use crate::long_catch_up;
use crate::multi::{append, raw, scan_id, scanned, session_id, summary, weighed, Shipments};

/// The freight projection whose outbox leaves `notices` of each applied
/// event.
fn shipments(f: &Freight, notices: NoticesFn) -> Shipments {
    let outbox = eddy_dynamo::Outbox::new(&f.summaries)
        .and_then(|o| o.with_index("gsi1"))
        .unwrap();
    let outbox: Arc<dyn EffectCommit> = Arc::new(outbox);
    f.projection_with(Some((outbox, notices))).unwrap()
}

/// One notice per applied event.
fn one_each(event: &EffectEvent<'_>, next: Option<&ShipmentSummary>) -> Vec<ShipmentNotice> {
    crate::multi_props::every_event(event, next)
}

/// One notice of about 100 KB per applied weighing.
fn heavy(event: &EffectEvent<'_>, next: Option<&ShipmentSummary>) -> Vec<ShipmentNotice> {
    let mut notices = one_each(event, next);
    for notice in &mut notices {
        notice.kind = format!("{} {}", notice.kind, "w".repeat(100_000));
    }
    notices
}

/// One notice of 410 KB: over the item limit on its own.
fn oversized(event: &EffectEvent<'_>, next: Option<&ShipmentSummary>) -> Vec<ShipmentNotice> {
    let mut notices = one_each(event, next);
    for notice in &mut notices {
        notice.kind = "o".repeat(410 * 1024);
    }
    notices
}

/// A hundred notices per applied event: more than a transaction holds
/// beside the row.
fn hundredfold(event: &EffectEvent<'_>, next: Option<&ShipmentSummary>) -> Vec<ShipmentNotice> {
    let one = one_each(event, next);
    one.iter().cycle().take(100 * one.len()).cloned().collect()
}

/// Appends `count` weighings of `shipment` to session `session`, 99 at a
/// time (one append's most).
async fn weighings(f: &Freight, session: &str, shipment: &str, count: usize) -> Vec<EventItem> {
    let id = session_id(f, session);
    let mut items = Vec::new();
    let events: Vec<WeighEvent> = (0..count).map(|_| weighed(shipment, 1)).collect();
    for chunk in events.chunks(99) {
        items.extend(append(&f.weighings, &id, chunk).await);
    }
    items
}

/// A consumer that keeps what it was given.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<Effect>>>);

impl Kept {
    fn deliver(
        &self,
    ) -> impl Fn(Effect) -> futures::future::BoxFuture<'static, Result<(), BoxError>> + Send + Sync
    {
        let kept = self.0.clone();
        move |effect| {
            kept.lock().unwrap().push(effect);
            Box::pin(async { Ok(()) })
        }
    }

    /// The versions delivered, with the (revision, position) each was
    /// committed at.
    fn versions(&self) -> Vec<(u64, (u64, u32))> {
        let kept = self.0.lock().unwrap();
        kept.iter()
            .map(|e| (e.version, (e.revision, e.position)))
            .collect()
    }
}

/// Regression (issue 25): 110 applied events with an effect each made one
/// write of 111 items, refused (`TooManyEffects`, not retryable), so the
/// row's records failed forever. Now the row is written in two parts, 99
/// events and their effects, then the rest, each moving the checkpoint
/// as far as it wrote, and the effects reach the consumer in commit order.
pub async fn more_effects_than_a_transaction_holds_are_written_in_parts(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = shipments(&f, one_each);
    let batch = weighings(&f, "w-1", "sh-1", 110).await;
    let before = t.table.request_stats();
    let kept = Kept::default();
    let out = p
        .apply_batch_delivering(batch, &kept.deliver())
        .await
        .unwrap();
    let used = t.table.request_stats() - before;
    let row = &out[0];
    assert!(row.is_applied(), "{:?}", row.first_failure());
    assert_eq!(row.instances[0].applied, (1..=110).collect::<Vec<_>>());
    assert_eq!(row.instances[0].checkpoint, 110);
    assert_eq!((row.enqueued, row.revision), (110, Some(2)), "two writes");
    assert_eq!(used.transactions, 2, "the fewest writes the limits allow");
    assert_eq!(row.state.as_ref().unwrap().kg, 110);
    let delivered = kept.versions();
    assert_eq!(
        delivered.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        (1..=110).collect::<Vec<_>>(),
        "in commit order"
    );
    assert_eq!(delivered[98].1, (1, 98));
    assert_eq!(delivered[99].1, (2, 0), "the second write's first effect");
}

/// Regression (issue 25): effects that total more than a transaction's
/// 4 MB were sent as one write, which DynamoDB refuses (and the embedded
/// table accepted). Now the write splits where the total would pass 4 MB.
pub async fn effects_over_4_mb_are_written_in_parts(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = shipments(&f, heavy);
    let batch = weighings(&f, "w-1", "sh-1", 50).await;
    let before = t.table.request_stats();
    let out = p.apply_batch(batch).await.unwrap();
    let used = t.table.request_stats() - before;
    assert!(out[0].is_applied(), "{:?}", out[0].first_failure());
    assert_eq!((out[0].enqueued, out[0].instances[0].checkpoint), (50, 50));
    // About 100 KB each: 41 fit beside the row in 4 MB.
    assert_eq!(used.transactions, 2);
    assert_eq!(p.pending(&shipment("sh-1")).await.unwrap().effects, 50);
}

/// What no split can fit fails the row, not retryably, naming the row and
/// the limit; nothing is written.
pub async fn what_cannot_be_split_fails_naming_the_row_and_the_limit(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let cases: [(NoticesFn, &str, &str); 2] = [
        (oversized, "sh-big", "400 KB"),
        (hundredfold, "sh-many", "99"),
    ];
    for (notices, id, limit) in cases {
        let p = shipments(&f, notices);
        let batch = weighings(&f, &format!("w-{id}"), id, 1).await;
        let out = p.apply_batch(batch).await.unwrap();
        let error = out[0].first_failure().expect("the row fails");
        assert!(!error.is_retryable(), "{error}");
        let message = error.to_string();
        assert!(message.contains(id) && message.contains(limit), "{message}");
        assert!(raw(&f, id).await.is_none(), "nothing written");
    }
    // The row itself over 400 KB: a known scan instance, a row of some
    // 30 KB of checkpoints, and a scan whose location is 395 KB.
    let p = shipments(&f, one_each);
    let scans = scan_id(&f, "sh-huge");
    p.apply_batch(append(&f.scans, &scans, &[scanned("A")]).await)
        .await
        .unwrap();
    let mut item = raw(&f, "sh-huge").await.unwrap();
    if let Some(AttributeValue::M(map)) = item.get_mut("checkpoints") {
        for i in 0..1000 {
            map.insert(
                format!("weigh#sessionId=w-{i:05}"),
                AttributeValue::N("1".into()),
            );
        }
    }
    t.table.put_item(eddy_dynamo::Put::new(item)).await.unwrap();
    let huge = scanned(&"l".repeat(395_000));
    let batch = append(&f.scans, &scans, &[huge]).await;
    let out = p.apply_batch(batch).await.unwrap();
    let error = out[0].first_failure().expect("the row fails");
    assert_eq!(error.code(), "LimitExceeded");
    assert!(!error.is_retryable());
    let message = error.to_string();
    assert!(
        message.contains("sh-huge") && message.contains("400 KB"),
        "{message}"
    );
}

/// Regression (issue 25): a row fed by thousands of instances grew its
/// checkpoint map past 400 KB, and every write of the row failed. The map
/// is bounded by the item limit; at the limit an instance the row does not
/// know yet fails on its own (`LimitExceeded`, naming the map), while the
/// instances it knows still apply. Measured here: a freight shipment holds
/// this many weighing sessions named `w-00001` … (the figure DESIGN.md
/// quotes).
async fn a_full_checkpoint_map_refuses_new_instances_only(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = shipments(&f, one_each);
    let first = weighings(&f, "w-00000", "sh-1", 1).await;
    p.apply_batch(first).await.unwrap();
    let mut item = raw(&f, "sh-1").await.unwrap();
    // Fill the map with sessions at checkpoint 1 until one more would not
    // fit: the capacity of this row. (A map element costs one byte, its
    // name and its value.)
    let one = AttributeValue::N("1".into());
    let mut size = eddy_dynamo::item_size(&item);
    let mut held = 1;
    if let Some(AttributeValue::M(map)) = item.get_mut("checkpoints") {
        loop {
            let name = format!("weigh#sessionId=w-{held:05}");
            let grown = size + 1 + name.len() + eddy_dynamo::value_size(&one);
            if grown > eddy_dynamo::MAX_ITEM_SIZE {
                break;
            }
            map.insert(name, one.clone());
            size = grown;
            held += 1;
        }
    }
    assert_eq!(eddy_dynamo::item_size(&item), size);
    eprintln!("a shipment row holds {held} weighing sessions");
    assert!((14_000..16_000).contains(&held), "{held}");
    t.table.put_item(eddy_dynamo::Put::new(item)).await.unwrap();

    // A known instance and new ones (whose entries are longer than the room
    // left) in one batch, one of them folded before the known one.
    let mut batch = weighings(&f, "w-00000", "sh-1", 1).await;
    batch.extend(weighings(&f, "w-newcomer", "sh-1", 1).await);
    batch.extend(weighings(&f, "a-newcomer-first", "sh-1", 1).await);
    let out = p.apply_batch(batch).await.unwrap();
    let row = &out[0];
    assert!(row.written, "the known instance applies");
    let known = row
        .instances
        .iter()
        .find(|i| i.instance.to_string() == "sessionId=w-00000")
        .unwrap();
    assert_eq!((known.applied.clone(), known.checkpoint), (vec![2], 2));
    // A refused instance never applies, so the instances after it do not
    // wait for it, even with removal declared.
    for id in ["sessionId=w-newcomer", "sessionId=a-newcomer-first"] {
        let new = row
            .instances
            .iter()
            .find(|i| i.instance.to_string() == id)
            .unwrap();
        let error = new.failure.as_ref().expect("a new instance is refused");
        assert_eq!(error.code(), "LimitExceeded");
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("checkpoint"), "{error}");
    }
    assert_eq!(summary(&f, "sh-1").await.kg, 2);
}

/// Catch-up and rebuild over 120 events with an effect each: the fewest
/// writes the limits allow (99 + 21), in order.
pub async fn catch_up_and_rebuild_split_as_a_delivery_does(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = shipments(&f, one_each);
    let first = weighings(&f, "w-1", "sh-1", 1).await;
    p.apply_batch(first).await.unwrap();
    weighings(&f, "w-1", "sh-1", 120).await;
    let before = t.table.request_stats();
    let out = p.catch_up(shipment("sh-1")).await.unwrap();
    let used = t.table.request_stats() - before;
    assert_eq!(out.instances[0].applied.len(), 120);
    assert_eq!(out.instances[0].checkpoint, 121);
    assert_eq!(used.transactions, 2);
    assert_eq!(p.pending(&shipment("sh-1")).await.unwrap().effects, 121);

    // A rebuild from the same session commits no effect again (the row
    // had applied all 121 events): one put.
    let instances = RebuildInstances::new().add("weigh", session_id(&f, "w-1"));
    let before = t.table.request_stats();
    let out = p.rebuild(shipment("sh-1"), &instances).await.unwrap();
    let used = t.table.request_stats() - before;
    assert_eq!(out.instances[0].applied.len(), 121);
    assert_eq!((out.enqueued, used.transactions), (0, 0));
    assert_eq!(summary(&f, "sh-1").await.kg, 121);

    // From a session the row never applied: 121 effects, 99 + 22.
    weighings(&f, "w-2", "sh-1", 121).await;
    let instances = RebuildInstances::new().add("weigh", session_id(&f, "w-2"));
    let before = t.table.request_stats();
    let out = p.rebuild(shipment("sh-1"), &instances).await.unwrap();
    let used = t.table.request_stats() - before;
    assert_eq!(out.instances[0].applied.len(), 121);
    assert_eq!(out.enqueued, 121);
    assert_eq!(used.transactions, 2, "121 effects: 99 + 22");
    assert_eq!(summary(&f, "sh-1").await.kg, 121);
}

/// Regression (issue 25): a catch-up of 1 000 events took more writes than
/// DynamoDB's limits require. A write that took a prefix kept its count of
/// effect-producing events as the cap of every later write, so after a
/// first write of one event with 50 effects and 49 with one (99 items),
/// every later write took 50 events where 99 fit: 20 writes for the 11
/// the limits allow. Each write now takes the greatest prefix that fits.
pub async fn a_long_catch_up_takes_the_fewest_writes_the_limits_allow(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = long_catch_up::projection(&f, "gsi1");
    long_catch_up::fall_behind(&f, &p).await;
    let before = t.table.request_stats();
    let out = p.catch_up(shipment(long_catch_up::SHIPMENT)).await.unwrap();
    let used = t.table.request_stats() - before;
    assert!(out.is_applied(), "{:?}", out.first_failure());
    let behind = long_catch_up::BEHIND;
    assert_eq!(
        out.instances[0].applied,
        (2..=behind + 1).collect::<Vec<_>>()
    );
    assert_eq!(out.enqueued, long_catch_up::notices_enqueued());
    assert_eq!(
        (used.transactions, used.writes),
        (long_catch_up::fewest_writes(), 0),
        "the fewest writes the limits allow"
    );
    assert_eq!(summary(&f, long_catch_up::SHIPMENT).await.kg, behind + 1);
}

/// The same defect through the 4 MB limit (issue 25): 20 weighings with a
/// notice of 300 KB, then 200 with a small one, in one batch. The first
/// write holds 13 large notices (4 MB), the second the other 7 and 92
/// small ones (99 items); a cap kept from the first write made every
/// later write take 13 events.
pub async fn large_then_small_effects_take_the_fewest_writes(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let p = shipments(&f, large_then_small);
    let batch = weighings(&f, "w-1", "sh-1", 220).await;
    let before = t.table.request_stats();
    let out = p.apply_batch(batch).await.unwrap();
    let used = t.table.request_stats() - before;
    assert!(out[0].is_applied(), "{:?}", out[0].first_failure());
    assert_eq!(
        (out[0].enqueued, out[0].instances[0].checkpoint),
        (220, 220)
    );
    // Sized with room to spare for each item's keys and names: 13 large
    // notices fit 4 MB either way, 14 never do.
    let sized = (1..=220u64).map(|v| (1, if v <= 20 { 301_000 } else { 1_000 }));
    let fewest = long_catch_up::fewest_writes_of(4_000, sized);
    assert_eq!(fewest, 4, "13 large, 7 large + 92 small, 99, 9");
    assert_eq!(used.transactions, fewest);
}

/// A notice of 300 KB for each of the first 20 weighings, then one small
/// notice each.
fn large_then_small(
    event: &EffectEvent<'_>,
    next: Option<&ShipmentSummary>,
) -> Vec<ShipmentNotice> {
    let mut notices = one_each(event, next);
    if event.version <= 20 {
        for notice in &mut notices {
            notice.kind = "w".repeat(300_000);
        }
    }
    notices
}

crate::backend_tests!(
    more_effects_than_a_transaction_holds_are_written_in_parts,
    effects_over_4_mb_are_written_in_parts,
    what_cannot_be_split_fails_naming_the_row_and_the_limit,
    catch_up_and_rebuild_split_as_a_delivery_does,
    a_long_catch_up_takes_the_fewest_writes_the_limits_allow,
    large_then_small_effects_take_the_fewest_writes,
);

// moto refuses items over about 405 000 bytes (DynamoDB: 409 600): the
// capacity is measured on the embedded tables, whose limit is DynamoDB's.
#[tokio::test]
async fn a_full_checkpoint_map_refuses_new_instances_only_on_memory() {
    a_full_checkpoint_map_refuses_new_instances_only(crate::common::table()).await;
}

#[tokio::test]
async fn a_full_checkpoint_map_refuses_new_instances_only_on_sqlite() {
    a_full_checkpoint_map_refuses_new_instances_only(crate::common::sqlite_table()).await;
}
