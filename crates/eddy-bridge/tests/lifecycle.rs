//! Exactly once in every lifecycle of a row (issue 33, part 2): a row
//! revived after its tombstone expired, a rebuild, two projections in one
//! stream, 20 000 rows in one stream. Each test asserts every effect once,
//! and each row's in outbox order, in the target stream.

use std::sync::Arc;

use eddy_bridge::{Route, StreamDelivery};
use eddy_dynamo::EmbeddedTable;
use eddy_streams::{MemoryStorage, SqliteStorage, Storage, StreamPath};

use crate::orders::{added, cancelled, kinds, notices, schema, Orders};

fn path(p: &str) -> StreamPath {
    StreamPath::new(p).expect("path")
}

/// A memory and a SQLite stream store.
fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn Storage>)> {
    vec![
        ("memory", Arc::new(MemoryStorage::new())),
        (
            "sqlite",
            Arc::new(SqliteStorage::open(dir).expect("sqlite")),
        ),
    ]
}

/// Every notice of a projection into `notices`, as one producer per row
/// and order.
fn delivery(store: &Arc<dyn Storage>, name: &str) -> StreamDelivery {
    StreamDelivery::new(Arc::clone(store), Route::Projection(path("notices")), name)
        .expect("delivery")
}

/// Drains every row; nothing may stay.
async fn drain(orders: &Orders, delivery: &StreamDelivery) {
    let report = orders.outbox.drain_pending(delivery).await.expect("drain");
    assert!(
        report.undelivered.is_empty() && report.parked.is_empty() && report.failed.is_empty(),
        "{report:?}"
    );
    assert!(orders
        .outbox
        .pending_rows()
        .await
        .expect("pending")
        .is_empty());
}

/// A row removed, its tombstone expired (the TTL sweep of the embedded
/// table, run at a time past it), then started again by a new order and
/// by a late event of the first one: its revision starts again, and each
/// notice is in the stream once, in order. (Before the identity fix the
/// revived row's notices were answered as fenced and lost.)
#[tokio::test]
async fn a_row_revived_after_its_tombstone_expired_delivers_each_notice_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let table = EmbeddedTable::memory(schema());
        let orders = Orders::new(&table, "ShipmentSummary", "shipments");
        let deliver = delivery(&store, &orders.name);
        let first = orders.append("o-1", &[added("sh-1", 1)]).await;
        orders.apply(first).await;
        drain(&orders, &deliver).await;
        let gone = orders.append("o-1", &[cancelled("sh-1")]).await;
        orders.apply(gone).await;
        drain(&orders, &deliver).await;
        assert_eq!(
            table.expire_items(u64::MAX / 2).await.expect("sweep"),
            1,
            "{kind}"
        );

        let revived = orders.append("o-2", &[added("sh-1", 2)]).await;
        orders.apply(revived).await;
        drain(&orders, &deliver).await;
        // The first order goes on: the row knows it no more, so it folds
        // its whole history again (1 and 2 are redeliveries) and 3 is new.
        let late = orders.append("o-1", &[added("sh-1", 3)]).await;
        orders.apply(late).await;
        drain(&orders, &deliver).await;

        let all = notices(&*store, "notices").await;
        assert_eq!(
            kinds(&all, "shipments", "sh-1"),
            [
                "ParcelAdded orderId=o-1@1",
                "OrderCancelled orderId=o-1@2",
                "ParcelAdded orderId=o-2@1",
                "ParcelAdded orderId=o-1@3",
            ],
            "{kind}"
        );
    }
}

/// A rebuild of a row whose notices were delivered enqueues none again; a
/// rebuild that applies a new event enqueues its notice only; a rebuild
/// while notices still wait leaves them to be delivered once.
#[tokio::test]
async fn a_rebuild_delivers_each_notice_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let table = EmbeddedTable::memory(schema());
        let orders = Orders::new(&table, "ShipmentSummary", "shipments");
        let deliver = delivery(&store, &orders.name);
        let events = orders
            .append("o-1", &[added("sh-1", 1), added("sh-1", 2)])
            .await;
        orders.apply(events).await;
        drain(&orders, &deliver).await;
        assert_eq!(orders.rebuild("sh-1", &["o-1"]).await, 0, "{kind}");
        orders.append("o-1", &[added("sh-1", 3)]).await;
        assert_eq!(orders.rebuild("sh-1", &["o-1"]).await, 1, "{kind}");
        // Pending while rebuilt again: nothing new, nothing twice.
        assert_eq!(orders.rebuild("sh-1", &["o-1"]).await, 0, "{kind}");
        drain(&orders, &deliver).await;
        let all = notices(&*store, "notices").await;
        assert_eq!(
            kinds(&all, "shipments", "sh-1"),
            [
                "ParcelAdded orderId=o-1@1",
                "ParcelAdded orderId=o-1@2",
                "ParcelAdded orderId=o-1@3",
            ],
            "{kind}"
        );
        assert_eq!(all.len(), 3, "{kind}");
    }
}

/// Two projections of the same orders (two read models) deliver into one
/// stream: their rows are different producers (the read model is in the
/// row key, the name in the id), so each projection's notices are all
/// there, once, in order. A name that could run into another's ids (a
/// `:`) is refused.
#[tokio::test]
async fn two_projections_share_a_stream_without_sharing_a_producer() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let table = EmbeddedTable::memory(schema());
        let a = Orders::new(&table, "SummaryA", "shipments");
        let b = Orders::new(&table, "SummaryB", "audit");
        let events = a
            .append(
                "o-1",
                &[added("sh-1", 1), added("sh-2", 1), added("sh-1", 2)],
            )
            .await;
        a.apply(events.clone()).await;
        b.apply(events).await;
        let (to_a, to_b) = (delivery(&store, &a.name), delivery(&store, &b.name));
        drain(&a, &to_a).await;
        drain(&b, &to_b).await;
        // Delivered again (a drainer whose claim expired): nothing twice.
        let again = b.append("o-1", &[added("sh-2", 5)]).await;
        a.apply(again.clone()).await;
        b.apply(again).await;
        drain(&b, &to_b).await;
        drain(&a, &to_a).await;

        let all = notices(&*store, "notices").await;
        for by in ["shipments", "audit"] {
            assert_eq!(
                kinds(&all, by, "sh-1"),
                ["ParcelAdded orderId=o-1@1", "ParcelAdded orderId=o-1@3"],
                "{kind}: {by}"
            );
            assert_eq!(
                kinds(&all, by, "sh-2"),
                ["ParcelAdded orderId=o-1@2", "ParcelAdded orderId=o-1@4"],
                "{kind}: {by}"
            );
        }
        assert_eq!(all.len(), 8, "{kind}");
    }
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    for bad in ["", "a:b", "with space", &"x".repeat(65)] {
        let refused = StreamDelivery::new(Arc::clone(&store), Route::Projection(path("n")), bad);
        assert_eq!(
            refused.err().map(|e| e.code()),
            Some("bridge/name"),
            "{bad:?}"
        );
    }
}

/// 20 000 rows into one stream with `Route::Projection`: every row and
/// order instance is a producer of that stream.
///
/// **Needs the producer cap change** (eddy-streams' per-stream producer
/// cap raised from 10 000 to 1 000 000, with producer state expiring
/// after a window, made by another branch of issue 33): until it is
/// merged the store refuses the 10 001st producer with `limit/producers`,
/// the bridge parks those rows, and this test fails. It is left running
/// on purpose.
#[tokio::test]
async fn twenty_thousand_rows_reach_one_stream() {
    const ROWS: usize = 20_000;
    let table = EmbeddedTable::memory(schema());
    let orders = Orders::new(&table, "ShipmentSummary", "shipments");
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let deliver = delivery(&store, &orders.name);
    let shipments: Vec<String> = (0..ROWS).map(|n| format!("sh-{n}")).collect();
    for (order, chunk) in shipments.chunks(eddy_dynamo::MAX_APPEND).enumerate() {
        let events: Vec<_> = chunk.iter().map(|s| added(s, 1)).collect();
        let items = orders.append(&format!("o-{order}"), &events).await;
        orders.apply(items).await;
    }
    let report = orders.outbox.drain_pending(&deliver).await.expect("drain");
    let parked: Vec<&str> = report
        .parked
        .iter()
        .take(3)
        .map(|p| p.failure.code.as_str())
        .collect();
    assert!(
        report.parked.is_empty(),
        "{} rows parked: {parked:?}",
        report.parked.len()
    );
    assert_eq!(report.delivered, ROWS);
    let all = notices(&*store, "notices").await;
    assert_eq!(all.len(), ROWS);
    let mut seen: Vec<&str> = all
        .iter()
        .filter_map(|n| n["shipmentId"].as_str())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), ROWS, "each row's notice once");
}
