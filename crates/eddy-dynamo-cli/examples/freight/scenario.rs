//! The freight scenario: what happens to three shipments, folded through
//! the change feed in batches.

use eddy_dynamo::{process_batch, BatchProjection, ChangeFeed, Error, MultiProjection, StreamId};
use serde::{de::DeserializeOwned, Serialize};

use crate::model::{
    shipment, Freight, OrderEvent, ScanEvent, ShipmentKey, ShipmentSummary, WeighEvent,
};

async fn add<E: Serialize + DeserializeOwned>(
    stream: &eddy_dynamo::EventStream<E>,
    id: &StreamId,
    events: &[E],
) -> Result<(), Error> {
    let at = stream.current_version(id).await?;
    stream.append(id, events, at).await.map(|_| ())
}

/// Appends the scenario: order o-1 ships sh-1 and sh-2, order o-2 ships
/// sh-3 and cancels it; sh-1 is scanned three times, sh-2 once; a scale
/// weighs sh-1 (with a tare reading) and sh-2.
pub async fn append(f: &Freight) -> Result<(), Error> {
    let parcel = |id: &str, parcels| OrderEvent::ParcelAdded {
        shipment_id: id.into(),
        parcels,
    };
    let scan = |at: &str| ScanEvent::Scanned {
        location: at.into(),
    };
    let weigh = |id: &str, kg| WeighEvent::Weighed {
        shipment_id: id.into(),
        kg,
    };
    add(
        &f.orders,
        &f.orders.id([("orderId", "o-1")])?,
        &[parcel("sh-1", 2), parcel("sh-2", 1), parcel("sh-1", 1)],
    )
    .await?;
    add(
        &f.scans,
        &f.scans.id([("shipmentId", "sh-1")])?,
        &[scan("Hamburg"), scan("Rotterdam")],
    )
    .await?;
    add(
        &f.weighings,
        &f.weighings.id([("sessionId", "w-1")])?,
        &[weigh("sh-1", 0), weigh("sh-1", 12), weigh("sh-2", 3)],
    )
    .await?;
    add(
        &f.orders,
        &f.orders.id([("orderId", "o-2")])?,
        &[parcel("sh-3", 4)],
    )
    .await?;
    add(
        &f.scans,
        &f.scans.id([("shipmentId", "sh-2")])?,
        &[scan("Antwerp")],
    )
    .await?;
    add(
        &f.scans,
        &f.scans.id([("shipmentId", "sh-1")])?,
        &[scan("Felixstowe")],
    )
    .await?;
    add(
        &f.orders,
        &f.orders.id([("orderId", "o-2")])?,
        &[OrderEvent::OrderCancelled {
            shipment_id: "sh-3".into(),
        }],
    )
    .await?;
    Ok(())
}

/// A final row: parcels, location, kg.
pub type Expected = (u64, &'static str, u64);

/// The final rows the scenario leaves, `None` for a removed one.
pub fn expected() -> Vec<(&'static str, Option<Expected>)> {
    vec![
        ("sh-1", Some((3, "Felixstowe", 12))),
        ("sh-2", Some((1, "Antwerp", 3))),
        ("sh-3", None),
    ]
}

/// Reads the whole change feed and folds it through `process_batch`,
/// `batch` records at a time; fails on the first record not applied.
pub async fn fold(
    feed: &dyn ChangeFeed,
    shipments: &MultiProjection<ShipmentSummary, ShipmentKey>,
    batch: usize,
) -> Result<(), Error> {
    let projections: [&dyn BatchProjection; 1] = [shipments];
    let mut after = None;
    loop {
        let records = feed.read_changes(after.clone(), batch.max(1)).await?;
        let Some(last) = records.last() else {
            return Ok(());
        };
        after = last.change.sequence_number.clone();
        let result = process_batch(&records, &projections).await;
        if let Some(failed) = result.failures.first() {
            return Err(Error::InvalidArgument(format!(
                "record {} failed: {}: {}",
                failed.sequence_number, failed.code, failed.message
            )));
        }
    }
}

/// The final rows, one JSON line per shipment.
pub async fn report(f: &Freight) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    for (id, _) in expected() {
        let row = f.summaries.get(&shipment(id)).await?;
        let line = match row {
            Some(row) => serde_json::to_string(&row).map_err(|e| Error::Encode(e.to_string()))?,
            None => format!("{{\"shipmentId\":\"{id}\",\"removed\":true}}"),
        };
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use eddy_dynamo::{EmbeddedTable, TableSchema};

    use super::*;

    async fn check(f: &Freight) {
        for (id, want) in expected() {
            let row = f.summaries.get(&shipment(id)).await.unwrap();
            let got = row.map(|r| (r.parcels, r.location, r.kg));
            assert_eq!(got, want.map(|(p, l, k)| (p, l.to_owned(), k)), "{id}");
        }
    }

    /// The scenario on the embedded table, in memory and in SQLite, with
    /// batches of every size from 1 to the whole feed: the same rows.
    #[tokio::test]
    async fn the_scenario_folds_to_the_same_rows_in_any_batch_size() {
        let dir = tempfile::tempdir().unwrap();
        for (at, batch) in [1usize, 2, 3, 7, 100].into_iter().enumerate() {
            for sqlite in [false, true] {
                let schema = TableSchema::single_table("freight");
                let table = if sqlite {
                    EmbeddedTable::open_sqlite(dir.path().join(format!("f{at}.db")), schema)
                        .unwrap()
                } else {
                    EmbeddedTable::memory(schema)
                };
                let f = Freight::new(Arc::new(table.clone())).unwrap();
                append(&f).await.unwrap();
                fold(&table, &f.projection(None).unwrap(), batch)
                    .await
                    .unwrap();
                check(&f).await;
                let tombstone = f.summaries.key(&shipment("sh-3")).unwrap();
                let item = eddy_dynamo::Table::get_item(&table, tombstone)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    item["__edd_e__"],
                    eddy_dynamo::s("ShipmentSummary#tombstone")
                );
            }
        }
    }
}
