//! Removals beside failures: a transient fault must not change what a
//! delivery makes of a row. Each case feeds one batch to two read models
//! of the freight scenario over the same events, one behind a table that
//! fails the chosen call, and retries the faulty one as Lambda would (the
//! batch again, until no record fails); both must end the same.

use std::sync::Arc;

use eddy_dynamo::{EventItem, Item, RowOutcome};

use crate::common::TestTable;
use crate::faults::{Call, Fault, Faulty};
use crate::freight::{shipment, Freight, OrderEvent, ShipmentSummary};
use crate::multi::{append, order_id, parcels, session_id, weighed, Shipments};

/// The same events folded into two read models: `clean` over the table as
/// it is, `faulty` over the fault wrapper.
pub struct Twin {
    pub events: Freight,
    pub clean: Shipments,
    pub faulty: Shipments,
    pub faults: Arc<Faulty>,
    clean_rows: Freight,
    faulty_rows: Freight,
}

impl Twin {
    pub fn new(t: &TestTable) -> Self {
        let faults = Faulty::new(t.table.clone());
        let events = Freight::new(t.table.clone()).unwrap();
        let clean_rows = Freight::with_read_model(t.table.clone(), "CleanSummary").unwrap();
        let faulty_rows = Freight::with_read_model(faults.clone(), "ShipmentSummary").unwrap();
        Self {
            clean: clean_rows.projection(None).unwrap(),
            faulty: faulty_rows.projection(None).unwrap(),
            events,
            faults,
            clean_rows,
            faulty_rows,
        }
    }

    /// Applies `batch` to both read models, with no fault armed.
    pub async fn both(&self, batch: Vec<EventItem>) {
        for p in [&self.clean, &self.faulty] {
            let out = p.apply_batch(batch.clone()).await.unwrap();
            assert!(out.iter().all(|r| r.is_applied()), "{out:?}");
        }
    }

    /// Feeds `setup` to both read models, then `batch` to the clean one,
    /// and to the faulty one with `fault` armed until it applies; returns
    /// the faulty deliveries' outcomes.
    pub async fn with_fault(
        &self,
        setup: Vec<EventItem>,
        batch: Vec<EventItem>,
        fault: Fault,
    ) -> Vec<Vec<RowOutcome<ShipmentSummary>>> {
        self.both(setup).await;
        self.clean.apply_batch(batch.clone()).await.unwrap();
        self.faults.arm(fault);
        let deliveries = deliver_until_applied(&self.faulty, batch).await;
        assert_eq!(self.faults.hits(), 1, "the fault struck");
        deliveries
    }

    /// The clean read model's view of a shipment.
    pub async fn clean_view(&self, id: &str) -> View {
        view(&self.clean_rows, self.rows(id).await.0)
    }

    /// The raw items of a shipment: (clean, faulty).
    pub async fn rows(&self, id: &str) -> (Option<Item>, Option<Item>) {
        let get = |f: &Freight| {
            let key = f.summaries.key(&shipment(id)).unwrap();
            let table = self.clean_rows.summaries.table().clone();
            async move { table.get_item(key).await.unwrap() }
        };
        (get(&self.clean_rows).await, get(&self.faulty_rows).await)
    }

    /// Asserts that a shipment is the same in both read models: both live
    /// with the same parts and checkpoints, or both removed with the same
    /// checkpoints.
    pub async fn assert_same(&self, id: &str) {
        let (clean, faulty) = self.rows(id).await;
        assert_eq!(
            view(&self.clean_rows, clean),
            view(&self.faulty_rows, faulty),
            "shipment {id}: clean (left) and faulty (right)"
        );
    }
}

/// What a user sees of a row: its parts and checkpoints, or `None` parts
/// for a tombstone (and its checkpoints).
pub type View = (
    Option<(u64, String, u64)>,
    Option<eddy_dynamo::AttributeValue>,
);

fn view(f: &Freight, item: Option<Item>) -> View {
    let Some(item) = item else {
        return (None, None);
    };
    let checkpoints = item.get("checkpoints").cloned();
    if !f.summaries.owns(&item) {
        return (None, checkpoints);
    }
    let row: ShipmentSummary = f.summaries.decode(item).unwrap();
    (Some((row.parcels, row.location, row.kg)), checkpoints)
}

/// Applies `batch` to the faulty read model until no instance fails (at
/// most 5 deliveries), returning every delivery's outcomes.
pub async fn deliver_until_applied(
    p: &Shipments,
    batch: Vec<EventItem>,
) -> Vec<Vec<RowOutcome<ShipmentSummary>>> {
    let mut deliveries = Vec::new();
    for _ in 0..5 {
        let out = p.apply_batch(batch.clone()).await.unwrap();
        let done = out.iter().all(|r| r.is_applied());
        deliveries.push(out);
        if done {
            return deliveries;
        }
    }
    panic!("still failing after 5 deliveries: {deliveries:?}");
}

fn cancelled(shipment_id: &str) -> OrderEvent {
    OrderEvent::OrderCancelled {
        shipment_id: shipment_id.into(),
    }
}

/// Regression (issue 25): one batch holds a weighing and the cancellation
/// of its shipment; the weighing's gap fill fails with a retryable error.
/// The cancellation was applied beside the failed weighing and wrote the
/// tombstone, and the retry applied the weighing over it. Now a row write
/// never applies a removal while another instance of the row failed: the
/// removal waits with the failed record, and the retry decides both, as
/// the delivery without the fault did.
pub async fn a_failed_instance_holds_back_a_removal_of_its_row(t: TestTable) {
    let twin = Twin::new(&t);
    let f = &twin.events;
    let (o, w) = (order_id(f, "o-1"), session_id(f, "w-1"));
    // sh-1 exists; the session's first weighing is another shipment's, so
    // sh-1's next weighing needs a gap fill.
    let mut setup = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
    setup.extend(append(&f.weighings, &w, &[weighed("sh-2", 5)]).await);
    let mut batch = append(&f.weighings, &w, &[weighed("sh-1", 3)]).await;
    batch.extend(append(&f.orders, &o, &[cancelled("sh-1")]).await);
    let fault = Fault::new(Call::Query, "$stream#Weigh#sessionId=w-1", 1);
    let deliveries = twin.with_fault(setup, batch, fault).await;
    let first = &deliveries[0][0];
    assert!(
        !first.written,
        "nothing is written while an instance failed beside a removal"
    );
    assert!(!first.removed);
    let codes: Vec<&str> = first
        .instances
        .iter()
        .map(|i| i.failure.as_ref().map_or("", |e| e.code()))
        .collect();
    assert_eq!(
        codes,
        ["Deferred", "storage-unavailable"],
        "order, then weigh"
    );
    assert!(first
        .instances
        .iter()
        .all(|i| i.failure.as_ref().unwrap().is_retryable()));
    assert_eq!(deliveries.len(), 2, "the retry applies both");
    twin.assert_same("sh-1").await;
    // What the same delivery makes of the row without the fault: within a
    // write the spec folds sources in declaration order, so the weighing
    // comes after the cancellation and starts the row again (a source
    // allowed to restart removed rows, `restarts_removed_rows`, changes
    // that).
    assert_eq!(twin.clean_view("sh-1").await.0, Some((0, String::new(), 3)));
}

/// Regression (issue 25): the instance that removes the row is the one
/// whose gap fill fails, and a weighing of the same row applied beside it;
/// the retry then removed the row the weighing had written, where the
/// delivery without the fault folded the cancellation first (declaration
/// order) and the weighing started the row again. Now the instances after
/// a failed one in fold order wait with it.
pub async fn instances_after_a_failed_one_wait_when_the_projection_removes(t: TestTable) {
    let twin = Twin::new(&t);
    let f = &twin.events;
    let (o, w) = (order_id(f, "o-1"), session_id(f, "w-1"));
    let mut setup = append(&f.orders, &o, &[parcels("sh-2", 1)]).await;
    setup.extend(append(&f.weighings, &w, &[weighed("sh-1", 4)]).await);
    let mut batch = append(&f.weighings, &w, &[weighed("sh-1", 3)]).await;
    batch.extend(append(&f.orders, &o, &[cancelled("sh-1")]).await);
    let fault = Fault::new(Call::Query, "$stream#Order#orderId=o-1", 1);
    let deliveries = twin.with_fault(setup, batch, fault).await;
    assert!(
        !deliveries[0][0].written,
        "the weighing waits for the failed order"
    );
    twin.assert_same("sh-1").await;
    assert_eq!(
        twin.clean_view("sh-1").await.0,
        Some((0, String::new(), 3)),
        "the spec's fold: the cancellation, then the weighing starts the row again"
    );
}

/// The hazard of DynamoDB Streams (issue 25, beyond the spec): a weighing
/// made before the cancellation, on another stream, so in another shard,
/// arrives after the tombstone and, by the spec's "a later event starts
/// the row again", brings the shipment back holding only its weight. With
/// the order declared as the only source that restarts a removed row,
/// the weighing is recorded in the tombstone's checkpoints and skipped;
/// the order's own next event starts the row again, without it.
pub async fn only_the_declared_sources_start_a_removed_row_again(t: TestTable) {
    use crate::freight::Restart;
    let f = Freight::new(t.table.clone()).unwrap();
    let spec = Freight::with_read_model(t.table.clone(), "SpecSummary").unwrap();
    let guarded = f.projection_restarting(None, Restart::OrdersOnly).unwrap();
    let anyone = spec
        .projection_restarting(None, Restart::AnySource)
        .unwrap();
    let (o, w) = (order_id(&f, "o-1"), session_id(&f, "w-1"));
    let placed = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
    let cancel = append(&f.orders, &o, &[cancelled("sh-1")]).await;
    let late = append(&f.weighings, &w, &[weighed("sh-1", 5)]).await;
    for p in [&guarded, &anyone] {
        p.apply_batch(placed.clone()).await.unwrap();
        p.apply_batch(cancel.clone()).await.unwrap();
    }
    let spec_out = anyone.apply_batch(late.clone()).await.unwrap();
    assert!(
        !spec_out[0].removed,
        "the spec's rule: the weighing starts the row again"
    );
    assert_eq!(
        spec.summaries
            .get(&shipment("sh-1"))
            .await
            .unwrap()
            .unwrap()
            .kg,
        5
    );

    let out = guarded.apply_batch(late.clone()).await.unwrap();
    let weigh = out[0]
        .instances
        .iter()
        .find(|i| i.source == "weigh")
        .unwrap();
    assert_eq!(
        (weigh.after_removal.clone(), weigh.checkpoint),
        (vec![1], 1)
    );
    assert!(weigh.applied.is_empty() && out[0].is_applied());
    assert!(
        out[0].written && out[0].removed,
        "the tombstone records the checkpoint"
    );
    assert_eq!(f.summaries.get(&shipment("sh-1")).await.unwrap(), None);
    // Delivered again, it is already applied.
    let again = guarded.apply_batch(late).await.unwrap();
    assert!(!again[0].written);
    assert_eq!(again[0].instances[0].already_applied, [1]);

    // The order starts the row again; the weighing stays out of it.
    let more = append(&f.orders, &o, &[parcels("sh-1", 3)]).await;
    guarded.apply_batch(more).await.unwrap();
    let row = f.summaries.get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!((row.parcels, row.kg), (3, 0));

    // In one write too: the cancellation, then a weighing (folded after it).
    let cancel = append(&f.orders, &o, &[cancelled("sh-1")]).await;
    let mut both = append(&f.weighings, &w, &[weighed("sh-1", 4)]).await;
    both.extend(cancel);
    let out = guarded.apply_batch(both).await.unwrap();
    assert!(out[0].removed, "stays removed");
    assert_eq!(f.summaries.get(&shipment("sh-1")).await.unwrap(), None);
}

/// Declaring a source that restarts removed rows needs removal.
pub async fn restarting_sources_need_removal(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let refused = eddy_dynamo::MultiProjection::builder("x", f.summaries.clone())
        .initial(crate::multi::empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|_, _| None)
                .evolve(|row, _, _| Ok(row))
                .restarts_removed_rows(true)
        })
        .checkpoints(eddy_dynamo::Checkpoints::map("checkpoints"))
        .revision("revision")
        .build();
    assert_eq!(refused.unwrap_err().code(), "InvalidArgument");
}

/// The second case of the same rule (issue 25): any failure of
/// an instance beside a removal, not only a failed read. A weighing
/// whose `evolve` fails once (not terminally) in a batch with the
/// cancellation of its shipment: the cancellation waits for it, and the
/// retry ends as the same delivery without the failure.
pub async fn an_evolve_failure_holds_back_a_removal_of_its_row(t: TestTable) {
    let f = Freight::new(t.table.clone()).unwrap();
    let clean_rows = Freight::with_read_model(t.table.clone(), "CleanSummary").unwrap();
    let flaky_rows = Freight::with_read_model(t.table.clone(), "ShipmentSummary").unwrap();
    let clean = weighings_failing(&clean_rows, 0);
    let flaky = weighings_failing(&flaky_rows, 1);
    let (o, w) = (order_id(&f, "o-1"), session_id(&f, "w-1"));
    let setup = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
    let mut batch = append(&f.weighings, &w, &[weighed("sh-1", 3)]).await;
    batch.extend(append(&f.orders, &o, &[cancelled("sh-1")]).await);
    for p in [&clean, &flaky] {
        p.apply_batch(setup.clone()).await.unwrap();
    }
    clean.apply_batch(batch.clone()).await.unwrap();
    let deliveries = deliver_until_applied(&flaky, batch).await;
    let first = &deliveries[0][0];
    assert!(!first.written && !first.removed, "{first:?}");
    let codes: Vec<&str> = first
        .instances
        .iter()
        .map(|i| i.failure.as_ref().map_or("", |e| e.code()))
        .collect();
    assert_eq!(codes, ["Deferred", "EvolveFailed"], "order, then weigh");
    assert_eq!(deliveries.len(), 2, "the retry applies both");
    let raw = |rows: &Freight| {
        let key = rows.summaries.key(&shipment("sh-1")).unwrap();
        let table = t.table.clone();
        async move { table.get_item(key).await.unwrap() }
    };
    let want = view(&clean_rows, raw(&clean_rows).await);
    assert_eq!(view(&flaky_rows, raw(&flaky_rows).await), want);
    assert_eq!(want.0, Some((0, String::new(), 3)), "as the spec folds it");
}

/// Orders and weighings into shipments, as the freight projection folds
/// them, with a weighing's `evolve` failing (not terminally) the first
/// `failures` times it runs.
fn weighings_failing(f: &Freight, failures: usize) -> Shipments {
    use eddy_dynamo::{Checkpoints, EvolveError, Removal, Revision, Step};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let left = Arc::new(AtomicUsize::new(failures));
    eddy_dynamo::MultiProjection::builder("shipments", f.summaries.clone())
        .initial(crate::multi::empty)
        .source("order", f.orders.clone(), |s| {
            s.key(|_, e| Some(crate::freight::order_shipment(&e.event)))
                .evolve(|row, e, _| Ok(crate::freight::order_step(row, &e.event)))
        })
        .source("weigh", f.weighings.clone(), move |s| {
            s.key(|_, e| {
                let crate::freight::WeighEvent::Weighed { shipment_id, .. } = &e.event;
                Some(shipment(shipment_id))
            })
            .evolve(move |mut row, e, _| {
                let failing = left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if failing {
                    return Err(EvolveError::new(std::io::Error::other("scale offline")));
                }
                let crate::freight::WeighEvent::Weighed { kg, .. } = &e.event;
                row.kg += kg;
                Ok(Step::Next(row))
            })
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision(Revision::new("revision"))
        .removal(Removal::new())
        .build()
        .unwrap()
}

crate::backend_tests!(
    only_the_declared_sources_start_a_removed_row_again,
    restarting_sources_need_removal,
    a_failed_instance_holds_back_a_removal_of_its_row,
    instances_after_a_failed_one_wait_when_the_projection_removes,
    an_evolve_failure_holds_back_a_removal_of_its_row,
);
