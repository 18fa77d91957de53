//! Repair beside live delivery: `rebuild` and `catch_up` of multi-source
//! rows while another writer applies events to the same row, and the same
//! repair on single-source projections.

use eddy_dynamo::RebuildInstances;

use crate::common::{
    key, line, orders, placed, summaries, summary_of, summary_projection, Only, TestTable,
};
use crate::faults::{Call, Faulty};
use crate::freight::{shipment, Freight};
use crate::multi::{append, order_id, parcels};

/// Where live delivery gets in while a rebuild runs.
#[derive(Debug, Clone, Copy)]
enum Between {
    /// Before the rebuild reads the row.
    RowRead,
    /// Before it reads the instance's history.
    HistoryRead,
}

/// Regression (issue 25): `rebuild` read an instance's history before it
/// read the row. Live delivery that applied version 8 in between left the
/// rebuild a history up to 7 and a row whose revision its condition then
/// held to: it wrote checkpoint 7 without version 8, which was lost for
/// good. Now the rebuild reads the row first and the histories after, and
/// a write whose revision moved plans again from both.
async fn rebuild_keeps_what_live_delivery_applied_meanwhile(t: TestTable, between: Between) {
    let events = Freight::new(t.table.clone()).unwrap();
    let live = events.projection(None).unwrap();
    let hooked = Faulty::new(t.table.clone());
    let repairing = Freight::with_read_model(hooked.clone(), "ShipmentSummary")
        .unwrap()
        .projection(None)
        .unwrap();
    let o = order_id(&events, "o-1");
    let seven = append(&events.orders, &o, &vec![parcels("sh-1", 1); 7]).await;
    live.apply_batch(seven).await.unwrap();

    let (orders, live_writer, o8) = (events.orders.clone(), live.clone(), o.clone());
    let delivery = Box::pin(async move {
        let v8 = append(&orders, &o8, &[parcels("sh-1", 10)]).await;
        let out = live_writer.apply_batch(v8).await.unwrap();
        assert!(out[0].written, "live delivery applies version 8");
    });
    match between {
        Between::RowRead => hooked.before(Call::GetItem, "shipmentId=sh-1", delivery),
        Between::HistoryRead => hooked.before(Call::Query, "$stream#Order#orderId=o-1", delivery),
    }
    let instances = RebuildInstances::new().add("order", o.clone());
    let out = repairing
        .rebuild(shipment("sh-1"), &instances)
        .await
        .unwrap();
    assert!(hooked.ran(), "live delivery got in");
    assert!(out.written);
    let row = events
        .summaries
        .get(&shipment("sh-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.parcels, 17, "version 8 is kept");
    assert_eq!(row.checkpoints.get("order#orderId=o-1"), Some(&8));
}

async fn rebuild_races_live_delivery_before_the_row_read(t: TestTable) {
    rebuild_keeps_what_live_delivery_applied_meanwhile(t, Between::RowRead).await;
}

async fn rebuild_races_live_delivery_before_the_history_read(t: TestTable) {
    rebuild_keeps_what_live_delivery_applied_meanwhile(t, Between::HistoryRead).await;
}

/// Regression (issue 25): single-source projections had no `rebuild` or
/// `catch_up`, though their docs promised the revision made rebuild safe.
/// They now repair a row with the multi-source rows' code: from scratch
/// (with or without a revision, guarded by what the row held), and up to
/// the instance's head.
async fn single_source_rows_rebuild_and_catch_up(t: TestTable) {
    for revision in [false, true] {
        let p = summary_projection(&t, revision);
        let stream = orders(&t);
        let id = stream
            .id([("orderId", format!("o-rev-{revision}"))])
            .unwrap();
        let order = format!("o-rev-{revision}");
        stream
            .append(&id, &[placed("ada"), line(2, 100), line(1, 50)], 0)
            .await
            .unwrap();
        let events = stream.read(&id).await.unwrap();
        p.apply_batch(events).await.unwrap();
        // A damaged row: wrong numbers, its checkpoint kept.
        let mut damaged = summary_of(&t, &order).await;
        damaged.total_cents = 1;
        let rows = summaries(&t);
        let mut item = rows.to_item(&damaged).unwrap();
        let table_item = t
            .table
            .get_item(rows.key(&key(&order)).unwrap())
            .await
            .unwrap()
            .unwrap();
        for field in ["version", "revision", eddy_dynamo::SOURCE_ATTRIBUTE] {
            if let Some(v) = table_item.get(field) {
                item.insert(field.to_owned(), v.clone());
            }
        }
        t.table.put_item(eddy_dynamo::Put::new(item)).await.unwrap();

        let out = p.rebuild(key(&order), &id).await.unwrap();
        assert!(out.written, "revision {revision}");
        assert_eq!(out.only().checkpoint, 3);
        assert_eq!(summary_of(&t, &order).await.total_cents, 250);

        // Events that are never delivered: catch-up reads them.
        stream.append(&id, &[line(1, 1000)], 3).await.unwrap();
        let out = p.catch_up(key(&order)).await.unwrap();
        assert_eq!(out.only().applied, [4]);
        assert_eq!(summary_of(&t, &order).await.total_cents, 1250);
        assert!(
            !p.catch_up(key(&order)).await.unwrap().written,
            "nothing new"
        );
    }
}

crate::backend_tests!(
    rebuild_races_live_delivery_before_the_row_read,
    rebuild_races_live_delivery_before_the_history_read,
    single_source_rows_rebuild_and_catch_up,
);
