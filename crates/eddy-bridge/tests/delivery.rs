//! Effects delivered into streams: once, in each row's order, on every
//! kind of store.

use std::sync::Arc;

use bytes::Bytes;
use eddy_bridge::{Delivered, Route, StreamDelivery};
use eddy_dynamo::{s, AttributeValue, Effect, EmbeddedTable, Item, StreamId};
use eddy_streams::{MemoryStorage, ReadFrom, SqliteStorage, Storage, StreamPath};

use crate::{expect, model, scenario};

/// A fresh store of each kind: memory, SQLite, DynamoDB (over the
/// embedded table).
fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn Storage>)> {
    let dynamodb = eddy_streams_dynamodb::open(
        Arc::new(EmbeddedTable::memory(eddy_streams_dynamodb::layout(
            "streams",
        ))),
        eddy_streams_dynamodb::options(),
    )
    .expect("dynamodb");
    vec![
        ("memory", Arc::new(MemoryStorage::new())),
        (
            "sqlite",
            Arc::new(SqliteStorage::open(dir).expect("sqlite")),
        ),
        ("dynamodb", Arc::new(dynamodb)),
    ]
}

fn path(p: &str) -> StreamPath {
    StreamPath::new(p).expect("path")
}

async fn messages(store: &dyn Storage, p: &str) -> Vec<serde_json::Value> {
    let chunk = store
        .read(&path(p), ReadFrom::Beginning, usize::MAX)
        .await
        .expect("read");
    chunk
        .messages
        .iter()
        .map(|m| serde_json::from_slice(m).expect("json"))
        .collect()
}

/// The freight scenario folded record by record, every scan's notice
/// delivered into one stream of the projection: each notice once, each
/// shipment's in scan order.
#[tokio::test]
async fn the_freight_notices_reach_one_stream_once_in_each_rows_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let table = EmbeddedTable::memory(model::schema("freight"));
        let freight = model::Freight::new(Arc::new(table.clone())).expect("freight");
        let outbox = freight.outbox().expect("outbox");
        let shipments = freight
            .projection(Some(Arc::new(outbox.clone())))
            .expect("projection");
        let notices = StreamDelivery::new(
            Arc::clone(&store),
            Route::Projection(path("freight/notices")),
            "shipments",
        )
        .expect("delivery");
        scenario::append(&freight).await.expect("append");
        scenario::fold(&table, &shipments, &notices, 1)
            .await
            .expect("fold");
        assert!(
            outbox.pending_rows().await.expect("pending").is_empty(),
            "{kind}"
        );
        let all = messages(&*store, "freight/notices").await;
        for id in ["sh-1", "sh-2", "sh-3"] {
            let kinds: Vec<&str> = all
                .iter()
                .filter(|n| n["shipmentId"] == id)
                .map(|n| n["kind"].as_str().expect("kind"))
                .collect();
            assert_eq!(kinds, expect::all_notices(id), "{kind}: {id}");
        }
    }
}

fn effect(revision: u64, position: u32, payload: AttributeValue) -> Effect {
    Effect {
        row: Item::from([
            ("pk".to_owned(), s("freight#v1#Ship#id=sh/1")),
            ("sk".to_owned(), s("summary")),
        ]),
        source: "scan".into(),
        stream_id: "shipmentId=sh-1".parse::<StreamId>().expect("stream id"),
        version: revision,
        revision,
        position,
        index: position,
        payload,
    }
}

/// An effect of event `version` of the row's one stream, committed by
/// the row write of `revision` at `position`.
fn effect_of(version: u64, revision: u64, position: u32, payload: AttributeValue) -> Effect {
    Effect {
        version,
        index: 0,
        ..effect(revision, position, payload)
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::M(Item::from([(
        "n".to_owned(),
        AttributeValue::N(n.to_string()),
    )]))
}

/// Redeliveries append nothing: the effect last appended is a duplicate,
/// an older one (a second drainer after an expired claim) is superseded.
#[tokio::test]
async fn redeliveries_append_nothing_on_every_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let rows = StreamDelivery::new(
            Arc::clone(&store),
            Route::Row {
                prefix: path("rows"),
            },
            "shipments",
        )
        .expect("delivery");
        let stream = "rows/freight%23v1%23Ship%23id=sh%2F1/summary";
        let deliver = |revision, position, n| {
            let rows = rows.clone();
            async move {
                rows.deliver_effect(&effect(revision, position, number(n)))
                    .await
            }
        };
        assert!(
            matches!(deliver(3, 0, 1).await, Ok(Delivered::Appended(_))),
            "{kind}"
        );
        assert_eq!(
            deliver(3, 0, 1).await.ok(),
            Some(Delivered::Duplicate),
            "{kind}"
        );
        assert!(
            matches!(deliver(3, 1, 2).await, Ok(Delivered::Appended(_))),
            "{kind}"
        );
        // An earlier effect of the same event, once a later one is in.
        assert_eq!(
            deliver(3, 0, 1).await.ok(),
            Some(Delivered::Superseded),
            "{kind}"
        );
        assert!(
            matches!(deliver(5, 0, 3).await, Ok(Delivered::Appended(_))),
            "{kind}"
        );
        assert_eq!(
            deliver(3, 1, 2).await.ok(),
            Some(Delivered::Superseded),
            "{kind}"
        );
        let got = messages(&*store, stream).await;
        let want: Vec<serde_json::Value> = (1..=3).map(|n| serde_json::json!({ "n": n })).collect();
        assert_eq!(got, want, "{kind}");
    }
}

/// Regression: a row's revision starts again when its tombstone's TTL
/// expires; the revived row's first effect (revision 1) was answered as
/// fenced by the effect of revision 5 and reported delivered without
/// being appended.
#[tokio::test]
async fn a_revived_rows_effects_are_appended() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let notices = StreamDelivery::new(Arc::clone(&store), Route::Projection(path("n")), "p")
            .expect("delivery");
        let before = notices.deliver_effect(&effect_of(5, 5, 0, number(1))).await;
        assert!(matches!(before, Ok(Delivered::Appended(_))), "{kind}");
        let revived = notices.deliver_effect(&effect_of(6, 1, 0, number(2))).await;
        assert!(
            matches!(revived, Ok(Delivered::Appended(_))),
            "{kind}: {revived:?}"
        );
        let want: Vec<serde_json::Value> = (1..=2).map(|n| serde_json::json!({ "n": n })).collect();
        assert_eq!(messages(&*store, "n").await, want, "{kind}");
    }
}

/// Regression: `rebuild` re-enqueues effects already delivered under a
/// new revision (and maybe another position); they were appended again.
#[tokio::test]
async fn a_rebuilds_effects_are_not_appended_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, store) in stores(dir.path()) {
        let notices = StreamDelivery::new(Arc::clone(&store), Route::Projection(path("n")), "p")
            .expect("delivery");
        for version in 1..=3 {
            let first = notices
                .deliver_effect(&effect_of(version, version, 0, number(version)))
                .await;
            assert!(matches!(first, Ok(Delivered::Appended(_))), "{kind}");
        }
        // The rebuild writes all three events in one row write.
        for version in 1..=3 {
            let again = notices
                .deliver_effect(&effect_of(version, 9, version as u32 - 1, number(version)))
                .await;
            assert!(
                matches!(again, Ok(Delivered::Duplicate | Delivered::Superseded)),
                "{kind}: {version}: {again:?}"
            );
        }
        let want: Vec<serde_json::Value> = (1..=3).map(|n| serde_json::json!({ "n": n })).collect();
        assert_eq!(messages(&*store, "n").await, want, "{kind}");
    }
}

/// A payload that is a JSON array is one message, and an encoder makes
/// any message.
#[tokio::test]
async fn each_effect_is_one_message() {
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let list = AttributeValue::L(vec![
        AttributeValue::N("1".into()),
        AttributeValue::N("2".into()),
    ]);
    let plain = StreamDelivery::new(Arc::clone(&store), Route::Projection(path("a")), "p")
        .expect("delivery");
    plain
        .deliver_effect(&effect(1, 0, list.clone()))
        .await
        .expect("deliver");
    assert_eq!(messages(&*store, "a").await, [serde_json::json!([1, 2])]);

    let encoded = StreamDelivery::new(Arc::clone(&store), Route::Projection(path("b")), "p")
        .expect("delivery")
        .with_encoder(|effect| {
            Ok(Bytes::from(format!(
                "\"{}-{}\"",
                effect.revision, effect.position
            )))
        });
    encoded
        .deliver_effect(&effect_of(7, 7, 2, list))
        .await
        .expect("deliver");
    assert_eq!(messages(&*store, "b").await, [serde_json::json!("7-2")]);
}

/// Rows and their event streams get distinct producers and paths; long
/// keys a digest.
#[test]
fn rows_name_their_producers_and_paths() {
    let one = effect(1, 0, number(1));
    assert_eq!(
        eddy_bridge::producer_id("shipments", &one),
        "shipments:freight%23v1%23Ship%23id=sh%2F1/summary:shipmentId=sh-1"
    );
    let position = eddy_bridge::producer_position("shipments", &effect_of(3, 8, 7, number(1)))
        .expect("a position");
    let per_event = eddy_dynamo::MAX_EFFECTS_PER_WRITE as u64 + 1;
    assert_eq!((position.epoch, position.seq), (3 * per_event, 0));
    let mut long = one.clone();
    long.row.insert("sk".into(), s("x".repeat(300)));
    let id = eddy_bridge::producer_id("shipments", &long);
    assert!(
        id.starts_with("shipments:sha256:") && id.len() < 100,
        "{id}"
    );
}
