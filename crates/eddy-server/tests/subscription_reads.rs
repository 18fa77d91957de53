//! What a pattern subscription's create reads from a DynamoDB store
//! (issue 33: no request reads every stream). It read every stream under
//! its base (every directory entry, then every record) to take the tails
//! of its pattern's matches; it lists the paths under the pattern's
//! literal prefix now (the directory alone) and reads the matches' tails
//! only, and a create refused for too many matches stops reading once it
//! knows.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_dynamo::{RequestStats, Table};
use eddy_server::{app, App, AppState, ServerConfig};
use eddy_streams::{Payload, Storage, StreamConfig, StreamPath};
use tokio::sync::watch;
use tower::ServiceExt;

/// The streams under the base: 2 000, of which the first ten hundredths
/// (`app/streams/00000.hot`, `…/00100.hot`, … `…/00900.hot`) match the
/// pattern `streams/*.hot`.
const STREAMS: usize = 2_000;
const MATCHES: usize = 10;

/// An app on a fresh DynamoDB store (the embedded table) holding the
/// streams, and its table.
async fn base(config: ServerConfig) -> (App, Arc<dyn Table>, watch::Sender<bool>) {
    let table: Arc<dyn Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout("subscription-reads"),
    ));
    let store = eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
        .expect("open");
    for n in 0..STREAMS {
        let hot = if n % 100 == 0 && n / 100 < MATCHES {
            ".hot"
        } else {
            ""
        };
        let path = StreamPath::new(format!("app/streams/{n:05}{hot}")).expect("path");
        store
            .create(&path, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
    }
    store
        .create(
            &StreamPath::new("app/wakes").expect("path"),
            StreamConfig::json(),
            Payload::empty(),
        )
        .await
        .expect("create");
    let (stop, stopping) = watch::channel(false);
    let app = app(AppState::new(Arc::new(store), config, stopping));
    // The subscription registry starts at the first request (it reads
    // the store's signing key and subscriptions): not counted below.
    assert_eq!(
        call(&app, "GET", "/app/__ds/subscriptions/none", "")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    (app, table, stop)
}

async fn call(app: &App, method: &str, uri: &str, body: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Creates subscription `id` on the pattern, counting the table's
/// requests.
async fn subscribe(app: &App, table: &Arc<dyn Table>, id: &str) -> (StatusCode, RequestStats) {
    let body = r#"{"type":"pull-wake","pattern":"streams/*.hot","wake_stream":"wakes"}"#;
    let before = table.request_stats();
    let (status, answer) = call(app, "PUT", &format!("/app/__ds/subscriptions/{id}"), body).await;
    let cost = table.request_stats() - before;
    eprintln!("{id}: {status} {answer}\n{cost:?}");
    (status, cost)
}

/// The create lists the 2 000 paths (two `Query`s of the directory) and
/// reads the ten matches' records, one `GetItem` each; before, it read
/// the 2 001 records too (4 002 items).
#[tokio::test]
async fn a_pattern_subscription_reads_the_tails_of_its_matches_only() {
    let (app, table, stop) = base(ServerConfig::default()).await;
    let (status, cost) = subscribe(&app, &table, "s").await;
    assert_eq!(status, StatusCode::CREATED);
    // The directory's entries under `app/streams/`, the ten records, and
    // the subscription's document (its insert reads nothing back).
    assert!(
        cost.items_read <= (STREAMS + MATCHES + 2) as u64,
        "read {} items: {cost:?}",
        cost.items_read
    );
    assert!(
        cost.reads + cost.transactions <= (2 + MATCHES + 2) as u64,
        "{cost:?}"
    );
    let (_, described) = call(&app, "GET", "/app/__ds/subscriptions/s", "").await;
    let described: serde_json::Value = serde_json::from_str(&described).expect("json");
    assert_eq!(
        described["streams"].as_array().map(Vec::len),
        Some(MATCHES),
        "{described}"
    );
    drop(stop);
}

/// With room for five matches, the create is refused once the sixth live
/// match is read: in the first page of paths, before the second.
#[tokio::test]
async fn a_create_with_too_many_matches_stops_reading_once_it_knows() {
    let config = ServerConfig {
        max_subscription_matches: 5,
        ..ServerConfig::default()
    };
    let (app, table, stop) = base(config).await;
    let (status, cost) = subscribe(&app, &table, "over").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        cost.items_read <= 1_000 + 6,
        "read {} items: {cost:?}",
        cost.items_read
    );
    drop(stop);
}
