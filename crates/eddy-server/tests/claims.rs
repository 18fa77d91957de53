//! What a pull-wake claim asks of the store (issue 33: no request reads
//! every stream). A claim reads the subscription's streams from the store
//! only when it has nothing pending to hand out (the commits recorded on
//! it already name the work, and a commit recorded later wakes it again),
//! and then a bounded slice of its base (its paths, and the tails of the
//! streams it watches among them), each claim going on from where the
//! last one stopped.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_server::{app, App, AppState, ServerConfig};
use eddy_streams::{Payload, Storage, StreamConfig, StreamPath};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::support::Counted;

/// Whether the subscription has data past what it acknowledged.
async fn pending(app: &App) -> bool {
    let request = Request::builder()
        .uri("/app/__ds/subscriptions/s")
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    let described: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    described["streams"][0]["has_pending"] == true
}

async fn call(app: &App, method: &str, uri: &str, body: &str) -> StatusCode {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    app.clone()
        .oneshot(request)
        .await
        .expect("infallible")
        .status()
}

#[tokio::test]
async fn a_claim_with_work_pending_lists_no_stream() {
    let store = Arc::new(Counted::new());
    let (stop, stopping) = watch::channel(false);
    let app = app(AppState::new(
        Arc::clone(&store) as Arc<dyn eddy_streams::Storage>,
        ServerConfig::default(),
        stopping,
    ));
    assert_eq!(
        call(&app, "PUT", "/app/wakes", "").await,
        StatusCode::CREATED
    );
    assert_eq!(
        call(&app, "PUT", "/app/jobs/1", "").await,
        StatusCode::CREATED
    );
    let subscribe = r#"{"type":"pull-wake","streams":["jobs/1"],"wake_stream":"wakes"}"#;
    let created = call(&app, "PUT", "/app/__ds/subscriptions/s", subscribe).await;
    assert_eq!(created, StatusCode::CREATED);
    assert_eq!(
        call(&app, "POST", "/app/jobs/1", r#"{"n":1}"#).await,
        StatusCode::NO_CONTENT
    );

    // Once the append is recorded on the subscription, a claim answers
    // from the subscription alone.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pending(&app).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the append was never recorded"
        );
        tokio::task::yield_now().await;
    }
    let claim = |worker: &'static str| {
        let app = app.clone();
        async move {
            let body = format!(r#"{{"worker":"{worker}"}}"#);
            call(&app, "POST", "/app/__ds/subscriptions/s/claim", &body).await
        }
    };
    let before = store.lists();
    assert_eq!(claim("w1").await, StatusCode::OK);
    assert_eq!(store.lists(), before, "the claim listed the store");
    // A held lease is refused without reading anything.
    let before = store.lists();
    assert_eq!(claim("w2").await, StatusCode::CONFLICT);
    assert_eq!(store.lists(), before);
    drop(stop);
}

async fn claim_as(app: &App, worker: &str) -> StatusCode {
    let body = format!(r#"{{"worker":"{worker}"}}"#);
    call(app, "POST", "/app/__ds/subscriptions/s/claim", &body).await
}

/// On DynamoDB, with 2 500 streams under a pattern subscription's base
/// (25 of them matching its pattern), a claim with nothing recorded
/// lists the base's paths (the directory alone, three `Query`s) and
/// reads the records of the 25 matches only: at first every directory
/// entry and every record (5 000 items); then a thousand records a claim
/// (2 100 items).
#[tokio::test]
async fn an_idle_claim_reads_the_records_of_its_matches_only() {
    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout("claims"),
    ));
    let store = Arc::new(
        eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
            .expect("open"),
    );
    let (stop, stopping) = watch::channel(false);
    let app = app(AppState::new(
        Arc::clone(&store) as Arc<dyn Storage>,
        ServerConfig::default(),
        stopping,
    ));
    assert_eq!(
        call(&app, "PUT", "/app/wakes", "").await,
        StatusCode::CREATED
    );
    for n in 0..2_500 {
        // Under the subscription's base, matching its pattern or not.
        let kind = if n % 100 == 0 { "jobs" } else { "other" };
        let path = StreamPath::new(format!("app/{kind}/{n:05}")).expect("path");
        store
            .create(&path, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
    }
    let subscribe = r#"{"type":"pull-wake","pattern":"jobs/*","wake_stream":"wakes"}"#;
    let created = call(&app, "PUT", "/app/__ds/subscriptions/s", subscribe).await;
    assert_eq!(created, StatusCode::CREATED);

    for claim in ["the first", "the next"] {
        let before = table.request_stats();
        assert_eq!(claim_as(&app, "w0").await, StatusCode::NO_CONTENT);
        let read = table.request_stats() - before;
        // The 2 501 paths, the 25 records and the subscription's
        // document.
        assert!(
            read.items_read <= 2_501 + 25 + 5,
            "{claim} claim read {} items: {read:?}",
            read.items_read
        );
    }
    drop(stop);
}
