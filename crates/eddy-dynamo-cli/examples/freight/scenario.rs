//! The freight scenario: what happens to three shipments, folded through
//! the change feed in batches.

use std::sync::Arc;

use eddy_dynamo::{
    process_batch_delivering, s, BatchProjection, BoxError, ChangeFeed, Deliver, Effect, Error,
    MultiProjection, Put, Query, StreamId, Table,
};
use futures::future::BoxFuture;
use serde::{de::DeserializeOwned, Serialize};

use crate::model::{
    shipment, Freight, OrderEvent, ScanEvent, ShipmentKey, ShipmentNotice, ShipmentSummary,
    WeighEvent,
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

/// The notices' consumer: each delivered notice becomes an item of the
/// table (partition `notices#<shipment>`, sort `<stream id>#<version>#<position>`),
/// so a redelivery writes the same item again.
pub fn notice_writer(table: Arc<dyn Table>) -> impl Deliver {
    move |effect: Effect| -> BoxFuture<'static, Result<(), BoxError>> {
        let table = Arc::clone(&table);
        Box::pin(async move {
            let notice: ShipmentNotice = effect.decode()?;
            let item = eddy_dynamo::Item::from([
                (
                    "pk".to_owned(),
                    s(format!("notices#{}", notice.shipment_id)),
                ),
                (
                    "sk".to_owned(),
                    s(format!(
                        "{}#{:020}#{:02}",
                        effect.stream_id, effect.version, effect.position
                    )),
                ),
                ("kind".to_owned(), s(notice.kind)),
            ]);
            table.put_item(Put::new(item)).await?;
            Ok(())
        })
    }
}

/// The notices delivered for a shipment, in order, as the consumer stored
/// them.
pub async fn notices(table: &dyn Table, id: &str) -> Result<Vec<String>, Error> {
    let query = Query::partition(s(format!("notices#{id}")));
    let page = table.query(query).await?;
    Ok(page
        .items
        .iter()
        .filter_map(|item| eddy_dynamo::get_str(item, "kind").map(str::to_owned))
        .collect())
}

/// Reads the whole change feed and folds it through
/// `process_batch_delivering`, `batch` records at a time, each written
/// row's notices delivered right after its write; fails on the first
/// record not applied. A notice whose delivery failed stays pending (a
/// later drain delivers it).
pub async fn fold(
    feed: &dyn ChangeFeed,
    shipments: &MultiProjection<ShipmentSummary, ShipmentKey>,
    deliver: &dyn Deliver,
    batch: usize,
) -> Result<(), Error> {
    let projections: [&dyn BatchProjection; 1] = [shipments];
    let mut after = None;
    loop {
        // Each read hands out the position after its last record (for
        // DynamoDB Streams one mark per shard): the next read starts there.
        let read = feed.read_changes(after.as_ref(), batch.max(1)).await?;
        let Some(position) = read.last_position().cloned() else {
            return Ok(());
        };
        after = Some(position);
        let result = process_batch_delivering(read.records(), &projections, deliver).await;
        if let Some(failed) = result.failures.first() {
            return Err(Error::InvalidArgument(format!(
                "record {} failed: {}: {}",
                failed.sequence_number, failed.code, failed.message
            )));
        }
    }
}

/// The final rows, one JSON line per shipment, then the notices each
/// received.
pub async fn report(f: &Freight, table: &dyn Table) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    for (id, _) in expected() {
        let row = f.summaries.get(&shipment(id)).await?;
        let line = match row {
            Some(row) => serde_json::to_string(&row).map_err(|e| Error::Encode(e.to_string()))?,
            None => format!("{{\"shipmentId\":\"{id}\",\"removed\":true}}"),
        };
        lines.push(line);
    }
    for (id, _) in expected() {
        let notices = serde_json::to_string(&notices(table, id).await?)
            .map_err(|e| Error::Encode(e.to_string()))?;
        lines.push(format!("{{\"shipmentId\":\"{id}\",\"notices\":{notices}}}"));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use eddy_dynamo::EmbeddedTable;

    use super::*;
    use crate::expect::{check_notices, expected_checkpoints};

    async fn check(f: &Freight, table: &dyn Table, batch: usize) {
        for (id, want) in expected() {
            let row = f.summaries.get(&shipment(id)).await.unwrap();
            let got = row.clone().map(|r| (r.parcels, r.location, r.kg));
            assert_eq!(got, want.map(|(p, l, k)| (p, l.to_owned(), k)), "{id}");
            if let Some(row) = row {
                let want: Vec<(String, u64)> = expected_checkpoints(id)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect();
                assert_eq!(
                    row.checkpoints.into_iter().collect::<Vec<_>>(),
                    want,
                    "{id}"
                );
            }
            let notices = notices(table, id).await.unwrap();
            check_notices(id, &notices, batch).unwrap();
        }
    }

    /// The scenario on the embedded table, in memory and in SQLite, with
    /// batches of every size from 1 to the whole feed: the same rows, the
    /// tombstone, and every applied scan's notice delivered in order.
    #[tokio::test]
    async fn the_scenario_folds_to_the_same_rows_in_any_batch_size() {
        let dir = tempfile::tempdir().unwrap();
        for (at, batch) in [1usize, 2, 3, 7, 100].into_iter().enumerate() {
            for sqlite in [false, true] {
                let schema = crate::model::schema("freight");
                let table = if sqlite {
                    EmbeddedTable::open_sqlite(dir.path().join(format!("f{at}.db")), schema)
                        .unwrap()
                } else {
                    EmbeddedTable::memory(schema)
                };
                let shared: Arc<dyn Table> = Arc::new(table.clone());
                let f = Freight::new(shared.clone()).unwrap();
                let outbox = f.outbox().unwrap();
                append(&f).await.unwrap();
                let shipments = f.projection(Some(Arc::new(outbox.clone()))).unwrap();
                let deliver = notice_writer(shared.clone());
                fold(&table, &shipments, &deliver, batch).await.unwrap();
                check(&f, shared.as_ref(), batch).await;
                let tombstone = f.summaries.key(&shipment("sh-3")).unwrap();
                let item = eddy_dynamo::Table::get_item(&table, tombstone)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(
                    item["__edd_e__"],
                    eddy_dynamo::s("ShipmentSummary#tombstone")
                );
                assert!(outbox.pending_rows().await.unwrap().is_empty());
            }
        }
    }

    /// The notices check fails on what it must refuse.
    #[test]
    fn wrong_notices_are_refused() {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(check_notices("sh-1", &own(&["at Felixstowe"]), 100).is_ok());
        assert!(check_notices("sh-1", &own(&["at Felixstowe"]), 1).is_err());
        assert!(check_notices(
            "sh-1",
            &own(&["at Rotterdam", "at Hamburg", "at Felixstowe"]),
            100
        )
        .is_err());
        assert!(check_notices("sh-1", &own(&["at Hamburg"]), 100).is_err());
        assert!(check_notices("sh-3", &own(&["at Hamburg"]), 100).is_err());
    }
}
