//! The freight scenario: orders, scans and weighings folded into one
//! shipment summary per shipment, with a notice in the outbox for every
//! scan. Shared by the example binary and eddy-dynamo's tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_dynamo::{
    make_stream, AppSchema, Checkpoints, EffectCommit, EffectEvent, Entity, Error, EventStream,
    KeyComposite, Mode, MultiProjection, Outbox, Removal, Revision, Step, Table, TableSchema,
};
use serde::{Deserialize, Serialize};

/// The events of an order: one order feeds several shipments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum OrderEvent {
    /// Parcels were added to a shipment of the order.
    ParcelAdded { shipment_id: String, parcels: u64 },
    /// The order was cancelled for one of its shipments.
    OrderCancelled { shipment_id: String },
}

/// One scan stream per shipment: each scan carries the whole location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScanEvent {
    /// The shipment was scanned at a location.
    Scanned { location: String },
}

/// Weighings from a scale, one stream per weighing session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum WeighEvent {
    /// A shipment was weighed (`kg == 0`: a tare reading).
    Weighed { shipment_id: String, kg: u64 },
}

/// The read model: one summary per shipment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShipmentSummary {
    pub shipment_id: String,
    pub parcels: u64,
    pub location: String,
    pub kg: u64,
    /// One checkpoint per source instance (`<source>#<stream id>`).
    pub checkpoints: BTreeMap<String, u64>,
    /// Incremented by every write, and its guard.
    pub revision: u64,
}

/// A summary's row key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShipmentKey {
    pub shipment_id: String,
}

/// The row key of a shipment.
pub fn shipment(id: &str) -> ShipmentKey {
    ShipmentKey {
        shipment_id: id.to_owned(),
    }
}

/// A notice the outbox delivers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShipmentNotice {
    pub shipment_id: String,
    pub kind: String,
}

/// The shipment an order event is about.
pub fn order_shipment(event: &OrderEvent) -> ShipmentKey {
    match event {
        OrderEvent::ParcelAdded { shipment_id, .. }
        | OrderEvent::OrderCancelled { shipment_id } => shipment(shipment_id),
    }
}

/// An order event folded into its shipment: parcels added, or the
/// shipment removed when its order is cancelled.
pub fn order_step(mut row: ShipmentSummary, event: &OrderEvent) -> Step<ShipmentSummary> {
    match event {
        OrderEvent::OrderCancelled { .. } => Step::Remove,
        OrderEvent::ParcelAdded { parcels, .. } => {
            row.parcels += parcels;
            Step::Next(row)
        }
    }
}

/// The application schema of the freight tables.
pub fn app() -> AppSchema {
    AppSchema::new("freight", 1)
}

/// The freight table's layout: the single-table key, and the sparse index
/// that lists rows with pending notices.
pub fn schema(name: &str) -> TableSchema {
    TableSchema::single_table(name).with_index(OUTBOX_INDEX, "outboxPk", Some("outboxSk"))
}

/// The sparse index of outbox items in the freight table.
pub const OUTBOX_INDEX: &str = "outbox";

/// The freight streams and read model over one table.
#[derive(Clone)]
pub struct Freight {
    pub orders: EventStream<OrderEvent>,
    pub scans: EventStream<ScanEvent>,
    pub weighings: EventStream<WeighEvent>,
    pub summaries: Entity<ShipmentSummary>,
}

impl Freight {
    /// Declares the streams and the read model on `table`.
    pub fn new(table: Arc<dyn Table>) -> Result<Self, Error> {
        Self::with_read_model(table, "ShipmentSummary")
    }

    /// The same, with the summaries stored as another entity type (two
    /// read models of one scenario side by side).
    pub fn with_read_model(table: Arc<dyn Table>, entity_type: &str) -> Result<Self, Error> {
        Ok(Self {
            orders: make_stream(table.clone(), app(), "Order", &["orderId"])?,
            scans: make_stream(table.clone(), app(), "Scan", &["shipmentId"])?,
            weighings: make_stream(table.clone(), app(), "Weigh", &["sessionId"])?,
            summaries: Entity::new(
                table,
                app(),
                entity_type,
                KeyComposite::new(&["shipmentId"], &[]),
            ),
        })
    }

    /// The summaries' outbox: notices in each row's partition, listed by
    /// the table's [`OUTBOX_INDEX`].
    pub fn outbox(&self) -> Result<Outbox, Error> {
        Outbox::new(&self.summaries)?.with_index(OUTBOX_INDEX)
    }

    /// The shipment projection of the spec: orders add parcels (a
    /// cancellation removes the row), scans set the location (latest only),
    /// weighings add kilograms (a tare reading is skipped). With an outbox,
    /// each applied event leaves the notices its function returns.
    pub fn projection_with(
        &self,
        outbox: Option<(Arc<dyn EffectCommit>, NoticesFn)>,
    ) -> Result<MultiProjection<ShipmentSummary, ShipmentKey>, Error> {
        self.projection_restarting(outbox, Restart::AnySource)
    }

    /// [`projection_with`](Self::projection_with), with `restart` saying
    /// which sources may start a cancelled shipment again.
    pub fn projection_restarting(
        &self,
        outbox: Option<(Arc<dyn EffectCommit>, NoticesFn)>,
        restart: Restart,
    ) -> Result<MultiProjection<ShipmentSummary, ShipmentKey>, Error> {
        let orders_only = restart == Restart::OrdersOnly;
        let builder = MultiProjection::builder("shipments", self.summaries.clone())
            .initial(|key: &ShipmentKey| ShipmentSummary {
                shipment_id: key.shipment_id.clone(),
                parcels: 0,
                location: String::new(),
                kg: 0,
                checkpoints: BTreeMap::new(),
                revision: 0,
            })
            .source("order", self.orders.clone(), |s| {
                s.key(|_, e| Some(order_shipment(&e.event)))
                    .evolve(|row, e, _| Ok(order_step(row, &e.event)))
                    .restarts_removed_rows(orders_only)
            })
            .source("scan", self.scans.clone(), |s| {
                s.key(|id, _| id.get("shipmentId").map(shipment))
                    .evolve(|mut row, e, _| {
                        let ScanEvent::Scanned { location } = &e.event;
                        row.location = location.clone();
                        Ok(row)
                    })
                    .mode(Mode::Latest)
            })
            .source("weigh", self.weighings.clone(), |s| {
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
            .checkpoints(Checkpoints::map("checkpoints"))
            .revision(Revision::new("revision"))
            .removal(Removal::new());
        let builder = match outbox {
            Some((commit, effects)) => builder.outbox(commit, effects),
            None => builder,
        };
        builder.build()
    }

    /// The shipment projection of the spec, every applied scan leaving a
    /// notice in `outbox`.
    pub fn projection(
        &self,
        outbox: Option<Arc<dyn EffectCommit>>,
    ) -> Result<MultiProjection<ShipmentSummary, ShipmentKey>, Error> {
        self.projection_with(outbox.map(|commit| (commit, scan_notices as NoticesFn)))
    }
}

/// Which sources may start a cancelled shipment again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Any source's later event (the spec's rule): a weighing that arrives
    /// after the cancellation brings the shipment back with its weight only.
    AnySource,
    /// The order's own events only: a scan or weighing that arrives after
    /// the cancellation is recorded in the tombstone and skipped.
    OrdersOnly,
}

/// What an applied event leaves in the outbox.
pub type NoticesFn = fn(&EffectEvent<'_>, Option<&ShipmentSummary>) -> Vec<ShipmentNotice>;

/// The spec's notices: one per applied scan, naming the new location.
pub fn scan_notices(
    event: &EffectEvent<'_>,
    next: Option<&ShipmentSummary>,
) -> Vec<ShipmentNotice> {
    match next {
        Some(next) if event.event_type == "Scanned" => vec![ShipmentNotice {
            shipment_id: next.shipment_id.clone(),
            kind: format!("at {}", next.location),
        }],
        _ => Vec::new(),
    }
}
