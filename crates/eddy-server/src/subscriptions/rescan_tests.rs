//! Issue 33: the rescan (every 30th sweep on every server, and after the
//! commit feed lagged) listed every stream of every subscription's base
//! in one pass: on DynamoDB every directory entry and every record. It
//! reads a slice per base now, the paths and the tails of the streams
//! its subscriptions watch among them, each rescan going on where the
//! last stopped, and it still finds a commit no server recorded.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_dynamo::Table;
use eddy_streams::{Append, Payload, Storage, StreamConfig, StreamPath};
use tower::ServiceExt;

use super::listing::SLICE_STREAMS;
use super::{registry, wake};
use crate::{AppState, ServerConfig};

/// The streams under the base that match the pattern.
const STREAMS: usize = 2_500;

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

#[tokio::test]
async fn a_rescan_reads_a_bounded_slice_of_each_base_and_finds_unrecorded_commits() {
    let table: Arc<dyn Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout("rescans"),
    ));
    let open = || {
        eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
            .expect("open")
    };
    let store = open();
    for at in ["app/wakes", "app/t/late"] {
        store
            .create(&path(at), StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
    }
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let config = ServerConfig {
        max_subscription_matches: 10,
        // No sweep of its own during the test: the rescans are called.
        subscription_sweep_interval: Duration::from_secs(3_600),
        ..ServerConfig::default()
    };
    let state = AppState::new(Arc::new(store), config, stopping);
    let subscribe = Request::builder()
        .method("PUT")
        .uri("/app/__ds/subscriptions/s")
        .body(Body::from(
            r#"{"type":"pull-wake","pattern":"s/*","streams":["t/late"],"wake_stream":"wakes"}"#,
        ))
        .expect("request");
    let created = crate::app(state.clone()).oneshot(subscribe).await;
    assert_eq!(created.expect("infallible").status(), StatusCode::CREATED);
    let registry = registry(&state).await.expect("registry");

    // Streams and a commit made through another server, which this one
    // hears of only from the store.
    let other = open();
    for n in 0..STREAMS {
        let at = path(&format!("app/s/{n:05}"));
        let created = other.create(&at, StreamConfig::json(), Payload::empty());
        created.await.expect("create");
    }
    let late = path("app/t/late");
    other
        .append(&late, Append::body("{}"))
        .await
        .expect("append");

    for rescan in 1..=STREAMS.div_ceil(SLICE_STREAMS) {
        let before = table.request_stats();
        wake::rescan(&registry).await;
        let cost = table.request_stats() - before;
        eprintln!("rescan {rescan}: {cost:?}");
        // Its slice's paths and records, the subscription's document
        // read and written, and a wake event at most.
        assert!(
            cost.items_read <= 2 * SLICE_STREAMS as u64 + 10,
            "rescan {rescan} read {} items: {cost:?}",
            cost.items_read
        );
    }
    let (sub, _) = registry.load("s").await.expect("load").expect("stored");
    let watched = &sub.streams["t/late"];
    assert!(
        watched.tail > watched.acked,
        "the unrecorded commit was found: {watched:?}"
    );
    assert_eq!(sub.matched(), 10, "as many matches as it may watch");

    // A claim's refresh of a subscription with no room for more matches
    // reads the tails of the eleven streams it watches alone: the whole
    // base's paths fit in its slice.
    let before = table.request_stats();
    wake::refresh(&registry, "s").await.expect("refresh");
    let cost = table.request_stats() - before;
    eprintln!("a refresh at the match limit: {cost:?}");
    assert!(
        cost.items_read <= (STREAMS + 2 + 11 + 2) as u64,
        "read {} items: {cost:?}",
        cost.items_read
    );
    drop(stop);
}
