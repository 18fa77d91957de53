//! Multi-source projections on the freight scenario: sources, per-instance
//! checkpoints, latest mode, skip, per-instance failures, removal, revision.

use std::sync::Arc;

use eddy_dynamo::{
    get_present, AttributeValue, Checkpoints, EventItem, EventStream, Item, Mode, MultiProjection,
    Removal, Revision, RowOutcome, Step, StreamId,
};
use serde::{de::DeserializeOwned, Serialize};

use crate::common::TestTable;
use crate::freight::{
    shipment, Freight, OrderEvent, ScanEvent, ShipmentKey, ShipmentSummary, WeighEvent,
};

pub type Shipments = MultiProjection<ShipmentSummary, ShipmentKey>;

/// Appends `events` to the instance `id` of `stream` after its current
/// version and returns them as stored.
pub async fn append<E: Serialize + DeserializeOwned>(
    stream: &EventStream<E>,
    id: &StreamId,
    events: &[E],
) -> Vec<EventItem> {
    let at = stream.current_version(id).await.unwrap();
    stream.append(id, events, at).await.unwrap();
    stream
        .read_items_range(id, at + 1, at + events.len() as u64)
        .await
        .unwrap()
}

pub fn parcels(shipment_id: &str, parcels: u64) -> OrderEvent {
    OrderEvent::ParcelAdded {
        shipment_id: shipment_id.into(),
        parcels,
    }
}

pub fn scanned(location: &str) -> ScanEvent {
    ScanEvent::Scanned {
        location: location.into(),
    }
}

pub fn weighed(shipment_id: &str, kg: u64) -> WeighEvent {
    WeighEvent::Weighed {
        shipment_id: shipment_id.into(),
        kg,
    }
}

pub fn order_id(f: &Freight, id: &str) -> StreamId {
    f.orders.id([("orderId", id)]).unwrap()
}
pub fn scan_id(f: &Freight, id: &str) -> StreamId {
    f.scans.id([("shipmentId", id)]).unwrap()
}
pub fn session_id(f: &Freight, id: &str) -> StreamId {
    f.weighings.id([("sessionId", id)]).unwrap()
}

pub fn freight(t: &TestTable) -> Freight {
    Freight::new(t.table.clone()).unwrap()
}

/// The summary of a shipment, which must exist.
pub async fn summary(f: &Freight, id: &str) -> ShipmentSummary {
    f.summaries.get(&shipment(id)).await.unwrap().unwrap()
}

/// The raw item at a shipment's key.
pub async fn raw(f: &Freight, id: &str) -> Option<Item> {
    let key = f.summaries.key(&shipment(id)).unwrap();
    f.summaries.table().get_item(key).await.unwrap()
}

fn map_entries(item: &Item, field: &str) -> Vec<(String, String)> {
    match get_present(item, field) {
        Some(AttributeValue::M(m)) => {
            let mut entries: Vec<_> = m
                .iter()
                .map(|(k, v)| match v {
                    AttributeValue::N(n) => (k.clone(), n.clone()),
                    other => (k.clone(), format!("{other:?}")),
                })
                .collect();
            entries.sort();
            entries
        }
        _ => Vec::new(),
    }
}

fn instance<'a, M>(row: &'a RowOutcome<M>, source: &str) -> &'a eddy_dynamo::InstanceOutcome {
    row.instances
        .iter()
        .find(|i| i.source == source)
        .unwrap_or_else(|| panic!("no instance of {source}"))
}

pub async fn three_sources_fold_into_one_row_with_a_checkpoint_each(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let mut batch = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 7)]).await;
    batch.extend(append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("Hamburg")]).await);
    batch.extend(
        append(
            &f.orders,
            &order_id(&f, "o-1"),
            &[parcels("sh-1", 2), parcels("sh-1", 1)],
        )
        .await,
    );
    let out = p.apply_batch(batch).await.unwrap();
    assert_eq!(out.len(), 1, "one row");
    let row = &out[0];
    assert!(row.written && row.is_applied());
    assert_eq!(
        row.revision,
        Some(1),
        "a new row's first write sets the initial revision"
    );
    // Fold order: sources in declaration order, then stream id.
    let sources: Vec<&str> = row.instances.iter().map(|i| i.source.as_str()).collect();
    assert_eq!(sources, ["order", "scan", "weigh"]);
    assert_eq!(instance(row, "order").applied, [1, 2]);
    let state = row.state.clone().unwrap();
    assert_eq!(
        (state.parcels, state.location.as_str(), state.kg),
        (3, "Hamburg", 7)
    );
    let item = raw(&f, "sh-1").await.unwrap();
    assert_eq!(
        map_entries(&item, "checkpoints"),
        [
            ("order#orderId=o-1".to_owned(), "2".to_owned()),
            ("scan#shipmentId=sh-1".to_owned(), "1".to_owned()),
            ("weigh#sessionId=w-1".to_owned(), "1".to_owned()),
        ]
    );
    assert_eq!(summary(&f, "sh-1").await.revision, 1);
    let known = p.checkpoints(&shipment("sh-1")).await.unwrap();
    assert_eq!(known.len(), 3);

    // Redelivery is recognised per instance; nothing is written.
    let redelivered = f
        .orders
        .read_items_range(&order_id(&f, "o-1"), 1, 2)
        .await
        .unwrap();
    let out = p.apply_batch(redelivered).await.unwrap();
    assert_eq!(instance(&out[0], "order").already_applied, [1, 2]);
    assert!(!out[0].written);
    assert_eq!(out[0].revision, Some(1), "the revision is unchanged");
}

pub async fn one_instance_feeds_many_rows_and_considers_the_others_events(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let o = order_id(&f, "o-1");
    let first = append(&f.orders, &o, &[parcels("sh-1", 1), parcels("sh-2", 5)]).await;
    let out = p.apply_batch(first).await.unwrap();
    assert_eq!(out.len(), 2, "one order, two shipments");
    // Version 3 for sh-1 arrives alone: the gap (version 2, sh-2's) is read
    // and only considered.
    let later = append(&f.orders, &o, &[parcels("sh-1", 10)]).await;
    let out = p.apply_batch(later).await.unwrap();
    assert_eq!(instance(&out[0], "order").applied, [3]);
    assert_eq!(instance(&out[0], "order").checkpoint, 3);
    assert_eq!(out[0].state.as_ref().unwrap().parcels, 11);
    let sh2 = f.summaries.get(&shipment("sh-2")).await.unwrap().unwrap();
    assert_eq!(sh2.parcels, 5);
}

pub async fn latest_mode_applies_the_newest_and_reports_the_older_as_superseded(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let scans = append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("A"), scanned("B"), scanned("C")],
    )
    .await;
    let out = p.apply_batch(scans).await.unwrap();
    let scan = instance(&out[0], "scan");
    assert_eq!(
        (scan.applied.clone(), scan.superseded.clone()),
        (vec![3], vec![1, 2])
    );
    assert_eq!(scan.checkpoint, 3);
    assert_eq!(out[0].state.as_ref().unwrap().location, "C");
    // Nothing is read in latest mode: a later scan alone applies without
    // filling the gap.
    let later = append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("D"), scanned("E")],
    )
    .await;
    let out = p.apply_batch(vec![later[1].clone()]).await.unwrap();
    assert_eq!(instance(&out[0], "scan").applied, [5]);
    assert_eq!(out[0].state.as_ref().unwrap().location, "E");
}

/// Why a scan does not fold.
#[derive(Debug, thiserror::Error)]
#[error("bad scan: {0}")]
pub struct BadScan(String);

/// A scan-only projection whose `evolve` rejects "?" (terminal), skips
/// "-" and fails on "!" (not terminal).
fn picky_scans(f: &Freight) -> Shipments {
    MultiProjection::builder("picky", f.summaries.clone())
        .initial(empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|id, _| id.get("shipmentId").map(shipment))
                .evolve(|mut row, e, _| {
                    let ScanEvent::Scanned { location } = &e.event;
                    match location.as_str() {
                        "?" | "!" => Err(BadScan(location.clone()).into()),
                        "-" => Ok(Step::Skip),
                        _ => {
                            row.location = location.clone();
                            Ok(Step::Next(row))
                        }
                    }
                })
                .terminal(|e: &BadScan| e.0 == "?")
                .mode(Mode::Latest)
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision("revision")
        .build()
        .unwrap()
}

pub fn empty(key: &ShipmentKey) -> ShipmentSummary {
    ShipmentSummary {
        shipment_id: key.shipment_id.clone(),
        parcels: 0,
        location: String::new(),
        kg: 0,
        checkpoints: Default::default(),
        revision: 0,
    }
}

pub async fn latest_mode_falls_back_past_rejections_and_skips(t: TestTable) {
    let f = freight(&t);
    let p = picky_scans(&f);
    let scans = append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("A"), scanned("B"), scanned("-"), scanned("?")],
    )
    .await;
    let out = p.apply_batch(scans).await.unwrap();
    let scan = instance(&out[0], "scan");
    assert_eq!(scan.rejected, [4]);
    assert_eq!(scan.skipped, [3]);
    assert_eq!(scan.applied, [2]);
    assert_eq!(scan.superseded, [1]);
    assert_eq!(
        scan.checkpoint, 4,
        "a rejection moves the checkpoint past it"
    );
    assert_eq!(out[0].state.as_ref().unwrap().location, "B");

    // A skipped newest event above the checkpoint is decided again later.
    let more = append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("C"), scanned("-")],
    )
    .await;
    let out = p.apply_batch(more).await.unwrap();
    let scan = instance(&out[0], "scan");
    assert_eq!(
        (scan.applied.clone(), scan.skipped.clone()),
        (vec![5], vec![6])
    );
    assert_eq!(scan.checkpoint, 5);

    // A failure that is not terminal fails the instance: nothing written.
    let bad = append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("!")]).await;
    let out = p.apply_batch(bad).await.unwrap();
    assert!(!out[0].written && !out[0].is_applied());
    assert_eq!(out[0].first_failure().unwrap().code(), "EvolveFailed");
    assert!(raw(&f, "sh-2").await.is_none());
}

pub async fn skipped_events_alone_never_write_and_never_create_a_row(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let w = session_id(&f, "w-1");
    let tare = append(&f.weighings, &w, &[weighed("sh-1", 0)]).await;
    let out = p.apply_batch(tare.clone()).await.unwrap();
    assert!(!out[0].written && out[0].is_applied());
    assert_eq!(instance(&out[0], "weigh").skipped, [1]);
    assert!(instance(&out[0], "weigh").applied.is_empty());
    assert!(raw(&f, "sh-1").await.is_none(), "skips alone create no row");

    // An existing row: skips leave it and its revision alone.
    let order = append(&f.orders, &order_id(&f, "o-1"), &[parcels("sh-1", 1)]).await;
    p.apply_batch(order).await.unwrap();
    let out = p.apply_batch(tare).await.unwrap();
    assert!(!out[0].written);
    assert_eq!(out[0].revision, Some(1));
    assert_eq!(out[0].state.as_ref().unwrap().parcels, 1, "the row as read");
    let item = raw(&f, "sh-1").await.unwrap();
    assert!(
        !map_entries(&item, "checkpoints")
            .iter()
            .any(|(k, _)| k.starts_with("weigh#")),
        "an instance whose events were all skipped gets no map entry"
    );

    // A mixed write is one write: version 2 applies, the checkpoint covers
    // the skipped version 1 below it.
    let more = append(&f.weighings, &w, &[weighed("sh-1", 4), weighed("sh-1", 0)]).await;
    let out = p.apply_batch(more).await.unwrap();
    let weigh = instance(&out[0], "weigh");
    assert_eq!(weigh.applied, [2]);
    assert_eq!(weigh.skipped, [1, 3]);
    assert_eq!(
        weigh.checkpoint, 2,
        "the checkpoint stops at the last applied event"
    );
    assert_eq!(out[0].revision, Some(2), "one write, one revision step");
    assert_eq!(out[0].state.as_ref().unwrap().kg, 4);
}

/// Why a weighing does not fold.
#[derive(Debug, thiserror::Error)]
#[error("the scale is broken")]
pub struct BrokenScale;

pub async fn one_instance_failure_is_its_own(t: TestTable) {
    let f = freight(&t);
    let p = MultiProjection::builder("fragile", f.summaries.clone())
        .initial(empty)
        .source("order", f.orders.clone(), |s| {
            s.key(|_, e| match &e.event {
                OrderEvent::ParcelAdded { shipment_id, .. }
                | OrderEvent::OrderCancelled { shipment_id } => Some(shipment(shipment_id)),
            })
            .evolve(|mut row, e, _| match &e.event {
                OrderEvent::ParcelAdded { parcels, .. } => {
                    row.parcels += parcels;
                    Ok(row)
                }
                OrderEvent::OrderCancelled { .. } => Err(BrokenScale.into()),
            })
        })
        .source("weigh", f.weighings.clone(), |s| {
            s.key(|_, e| {
                let WeighEvent::Weighed { shipment_id, .. } = &e.event;
                Some(shipment(shipment_id))
            })
            .evolve(|mut row, e, _| {
                let WeighEvent::Weighed { kg, .. } = &e.event;
                if *kg > 1000 {
                    return Err(BrokenScale.into());
                }
                row.kg += kg;
                Ok(row)
            })
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision("revision")
        .build()
        .unwrap();
    let mut batch = append(&f.orders, &order_id(&f, "o-1"), &[parcels("sh-1", 2)]).await;
    batch.extend(
        append(
            &f.weighings,
            &session_id(&f, "w-1"),
            &[weighed("sh-1", 3), weighed("sh-1", 5000)],
        )
        .await,
    );
    let out = p.apply_batch(batch).await.unwrap();
    let row = &out[0];
    assert!(row.written, "the other instance still applies");
    assert!(row.failure.is_none());
    let weigh = instance(row, "weigh");
    assert!(weigh.failure.is_some() && weigh.applied.is_empty());
    assert_eq!(
        weigh.checkpoint, 0,
        "the failed instance's checkpoint is unmoved"
    );
    let state = row.state.clone().unwrap();
    assert_eq!(
        (state.parcels, state.kg),
        (2, 0),
        "none of the failed instance's events"
    );
    let item = raw(&f, "sh-1").await.unwrap();
    assert_eq!(map_entries(&item, "checkpoints").len(), 1);

    // Every instance fails: the row fails, nothing is written.
    let bad = append(
        &f.orders,
        &order_id(&f, "o-1"),
        &[OrderEvent::OrderCancelled {
            shipment_id: "sh-1".into(),
        }],
    )
    .await;
    let out = p.apply_batch(bad).await.unwrap();
    assert!(!out[0].written && !out[0].is_applied());
    assert_eq!(summary(&f, "sh-1").await.revision, 1);
}

/// Regression (issue 25): when every instance of a row failed, nothing was
/// written and the row outcome had no `failure`: a caller that looked at
/// the row saw no reason. Now the row reports `InstancesFailed`, naming the
/// first, and each instance keeps its own.
pub async fn a_row_whose_every_instance_failed_reports_it(t: TestTable) {
    let f = freight(&t);
    let p = picky_scans(&f);
    let bad = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("!")]).await;
    let out = p.apply_batch(bad).await.unwrap();
    assert!(!out[0].written);
    let failure = out[0].failure.as_ref().expect("the row's failure");
    assert_eq!(failure.code(), "InstancesFailed");
    assert!(failure.to_string().contains("bad scan: !"), "{failure}");
    assert!(!failure.is_retryable(), "as its first instance's failure");
    assert_eq!(
        out[0].first_failure().unwrap().code(),
        "EvolveFailed",
        "the first instance's own failure"
    );
}

pub async fn a_removed_row_keeps_a_tombstone_with_its_checkpoints(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let o = order_id(&f, "o-1");
    let placed = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
    p.apply_batch(placed.clone()).await.unwrap();
    let cancel = append(
        &f.orders,
        &o,
        &[OrderEvent::OrderCancelled {
            shipment_id: "sh-1".into(),
        }],
    )
    .await;
    let out = p.apply_batch(cancel).await.unwrap();
    assert!(out[0].written && out[0].removed);
    assert_eq!(out[0].revision, Some(2));
    assert!(out[0].state.is_none());
    let item = raw(&f, "sh-1").await.unwrap();
    let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "__edd_e__",
            "__edd_rev__",
            "checkpoints",
            "pk",
            "revision",
            "sk"
        ]
    );
    assert_eq!(
        item["__edd_e__"],
        AttributeValue::S("ShipmentSummary#tombstone".into())
    );
    assert!(f.summaries.get(&shipment("sh-1")).await.unwrap().is_none());

    // A redelivery can't recreate the row.
    let out = p.apply_batch(placed).await.unwrap();
    assert_eq!(instance(&out[0], "order").already_applied, [1]);
    assert!(!out[0].written);
    assert!(f.summaries.get(&shipment("sh-1")).await.unwrap().is_none());

    // A later event starts again from initial, from the tombstone's
    // checkpoints, with the next revision.
    let again = append(&f.orders, &o, &[parcels("sh-1", 7)]).await;
    let out = p.apply_batch(again).await.unwrap();
    assert_eq!(instance(&out[0], "order").applied, [3]);
    let state = f.summaries.get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!((state.parcels, state.revision), (7, 3));
}

pub async fn revision_initial_sets_the_first_write(t: TestTable) {
    let f = freight(&t);
    let p = MultiProjection::builder("counted", f.summaries.clone())
        .initial(empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|id, _| id.get("shipmentId").map(shipment))
                .evolve(|mut row, e, _| {
                    let ScanEvent::Scanned { location } = &e.event;
                    row.location = location.clone();
                    Ok(row)
                })
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision(Revision::new("revision").initial(0))
        .build()
        .unwrap();
    let first = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("A")]).await;
    assert_eq!(p.apply_batch(first).await.unwrap()[0].revision, Some(0));
    let second = append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("B")]).await;
    assert_eq!(p.apply_batch(second).await.unwrap()[0].revision, Some(1));
}

pub async fn a_declaration_that_does_not_hold_together_is_refused(t: TestTable) {
    let f = freight(&t);
    let no_revision = MultiProjection::builder("x", f.summaries.clone())
        .initial(empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|_, _| None).evolve(|row, _, _| Ok(row))
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .build();
    assert_eq!(no_revision.unwrap_err().code(), "InvalidArgument");
    let no_slot = MultiProjection::builder("x", f.summaries.clone())
        .initial(empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|_, _| None).evolve(|row, _, _| Ok(row))
        })
        .checkpoints(Checkpoints::fields())
        .revision("revision")
        .build();
    assert_eq!(no_slot.unwrap_err().code(), "InvalidArgument");
    let ttl_without_attribute = MultiProjection::builder("x", f.summaries.clone())
        .initial(empty)
        .source("scan", f.scans.clone(), |s| {
            s.key(|_, _| None).evolve(|row, _, _| Ok(row))
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision("revision")
        .removal(Removal::new().ttl(std::time::Duration::from_secs(3 * 86_400)))
        .build();
    assert_eq!(ttl_without_attribute.unwrap_err().code(), "InvalidArgument");
}

/// Regression (issue 25): two sources declared on one scalar checkpoint
/// field (or a field that is also the map, an instance field or the
/// revision) were accepted, and each source then took the other's
/// checkpoint for its own and dropped its events as already applied. Now
/// `build` refuses every attribute the layout would use twice.
pub async fn clashing_checkpoint_fields_are_refused(t: TestTable) {
    use eddy_dynamo::SourceField;
    let f = freight(&t);
    let build = |checkpoints: Checkpoints, revision: &str| {
        MultiProjection::builder("clash", f.summaries.clone())
            .initial(empty)
            .source("scan", f.scans.clone(), |s| {
                s.key(|_, _| None).evolve(|row, _, _| Ok(row))
            })
            .source("weigh", f.weighings.clone(), |s| {
                s.key(|_, _| None).evolve(|row, _, _| Ok(row))
            })
            .checkpoints(checkpoints)
            .revision(revision)
            .build()
    };
    let clashes = [
        Checkpoints::fields()
            .source("scan", SourceField::new("version"))
            .source("weigh", SourceField::new("version")),
        Checkpoints::map("checkpoints").source("scan", SourceField::new("checkpoints")),
        Checkpoints::map("checkpoints")
            .source(
                "scan",
                SourceField::new("scanVersion").instance_field("owner"),
            )
            .source("weigh", SourceField::new("owner")),
        Checkpoints::map("checkpoints").source(
            "scan",
            SourceField::new("scanVersion").instance_field("scanVersion"),
        ),
    ];
    for checkpoints in clashes {
        let refused = build(checkpoints.clone(), "revision");
        let error = refused.expect_err(&format!("{checkpoints:?} is refused"));
        assert_eq!(error.code(), "InvalidArgument");
        assert!(error.to_string().contains("twice"), "{error}");
    }
    let on_revision = build(Checkpoints::map("revision"), "revision").unwrap_err();
    assert!(on_revision.to_string().contains("twice"), "{on_revision}");
    // Distinct fields are fine.
    let distinct = Checkpoints::map("checkpoints")
        .source(
            "scan",
            SourceField::new("scanVersion").instance_field("scanOwner"),
        )
        .source("weigh", SourceField::new("weighVersion"));
    assert!(build(distinct, "revision").is_ok());
    // A single-source projection's checkpoint cannot be its revision either.
    let single = eddy_dynamo::Projection::builder("clash", f.summaries.clone(), f.scans.clone())
        .key(|id, _| id.get("shipmentId").map(shipment))
        .initial(empty)
        .evolve(|row, _| Ok(row))
        .checkpoint("revision")
        .revision("revision")
        .build();
    assert_eq!(single.unwrap_err().code(), "InvalidArgument");
}

pub async fn rebuild_rederives_a_row_and_catch_up_reaches_the_heads(t: TestTable) {
    let f = freight(&t);
    let p = f.projection(None).unwrap();
    let o = order_id(&f, "o-1");
    append(
        &f.orders,
        &o,
        &[parcels("sh-1", 2), parcels("sh-2", 1), parcels("sh-1", 3)],
    )
    .await;
    append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("A"), scanned("B")],
    )
    .await;
    append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 4)]).await;
    // A damaged row: wrong numbers, no checkpoints.
    f.summaries
        .put(&ShipmentSummary {
            parcels: 99,
            revision: 7,
            ..empty(&shipment("sh-1"))
        })
        .await
        .unwrap();
    let instances = eddy_dynamo::RebuildInstances::new()
        .add("order", o.clone())
        .add("scan", scan_id(&f, "sh-1"))
        .add("weigh", session_id(&f, "w-1"));
    let out = p.rebuild(shipment("sh-1"), &instances).await.unwrap();
    assert!(out.written);
    assert_eq!(out.revision, Some(8), "the next revision");
    let state = f.summaries.get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(
        (state.parcels, state.location.as_str(), state.kg),
        (5, "B", 4)
    );
    assert_eq!(instance(&out, "order").checkpoint, 3);

    // New events arrive but are never delivered: catch_up reads them.
    append(&f.orders, &o, &[parcels("sh-1", 10)]).await;
    append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 1)]).await;
    let out = p.catch_up(shipment("sh-1")).await.unwrap();
    assert_eq!(instance(&out, "order").applied, [4]);
    assert_eq!(instance(&out, "weigh").applied, [2]);
    let state = f.summaries.get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!((state.parcels, state.kg, state.revision), (15, 5, 9));
    // Nothing new: nothing written.
    let out = p.catch_up(shipment("sh-1")).await.unwrap();
    assert!(!out.written);
}

/// 8 writers of different sources on one row lose nothing, with one
/// revision per write: 8 × 1 000 events on memory and SQLite, 8 × 40 on
/// moto (served one request at a time by the harness, so its conditional
/// writes are atomic as DynamoDB's; see `moto::conditional_races`).
pub async fn concurrent_writers_of_different_sources_lose_nothing(t: TestTable) {
    let f = freight(&t);
    let p = Arc::new(f.projection(None).unwrap().clone());
    // 8 writers, each its own weighing session feeding one row; fewer
    // events on moto, whose development server answers slowly.
    let per_writer: u64 = if t.backend == "dynamodb" { 40 } else { 1000 };
    let mut writers = Vec::new();
    for w in 0..8 {
        let (f, p) = (f.clone(), Arc::clone(&p));
        writers.push(tokio::spawn(async move {
            let id = session_id(&f, &format!("w-{w}"));
            let events: Vec<WeighEvent> = (0..per_writer).map(|_| weighed("sh-1", 1)).collect();
            let mut items = Vec::new();
            for chunk in events.chunks(99) {
                items.extend(append(&f.weighings, &id, chunk).await);
            }
            for item in items {
                // A writer that keeps losing gives up with a retryable
                // error; the record is delivered again, as Lambda would.
                for delivery in 1.. {
                    let out = p.apply_batch(vec![item.clone()]).await.unwrap();
                    match out[0].first_failure() {
                        None => break,
                        Some(e) if e.is_retryable() && delivery < 100 => continue,
                        Some(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let state = summary(&f, "sh-1").await;
    assert_eq!(state.kg, 8 * per_writer, "zero lost");
    assert_eq!(state.revision, 8 * per_writer, "one revision per write");
}

/// A single-source read model over the scan stream.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanCount {
    shipment_id: String,
    scans: u64,
}

pub async fn process_batch_routes_each_record_to_every_projection_reading_its_stream(t: TestTable) {
    use eddy_dynamo::{
        process_batch, BatchProjection, ChangeFeed, Entity, KeyComposite, Projection,
    };
    let f = freight(&t);
    let shipments = f.projection(None).unwrap();
    let counts = Entity::<ScanCount>::new(
        t.table.clone(),
        crate::freight::app(),
        "ScanCount",
        KeyComposite::new(&["shipmentId"], &[]),
    );
    let scan_counts = Projection::builder("scan-counts", counts.clone(), f.scans.clone())
        .key(|id, _| id.get("shipmentId").map(shipment))
        .initial(|k: &ShipmentKey| ScanCount {
            shipment_id: k.shipment_id.clone(),
            scans: 0,
        })
        .evolve(|mut row, _| {
            row.scans += 1;
            Ok(row)
        })
        .checkpoint("version")
        .build()
        .unwrap();
    append(
        &f.orders,
        &order_id(&f, "o-1"),
        &[parcels("sh-1", 1), parcels("sh-2", 2)],
    )
    .await;
    append(
        &f.scans,
        &scan_id(&f, "sh-1"),
        &[scanned("A"), scanned("B")],
    )
    .await;
    append(
        &f.weighings,
        &session_id(&f, "w-1"),
        &[weighed("sh-1", 0), weighed("sh-2", 9)],
    )
    .await;
    let records = t.read_changes(None, 100).await.unwrap().into_records();
    assert_eq!(records.len(), 6);
    let projections: [&dyn BatchProjection; 2] = [&shipments, &scan_counts];
    let result = process_batch(&records, &projections).await;
    assert!(result.failures.is_empty(), "{:?}", result.failures);
    assert!(result.response.batch_item_failures.is_empty());
    // sh-1 and sh-2 of the shipments, sh-1 of the scan counts.
    let mut rows: Vec<(String, bool)> = result
        .rows
        .iter()
        .map(|r| {
            (
                format!("{}:{}", r.projection, crate::multi::row_name(&r.key)),
                r.written,
            )
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("scan-counts:sh-1".to_owned(), true),
            ("shipments:sh-1".to_owned(), true),
            ("shipments:sh-2".to_owned(), true),
        ]
    );
    let sh1 = result
        .rows
        .iter()
        .find(|r| r.projection == "shipments" && row_name(&r.key) == "sh-1")
        .unwrap();
    let scan = sh1.instances.iter().find(|i| i.source == "scan").unwrap();
    assert_eq!(
        (scan.applied.clone(), scan.superseded.clone()),
        (vec![2], vec![1])
    );
    let weigh = sh1.instances.iter().find(|i| i.source == "weigh").unwrap();
    assert_eq!((weigh.skipped.clone(), weigh.checkpoint), (vec![1], 0));
    assert_eq!(sh1.revision, Some(1));
    assert_eq!(sh1.state.as_ref().unwrap()["location"], "B");
    assert_eq!(
        counts.get(&shipment("sh-1")).await.unwrap().unwrap().scans,
        2
    );

    // The rows' own writes are in the feed now: ignored, never failures;
    // the events again are already applied.
    let all = t.read_changes(None, 100).await.unwrap().into_records();
    let again = process_batch(&all, &projections).await;
    assert!(again.failures.is_empty());
    assert!(
        again.rows.iter().all(|r| !r.written),
        "nothing new to write"
    );
    let sh2 = f.summaries.get(&shipment("sh-2")).await.unwrap().unwrap();
    assert_eq!((sh2.parcels, sh2.kg), (2, 9));
}

/// The shipment id of a row key (`…#shipmentId=<id>`).
pub fn row_name(key: &Item) -> String {
    match key.get("pk") {
        Some(AttributeValue::S(pk)) => pk.rsplit('=').next().unwrap_or_default().to_owned(),
        _ => String::new(),
    }
}

crate::backend_tests!(
    process_batch_routes_each_record_to_every_projection_reading_its_stream,
    three_sources_fold_into_one_row_with_a_checkpoint_each,
    one_instance_feeds_many_rows_and_considers_the_others_events,
    latest_mode_applies_the_newest_and_reports_the_older_as_superseded,
    latest_mode_falls_back_past_rejections_and_skips,
    skipped_events_alone_never_write_and_never_create_a_row,
    one_instance_failure_is_its_own,
    a_row_whose_every_instance_failed_reports_it,
    a_removed_row_keeps_a_tombstone_with_its_checkpoints,
    revision_initial_sets_the_first_write,
    a_declaration_that_does_not_hold_together_is_refused,
    clashing_checkpoint_fields_are_refused,
    rebuild_rederives_a_row_and_catch_up_reaches_the_heads,
    concurrent_writers_of_different_sources_lose_nothing,
);

/// `removal.ttl`: a tombstone carries the table's TTL attribute, now plus
/// the ttl (epoch seconds). Until the sweep, a redelivered event is
/// recognised as applied and the row stays removed; once the tombstone has
/// expired, the same late event creates the row again, which is why the
/// ttl must exceed the change feed's retention plus any replay window.
/// Runs on the embedded tables, whose `expire_items` is the TTL sweep
/// (moto never expires items).
async fn removal_ttl_expires_tombstones(t: TestTable, table: eddy_dynamo::EmbeddedTable) {
    let ttl = std::time::Duration::from_secs(3 * 86_400);
    let f = freight(&t);
    let p = MultiProjection::builder("cancellable", f.summaries.clone())
        .initial(empty)
        .source("order", f.orders.clone(), |s| {
            s.key(|_, e| Some(crate::freight::order_shipment(&e.event)))
                .evolve(|row, e, _| Ok(crate::freight::order_step(row, &e.event)))
        })
        .checkpoints(Checkpoints::map("checkpoints"))
        .revision("revision")
        .removal(Removal::new().ttl(ttl))
        .build()
        .unwrap();
    let o = order_id(&f, "o-1");
    let added = append(&f.orders, &o, &[parcels("sh-1", 2)]).await;
    p.apply_batch(added.clone()).await.unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let cancelled = append(
        &f.orders,
        &o,
        &[OrderEvent::OrderCancelled {
            shipment_id: "sh-1".into(),
        }],
    )
    .await;
    assert!(p.apply_batch(cancelled).await.unwrap()[0].removed);
    let tombstone = raw(&f, "sh-1").await.unwrap();
    let expires = eddy_dynamo::get_u64(&tombstone, "ttl").expect("the TTL attribute");
    assert!(
        (before + ttl.as_secs()..=before + ttl.as_secs() + 60).contains(&expires),
        "expires at {expires}, removed at {before}"
    );

    // Before the sweep: the redelivery is recognised, nothing comes back.
    table.expire_items(expires - 1).await.unwrap();
    let again = p.apply_batch(added.clone()).await.unwrap();
    assert!(!again[0].written);
    assert_eq!(f.summaries.get(&shipment("sh-1")).await.unwrap(), None);

    // After it: the tombstone is gone, and the late event recreates the row.
    assert_eq!(table.expire_items(expires).await.unwrap(), 1);
    assert_eq!(raw(&f, "sh-1").await, None);
    p.apply_batch(added).await.unwrap();
    let back = f.summaries.get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(back.parcels, 2);
}

#[tokio::test]
async fn removal_ttl_expires_tombstones_on_memory() {
    let table = eddy_dynamo::EmbeddedTable::memory(crate::common::schema().with_ttl("ttl"));
    removal_ttl_expires_tombstones(table.clone().into(), table).await;
}

#[tokio::test]
async fn removal_ttl_expires_tombstones_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let schema = crate::common::schema().with_ttl("ttl");
    let table = eddy_dynamo::EmbeddedTable::open_sqlite(dir.path().join("ttl.db"), schema).unwrap();
    removal_ttl_expires_tombstones(table.clone().into(), table).await;
}
