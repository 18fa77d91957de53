//! The bridge tests' projection, shared with the crash test's deliverer:
//! the freight orders folded into shipment rows (a cancellation removes
//! the row, its tombstone expiring after a day), every applied order event
//! leaving one notice in the outbox, and what a target stream holds.

use std::sync::Arc;
use std::time::Duration;

use eddy_dynamo::{
    Checkpoints, EmbeddedTable, EventItem, MultiProjection, Outbox, RebuildInstances, Removal,
    Revision, StreamId,
};
use eddy_streams::{ReadFrom, Storage, StreamPath};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::model::{self, Freight, OrderEvent, ShipmentKey, ShipmentSummary};

/// The table's TTL attribute (tombstones only).
pub const TTL: &str = "ttl";

/// A `ParcelAdded` of at least this many parcels carries as many bytes of
/// padding in its notice (the too-large case).
pub const PADDED_FROM: u64 = 1_000;

/// The freight table's layout, with tombstones that expire.
pub fn schema() -> eddy_dynamo::TableSchema {
    model::schema("freight").with_ttl(TTL)
}

/// One projection of the orders into a read model of its own.
pub struct Orders {
    pub freight: Freight,
    pub outbox: Outbox,
    pub projection: MultiProjection<ShipmentSummary, ShipmentKey>,
    /// The projection's name, in every notice (`by`).
    pub name: String,
}

/// The fields of an order event that name its shipment.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct About {
    shipment_id: String,
    #[serde(default)]
    parcels: u64,
}

impl Orders {
    /// The projection `name` into read model `read_model` of `table`.
    pub fn new(table: &EmbeddedTable, read_model: &str, name: &str) -> Self {
        let freight =
            Freight::with_read_model(Arc::new(table.clone()), read_model).expect("freight");
        let outbox = Outbox::new(&freight.summaries)
            .and_then(|o| o.with_index(model::OUTBOX_INDEX))
            .expect("outbox")
            .claim_for(Duration::from_millis(300));
        let by = name.to_owned();
        let projection = MultiProjection::builder(name, freight.summaries.clone())
            .initial(|key: &ShipmentKey| ShipmentSummary {
                shipment_id: key.shipment_id.clone(),
                parcels: 0,
                location: String::new(),
                kg: 0,
                checkpoints: Default::default(),
                revision: 0,
            })
            .source("order", freight.orders.clone(), |s| {
                s.key(|_, e| Some(model::order_shipment(&e.event)))
                    .evolve(|row, e, _| Ok(model::order_step(row, &e.event)))
            })
            .checkpoints(Checkpoints::map("checkpoints"))
            .revision(Revision::new("revision"))
            .removal(Removal::new().ttl(Duration::from_secs(86_400)))
            .outbox(Arc::new(outbox.clone()), move |event, _next| {
                let Ok(about) = event.data::<About>() else {
                    return Vec::new();
                };
                let mut notice = json!({
                    "shipmentId": about.shipment_id,
                    "kind": format!("{} {}@{}", event.event_type, event.stream_id, event.version),
                    "by": by,
                });
                if about.parcels >= PADDED_FROM {
                    notice["pad"] = Value::String(".".repeat(about.parcels as usize));
                }
                vec![notice]
            })
            .build()
            .expect("projection");
        Orders {
            freight,
            outbox,
            projection,
            name: name.to_owned(),
        }
    }

    /// The stream instance of order `id`.
    pub fn order(&self, id: &str) -> StreamId {
        self.freight.orders.id([("orderId", id)]).expect("order id")
    }

    /// Appends `events` to order `id`: the stored items.
    pub async fn append(&self, id: &str, events: &[OrderEvent]) -> Vec<EventItem> {
        let order = self.order(id);
        let at = self
            .freight
            .orders
            .current_version(&order)
            .await
            .expect("version");
        self.freight
            .orders
            .append(&order, events, at)
            .await
            .expect("append");
        self.freight
            .orders
            .read_items_range(&order, at + 1, at + events.len() as u64)
            .await
            .expect("read back")
    }

    /// Applies stored events (without delivering: the notices wait in the
    /// outbox).
    pub async fn apply(&self, items: Vec<EventItem>) {
        for outcome in self.projection.apply_batch(items).await.expect("apply") {
            assert!(
                outcome.first_failure().is_none(),
                "{:?}",
                outcome.first_failure()
            );
        }
    }

    /// Rebuilds shipment `id` from `orders`.
    pub async fn rebuild(&self, id: &str, orders: &[&str]) -> usize {
        let mut instances = RebuildInstances::new();
        for order in orders {
            instances = instances.add("order", self.order(order));
        }
        let out = self
            .projection
            .rebuild(model::shipment(id), &instances)
            .await
            .expect("rebuild");
        out.enqueued
    }
}

/// Parcels added to a shipment.
pub fn added(shipment: &str, parcels: u64) -> OrderEvent {
    OrderEvent::ParcelAdded {
        shipment_id: shipment.into(),
        parcels,
    }
}

/// A shipment's order cancelled (its row removed).
pub fn cancelled(shipment: &str) -> OrderEvent {
    OrderEvent::OrderCancelled {
        shipment_id: shipment.into(),
    }
}

/// The notices in stream `path` (none when it does not exist, or was
/// deleted).
pub async fn notices(store: &dyn Storage, path: &str) -> Vec<Value> {
    let path = StreamPath::new(path).expect("path");
    match store.read(&path, ReadFrom::Beginning, usize::MAX).await {
        Ok(chunk) => chunk
            .messages
            .iter()
            .map(|m| serde_json::from_slice(m).expect("json"))
            .collect(),
        Err(
            eddy_streams::StreamError::NotFound { .. } | eddy_streams::StreamError::Gone { .. },
        ) => Vec::new(),
        Err(e) => panic!("reading {path}: {e}"),
    }
}

/// The kinds of the notices of `by`'s shipment `shipment`, in stream
/// order.
pub fn kinds(notices: &[Value], by: &str, shipment: &str) -> Vec<String> {
    notices
        .iter()
        .filter(|n| n["by"] == by && n["shipmentId"] == shipment)
        .map(|n| n["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}
