//! Rows written before the projection, field-mapped checkpoints and
//! adoption: every rule of the spec's "Rows written before the projection"
//! and "Checkpoints per source instance".

use std::collections::BTreeMap;

use eddy_dynamo::{
    get_present, AttributeValue, Checkpoints, Entity, Item, KeyComposite, MultiProjection,
    SourceField, Step,
};
use serde::{Deserialize, Serialize};

use crate::common::TestTable;
use crate::freight::{app, shipment, ShipmentKey, WeighEvent};
use crate::multi::{append, freight, session_id, weighed};

/// A read model whose rows predate the projection: its fields are optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightLog {
    shipment_id: String,
    kg: u64,
    weigh_version: Option<i64>,
    weigh_session: Option<String>,
    checkpoints: Option<BTreeMap<String, u64>>,
    revision: Option<u64>,
}

fn logs(t: &TestTable) -> Entity<WeightLog> {
    Entity::new(
        t.table.clone(),
        app(),
        "WeightLog",
        KeyComposite::new(&["shipmentId"], &[]),
    )
}

fn legacy(id: &str, kg: u64) -> WeightLog {
    WeightLog {
        shipment_id: id.into(),
        kg,
        weigh_version: None,
        weigh_session: None,
        checkpoints: None,
        revision: None,
    }
}

/// The spec's weight-log projection; `map`: whether a second instance has
/// a map to go to.
fn projection(t: &TestTable, map: bool) -> MultiProjection<WeightLog, ShipmentKey> {
    let f = freight(t);
    let field = SourceField::new("weighVersion")
        .offset(-1)
        .instance_field("weighSession");
    let checkpoints = if map {
        Checkpoints::map("checkpoints")
    } else {
        Checkpoints::fields()
    };
    MultiProjection::builder("weights", logs(t))
        .initial(|k: &ShipmentKey| legacy(&k.shipment_id, 0))
        .source("weigh", f.weighings, |s| {
            s.key(|_, e| {
                let WeighEvent::Weighed { shipment_id, .. } = &e.event;
                Some(shipment(shipment_id))
            })
            .evolve(|mut row, e, _| {
                let WeighEvent::Weighed { kg, .. } = &e.event;
                if *kg == 0 {
                    return Ok(Step::Skip);
                }
                row.kg += kg;
                Ok(Step::Next(row))
            })
        })
        .checkpoints(checkpoints.source("weigh", field))
        .revision("revision")
        .build()
        .unwrap()
}

async fn raw(t: &TestTable, id: &str) -> Item {
    let key = logs(t).key(&shipment(id)).unwrap();
    t.table.get_item(key).await.unwrap().unwrap()
}

fn number(item: &Item, name: &str) -> Option<String> {
    match get_present(item, name) {
        Some(AttributeValue::N(n)) => Some(n.clone()),
        _ => None,
    }
}

fn text(item: &Item, name: &str) -> Option<String> {
    match get_present(item, name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    }
}

pub async fn a_new_row_keeps_the_scalar_with_its_offset_and_no_map(t: TestTable) {
    let p = projection(&t, true);
    let f = freight(&t);
    let events = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 5)]).await;
    let out = p.apply_batch(events).await.unwrap();
    assert_eq!(out[0].revision, Some(1));
    let item = raw(&t, "sh-1").await;
    assert_eq!(
        number(&item, "weighVersion").as_deref(),
        Some("0"),
        "version 1 stored with offset -1"
    );
    assert_eq!(
        text(&item, "weighSession").as_deref(),
        Some("sessionId=w-1")
    );
    assert!(
        !item.contains_key("checkpoints"),
        "the map stays absent until an instance lands in it"
    );
}

pub async fn a_legacy_row_gets_the_initial_revision_and_is_adopted(t: TestTable) {
    let p = projection(&t, true);
    let f = freight(&t);
    logs(&t).put(&legacy("sh-1", 10)).await.unwrap();
    let before = raw(&t, "sh-1").await;
    for absent in ["weighVersion", "weighSession", "checkpoints", "revision"] {
        assert!(
            !before.contains_key(absent),
            "{absent} is absent on a legacy row"
        );
    }
    let events = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 5)]).await;
    let out = p.apply_batch(events).await.unwrap();
    assert_eq!(out[0].revision, Some(1), "initial, not initial + 1");
    let row = logs(&t).get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(row.kg, 15, "folded onto the row as it was");
    assert_eq!(
        row.weigh_session.as_deref(),
        Some("sessionId=w-1"),
        "adopted"
    );
    assert_eq!(row.checkpoints, None);
}

pub async fn an_unowned_legacy_scalar_is_the_first_instances_checkpoint(t: TestTable) {
    let p = projection(&t, true);
    let f = freight(&t);
    // The legacy row counted 3 weighings (0-based: 2) with no owner.
    logs(&t)
        .put(&WeightLog {
            weigh_version: Some(2),
            ..legacy("sh-1", 30)
        })
        .await
        .unwrap();
    let w = session_id(&f, "w-1");
    let events = append(
        &f.weighings,
        &w,
        &[
            weighed("sh-1", 10),
            weighed("sh-1", 10),
            weighed("sh-1", 10),
            weighed("sh-1", 4),
        ],
    )
    .await;
    let out = p.apply_batch(events).await.unwrap();
    let weigh = &out[0].instances[0];
    assert_eq!(weigh.already_applied, [1, 2, 3]);
    assert_eq!(weigh.applied, [4]);
    assert_eq!(
        logs(&t).get(&shipment("sh-1")).await.unwrap().unwrap().kg,
        34
    );
}

pub async fn a_second_instance_goes_to_the_map(t: TestTable) {
    let p = projection(&t, true);
    let f = freight(&t);
    let mut batch = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 1)]).await;
    batch.extend(
        append(
            &f.weighings,
            &session_id(&f, "w-2"),
            &[weighed("sh-1", 2), weighed("sh-1", 2)],
        )
        .await,
    );
    let out = p.apply_batch(batch).await.unwrap();
    assert!(out[0].is_applied());
    let item = raw(&t, "sh-1").await;
    assert_eq!(
        text(&item, "weighSession").as_deref(),
        Some("sessionId=w-1")
    );
    let row = logs(&t).get(&shipment("sh-1")).await.unwrap().unwrap();
    assert_eq!(
        row.checkpoints,
        Some(BTreeMap::from([("weigh#sessionId=w-2".to_owned(), 2)]))
    );
    assert_eq!(row.kg, 5);
    // Redelivered, each instance is recognised where it is kept.
    let again = f
        .weighings
        .read_items_range(&session_id(&f, "w-2"), 1, 2)
        .await
        .unwrap();
    let out = p.apply_batch(again).await.unwrap();
    assert_eq!(out[0].instances[0].already_applied, [1, 2]);
    assert!(!out[0].written);
}

pub async fn without_a_map_a_second_instance_conflicts_and_nothing_is_written(t: TestTable) {
    let p = projection(&t, false);
    let f = freight(&t);
    let first = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 1)]).await;
    p.apply_batch(first).await.unwrap();
    let before = raw(&t, "sh-1").await;
    let second = append(&f.weighings, &session_id(&f, "w-2"), &[weighed("sh-1", 2)]).await;
    let out = p.apply_batch(second).await.unwrap();
    assert_eq!(
        out[0].first_failure().unwrap().code(),
        "ProjectionSourceConflict"
    );
    assert!(!out[0].written);
    assert!(
        eddy_dynamo::items_equal(&before, &raw(&t, "sh-1").await),
        "nothing written"
    );
}

pub async fn an_instance_whose_events_are_all_skipped_leaves_the_scalar_unowned(t: TestTable) {
    let p = projection(&t, true);
    let f = freight(&t);
    logs(&t).put(&legacy("sh-1", 10)).await.unwrap();
    let mut batch = append(&f.weighings, &session_id(&f, "w-1"), &[weighed("sh-1", 0)]).await;
    batch.extend(append(&f.weighings, &session_id(&f, "w-2"), &[weighed("sh-1", 3)]).await);
    let out = p.apply_batch(batch).await.unwrap();
    assert_eq!(out[0].instances[0].skipped, [1]);
    let item = raw(&t, "sh-1").await;
    assert_eq!(
        text(&item, "weighSession").as_deref(),
        Some("sessionId=w-2"),
        "the unowned field goes to the first instance that writes it"
    );
    assert!(
        !item.contains_key("checkpoints"),
        "the skipped instance gets no map entry"
    );
}

crate::backend_tests!(
    a_new_row_keeps_the_scalar_with_its_offset_and_no_map,
    a_legacy_row_gets_the_initial_revision_and_is_adopted,
    an_unowned_legacy_scalar_is_the_first_instances_checkpoint,
    a_second_instance_goes_to_the_map,
    without_a_map_a_second_instance_conflicts_and_nothing_is_written,
    an_instance_whose_events_are_all_skipped_leaves_the_scalar_unowned,
);
