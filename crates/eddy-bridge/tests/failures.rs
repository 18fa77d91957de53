//! Failures retrying cannot fix have a bounded, visible outcome (issue 33,
//! part 2): each permanent error of the store parks its row (shown as
//! parked with its code, the row's later notices held back, the other rows
//! delivered) until it is retried after a fix or skipped; or, with a
//! dead-letter stream, goes there once and the row goes on. A deleted
//! target is not created again unless the delivery allows it.

use std::sync::Arc;

use eddy_bridge::{BridgeError, Route, StreamDelivery};
use eddy_dynamo::{BoxError, EmbeddedTable, Item};
use eddy_streams::{
    Append, MemoryStorage, Payload, Storage, StreamConfig, StreamError, StreamPath,
};

use crate::orders::{added, kinds, notices, schema, Orders, PADDED_FROM};

fn path(p: &str) -> StreamPath {
    StreamPath::new(p).expect("path")
}

/// One way to make row sh-1's target refuse its notices for good.
#[derive(Debug, Clone, Copy)]
enum Breakage {
    /// The stream is closed.
    Closed,
    /// The stream was deleted.
    Deleted,
    /// The stream holds another content type.
    ContentType,
    /// The notice is larger than the store takes in one append.
    TooLarge,
    /// The route names a path longer than any path may be.
    PathTooLong,
    /// The stream has as many producers as the store keeps.
    ProducerLimit,
}

impl Breakage {
    const ALL: [Breakage; 6] = [
        Breakage::Closed,
        Breakage::Deleted,
        Breakage::ContentType,
        Breakage::TooLarge,
        Breakage::PathTooLong,
        Breakage::ProducerLimit,
    ];

    /// The stable code the failure has.
    fn code(self) -> &'static str {
        match self {
            Breakage::Closed => "stream/closed",
            Breakage::Deleted => "stream/gone",
            Breakage::ContentType => "append/content-type-mismatch",
            Breakage::TooLarge => "append/too-large",
            Breakage::PathTooLong => "bridge/route",
            Breakage::ProducerLimit => "limit/producers",
        }
    }

    /// Whether an operator can fix the target (delete it, create it
    /// again) and retry.
    fn fixable(self) -> bool {
        matches!(
            self,
            Breakage::Closed | Breakage::Deleted | Breakage::ContentType
        )
    }

    /// The store for this case.
    fn store(self) -> Arc<dyn Storage> {
        match self {
            // The padded notice is larger; its dead-letter record without
            // the payload is not.
            Breakage::TooLarge => {
                Arc::new(MemoryStorage::with_max_append_bytes(PADDED_FROM as usize))
            }
            Breakage::ProducerLimit => {
                Arc::new(MemoryStorage::new().with_max_producers_per_stream(1))
            }
            _ => Arc::new(MemoryStorage::new()),
        }
    }

    /// Sh-1's first parcels: padded past the store's limit when too
    /// large.
    fn parcels(self) -> u64 {
        match self {
            Breakage::TooLarge => PADDED_FROM,
            _ => 1,
        }
    }

    /// Breaks `rows/sh-1` in `store`.
    async fn apply(self, store: &dyn Storage) {
        let target = path("rows/sh-1");
        let json = StreamConfig::json();
        match self {
            Breakage::Closed => {
                store
                    .create(&target, json, Payload::empty())
                    .await
                    .expect("create");
                store
                    .append(&target, Append::close_only())
                    .await
                    .expect("close");
            }
            Breakage::Deleted => {
                store
                    .create(&target, json, Payload::empty())
                    .await
                    .expect("create");
                store.delete(&target).await.expect("delete");
            }
            Breakage::ContentType => {
                let text = StreamConfig {
                    content_type: "text/plain".into(),
                    ..StreamConfig::json()
                };
                store
                    .create(&target, text, Payload::empty())
                    .await
                    .expect("create");
            }
            Breakage::ProducerLimit => {
                store
                    .create(&target, json, Payload::empty())
                    .await
                    .expect("create");
                let other = eddy_streams::ProducerPosition::new("someone-else", 0, 0);
                store
                    .append(
                        &target,
                        Append::body(bytes::Bytes::from_static(b"[1]")).with_producer(other),
                    )
                    .await
                    .expect("a first producer");
            }
            Breakage::TooLarge | Breakage::PathTooLong => {}
        }
    }

    /// Each row's stream `rows/<shipment>`, sh-1's too long to be a path
    /// in the path case.
    fn route(self) -> Route {
        let too_long = matches!(self, Breakage::PathTooLong);
        Route::by(move |effect| {
            let notice: serde_json::Value = effect.decode()?;
            let shipment = notice["shipmentId"].as_str().unwrap_or_default();
            let path = if too_long && shipment == "sh-1" {
                format!("rows/{}", "x".repeat(4096))
            } else {
                format!("rows/{shipment}")
            };
            StreamPath::new(path).map_err(BoxError::from)
        })
    }
}

/// Notices of sh-1 (its target broken) and sh-2, folded, not delivered.
async fn fold(orders: &Orders, breakage: Breakage) {
    let events = orders
        .append(
            "o-1",
            &[
                added("sh-1", breakage.parcels()),
                added("sh-2", 1),
                added("sh-1", 2),
            ],
        )
        .await;
    orders.apply(events).await;
}

fn row(orders: &Orders, shipment: &str) -> Item {
    orders
        .freight
        .summaries
        .key(&crate::model::shipment(shipment))
        .expect("row key")
}

/// The bridge's report for `eddy status`, as published in the store.
async fn reported(store: &dyn Storage) -> eddy_streams::Report {
    let mut reports = eddy_streams::reports(store).await.expect("reports");
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report = reports.remove(0);
    assert_eq!(report.source, "bridge/shipments");
    report
}

/// Parked by default: sh-1 shows as parked with the failure's code (in
/// the outbox and in the store's report for `eddy status`) and is
/// held back (its second notice too) while sh-2 is delivered; drains
/// leave it alone; then retried after a fix (delivered in order) or
/// skipped to the dead-letter stream (there once; the row goes on).
#[tokio::test]
async fn each_permanent_failure_parks_its_row_until_retried_or_skipped() {
    for breakage in Breakage::ALL {
        let store = breakage.store();
        breakage.apply(&*store).await;
        let table = EmbeddedTable::memory(schema());
        let orders = Orders::new(&table, "ShipmentSummary", "shipments");
        let deliver = StreamDelivery::new(Arc::clone(&store), breakage.route(), "shipments")
            .expect("delivery")
            .skip_to(path("dead"));
        fold(&orders, breakage).await;

        let report = orders.outbox.drain_pending(&deliver).await.expect("drain");
        assert_eq!(report.parked.len(), 1, "{breakage:?}: {report:?}");
        assert_eq!(
            report.parked[0].failure.code,
            breakage.code(),
            "{breakage:?}"
        );
        // `eddy status` on the store shows it.
        let shown = reported(&*store).await;
        assert_eq!(shown.summary, "1 parked row", "{breakage:?}");
        assert_eq!(shown.items.len(), 1, "{breakage:?}");
        assert_eq!(shown.items[0].code, breakage.code(), "{breakage:?}");
        assert!(
            shown.items[0].subject.contains("sh-1"),
            "{breakage:?}: {shown:?}"
        );
        assert_eq!(report.parked[0].effect.version, 1, "{breakage:?}");
        let rows = orders.outbox.pending_rows().await.expect("pending");
        assert_eq!(rows.len(), 1, "{breakage:?}");
        assert!(rows[0].is_parked() && rows[0].effects == 2, "{breakage:?}");
        // Another pass leaves it parked, and tries nothing.
        let again = orders.outbox.drain_pending(&deliver).await.expect("drain");
        assert_eq!(
            (again.delivered, again.parked.len()),
            (0, 1),
            "{breakage:?}"
        );
        let failures = orders
            .outbox
            .pending(&row(&orders, "sh-1"))
            .await
            .expect("pending");
        assert_eq!(
            failures.head_failure.map(|f| f.failures),
            Some(1),
            "{breakage:?}"
        );
        assert_eq!(
            kinds(&notices(&*store, "rows/sh-2").await, "shipments", "sh-2"),
            ["ParcelAdded orderId=o-1@2"],
            "{breakage:?}"
        );

        if breakage.fixable() {
            // Fixed: the stream made again, the row retried.
            let target = path("rows/sh-1");
            let _ = store.delete(&target).await;
            store
                .create(&target, StreamConfig::json(), Payload::empty())
                .await
                .expect("create again");
            let unparked = orders
                .outbox
                .unpark(&row(&orders, "sh-1"))
                .await
                .expect("unpark");
            assert!(unparked.is_some(), "{breakage:?}");
            let report = orders.outbox.drain_pending(&deliver).await.expect("drain");
            assert_eq!(
                (report.delivered, report.parked.len()),
                (2, 0),
                "{breakage:?}"
            );
            let shown = reported(&*store).await;
            assert_eq!(
                (shown.summary.as_str(), shown.items_total),
                ("no parked rows", 0),
                "{breakage:?}"
            );
            assert_eq!(
                kinds(&notices(&*store, "rows/sh-1").await, "shipments", "sh-1"),
                ["ParcelAdded orderId=o-1@1", "ParcelAdded orderId=o-1@3"],
                "{breakage:?}"
            );
        } else {
            // Skipped to the dead-letter stream, as `skip --dead-letter`
            // does; twice (a crash before the drop), recorded once.
            let parked = orders
                .outbox
                .parked(&row(&orders, "sh-1"))
                .await
                .expect("parked")
                .expect("a parked head");
            for _ in 0..2 {
                deliver
                    .dead_letter_effect(&parked.effect, &parked.failure)
                    .await
                    .expect("dead letter");
            }
            assert!(orders
                .outbox
                .drop_parked(&row(&orders, "sh-1"), &parked.effect)
                .await
                .expect("drop"));
            let dead = notices(&*store, "dead").await;
            assert_eq!(dead.len(), 1, "{breakage:?}");
            assert_eq!(dead[0]["error"]["code"], breakage.code(), "{breakage:?}");
            assert_eq!(dead[0]["version"], 1, "{breakage:?}");
            assert_eq!(dead[0]["projection"], "shipments", "{breakage:?}");
            // The row goes on, to its next notice.
            let report = orders.outbox.drain_pending(&deliver).await.expect("drain");
            assert_eq!(
                report.parked.first().map(|p| p.effect.version),
                match breakage {
                    // Its second notice is small and its path fine.
                    Breakage::TooLarge => None,
                    _ => Some(3),
                },
                "{breakage:?}"
            );
        }
    }
}

/// With a dead-letter stream, each permanent failure goes there once
/// (with the effect's identity, row, payload and error) and the row goes
/// on; a redelivery of the same effect adds nothing.
#[tokio::test]
async fn with_a_dead_letter_stream_each_permanent_failure_goes_there_once() {
    for breakage in Breakage::ALL {
        let store = breakage.store();
        breakage.apply(&*store).await;
        let table = EmbeddedTable::memory(schema());
        let orders = Orders::new(&table, "ShipmentSummary", "shipments");
        let deliver = StreamDelivery::new(Arc::clone(&store), breakage.route(), "shipments")
            .expect("delivery")
            .dead_letter(path("dead"));
        fold(&orders, breakage).await;
        let first = orders
            .outbox
            .pending(&row(&orders, "sh-1"))
            .await
            .expect("pending")
            .head
            .expect("a head");
        let report = orders.outbox.drain_pending(&deliver).await.expect("drain");
        assert!(report.parked.is_empty(), "{breakage:?}: {report:?}");
        assert!(orders
            .outbox
            .pending_rows()
            .await
            .expect("pending")
            .is_empty());
        // Delivered again (a drainer whose claim expired): nothing twice.
        let again = deliver.deliver_effect(&first).await.expect("again");
        assert_eq!(again, eddy_bridge::Delivered::DeadLettered(breakage.code()));

        let dead = notices(&*store, "dead").await;
        let dead_versions: Vec<u64> = dead.iter().filter_map(|d| d["version"].as_u64()).collect();
        let sh1 = kinds(&notices(&*store, "rows/sh-1").await, "shipments", "sh-1");
        match breakage {
            // Only the padded first notice is too large.
            Breakage::TooLarge => {
                assert_eq!(dead_versions, [1], "{breakage:?}");
                assert_eq!(sh1, ["ParcelAdded orderId=o-1@3"], "{breakage:?}");
            }
            _ => {
                assert_eq!(dead_versions, [1, 3], "{breakage:?}");
                assert!(sh1.is_empty(), "{breakage:?}");
            }
        }
        let record = &dead[0];
        assert_eq!(record["error"]["code"], breakage.code(), "{breakage:?}");
        assert!(record["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(record["streamId"], "orderId=o-1");
        assert_eq!(record["index"], 0);
        match breakage {
            // Too large with its payload for the dead-letter stream too.
            Breakage::TooLarge => assert!(record["payloadOmitted"].is_string(), "{record}"),
            _ => assert_eq!(record["payload"]["shipmentId"], "sh-1"),
        }
        assert!(record["row"]["pk"].is_string(), "{record}");
        assert_eq!(
            kinds(&notices(&*store, "rows/sh-2").await, "shipments", "sh-2"),
            ["ParcelAdded orderId=o-1@2"],
            "{breakage:?}"
        );
    }
}

/// A stream that was deleted is not created again for the next effect
/// (`stream/gone`, permanent), unless the delivery allows it; one that
/// never existed is created.
#[tokio::test]
async fn a_deleted_target_is_created_again_only_when_allowed() {
    let table = EmbeddedTable::memory(schema());
    let orders = Orders::new(&table, "ShipmentSummary", "shipments");
    let events = orders.append("o-1", &[added("sh-1", 1)]).await;
    orders.apply(events).await;
    let effect = orders
        .outbox
        .pending(&row(&orders, "sh-1"))
        .await
        .expect("pending")
        .head
        .expect("a head");
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let target = path("rows/sh-1");
    let strict = StreamDelivery::new(Arc::clone(&store), Breakage::Closed.route(), "shipments")
        .expect("delivery");
    // Never existed: created.
    assert!(matches!(
        strict.deliver_effect(&effect).await,
        Ok(eddy_bridge::Delivered::Appended(_))
    ));
    store.delete(&target).await.expect("delete");
    match strict.deliver_effect(&effect).await {
        Err(
            e @ BridgeError::Store {
                source: StreamError::Gone { .. },
                ..
            },
        ) => {
            assert!(e.is_permanent());
            assert_eq!(e.code(), "stream/gone");
        }
        other => panic!("expected stream/gone, got {other:?}"),
    }
    assert!(matches!(
        store.head(&target).await,
        Err(StreamError::Gone { .. })
    ));
    let lenient = strict.clone().recreate_deleted(true);
    assert!(matches!(
        lenient.deliver_effect(&effect).await,
        Ok(eddy_bridge::Delivered::Appended(_))
    ));
    assert_eq!(notices(&*store, "rows/sh-1").await.len(), 1);
}

/// What is permanent: every store error whose kind retrying cannot fix
/// (a refused authorization from a remote store included), never an
/// unavailable store.
#[test]
fn permanent_is_decided_by_the_store_errors_kind() {
    let store = |source| BridgeError::Store {
        path: "p".into(),
        source,
    };
    assert!(store(StreamError::Unauthorized("no".into())).is_permanent());
    assert!(store(StreamError::Gone { path: "p".into() }).is_permanent());
    assert!(!store(StreamError::unavailable("down")).is_permanent());
    assert!(BridgeError::Route("no route".into()).is_permanent());
}
