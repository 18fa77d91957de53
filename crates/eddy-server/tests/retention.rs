//! Retention over HTTP: `Eddy-Retention` on create, its echo, the
//! earliest offset on `HEAD`, `410 Gone` before it, and the server's
//! rules by path pattern.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::{MemoryStorage, Storage};

use crate::router::{fast, header, req, send, send_empty};

/// The application over `store`.
fn over(store: Arc<dyn Storage>, config: ServerConfig) -> eddy_server::App {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    std::mem::forget(stop);
    app(AppState::new(store, config, stopping))
}

fn put(uri: &str, retention: Option<&str>) -> axum::http::Request<Body> {
    let mut request = req("PUT", uri).header("content-type", "text/plain");
    if let Some(policy) = retention {
        request = request.header("eddy-retention", policy);
    }
    request.body(Body::empty()).expect("request")
}

#[tokio::test]
async fn a_policy_is_set_on_create_echoed_and_part_of_the_config() {
    let app = over(Arc::new(MemoryStorage::new()) as Arc<dyn Storage>, fast());
    let (created, _) = send(&app, put("/r", Some("bytes = 10KiB; messages=2"))).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(
        header(&created, "eddy-retention"),
        Some("messages=2; bytes=10KiB"),
        "echoed in its canonical form"
    );
    let (again, _) = send(&app, put("/r", Some("messages=2; bytes=10240"))).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "the same policy, written otherwise"
    );
    let (other, _) = send(&app, put("/r", Some("messages=3"))).await;
    assert_eq!(other.status(), StatusCode::CONFLICT);
    assert_eq!(header(&other, "eddy-error"), Some("stream/config-conflict"));
    let (none, _) = send(&app, put("/r", None)).await;
    assert_eq!(none.status(), StatusCode::CONFLICT);

    let (bad, body) = send(&app, put("/bad", Some("messages=0; age=7"))).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&bad, "eddy-error"), Some("retention/invalid"));
    assert!(
        body.contains("above 0") && body.contains("age=7d"),
        "{body}"
    );
    let (absent, _) = send_empty(&app, "HEAD", "/bad").await;
    assert_eq!(
        absent.status(),
        StatusCode::NOT_FOUND,
        "a refused create made nothing"
    );

    let (plain, _) = send(&app, put("/plain", None)).await;
    assert_eq!(header(&plain, "eddy-retention"), None);
}

#[tokio::test]
async fn a_read_before_the_earliest_offset_is_gone_and_head_shows_it() {
    gone_before_the_earliest_offset(Arc::new(MemoryStorage::new())).await;
}

/// The same on DynamoDB (the embedded table), which refused policies
/// before (issue 34).
#[tokio::test]
async fn a_read_before_the_earliest_offset_is_gone_on_dynamodb() {
    let table = eddy_dynamo::EmbeddedTable::memory(eddy_streams_dynamodb::layout(format!(
        "retention-{:08x}",
        fastrand::u32(..)
    )));
    let options = eddy_streams_dynamodb::options();
    let store = eddy_streams_dynamodb::open(Arc::new(table), options).expect("open");
    gone_before_the_earliest_offset(Arc::new(store)).await;
}

/// A stream keeping 2 messages of 3, swept: `HEAD` shows the earliest
/// offset, a read before it answers `410 offset/dropped` with it, and
/// `-1` and the earliest offset read what is kept.
async fn gone_before_the_earliest_offset(store: Arc<dyn Storage>) {
    let app = over(store.clone(), fast());
    let (created, _) = send(&app, put("/r", Some("messages=2"))).await;
    let start = header(&created, "stream-next-offset")
        .expect("offset")
        .to_owned();
    assert_eq!(
        header(&created, "eddy-earliest-offset"),
        Some(start.as_str())
    );
    for word in ["a", "b", "c"] {
        let append = req("POST", "/r")
            .header("content-type", "text/plain")
            .body(Body::from(word))
            .expect("request");
        assert_eq!(send(&app, append).await.0.status(), StatusCode::NO_CONTENT);
    }
    assert_eq!(store.sweep(64).await, Ok(1));

    let (head, _) = send_empty(&app, "HEAD", "/r").await;
    let earliest = header(&head, "eddy-earliest-offset")
        .expect("earliest")
        .to_owned();
    assert_ne!(earliest, start);
    assert!(earliest.ends_with("_0000000000000001"), "{earliest}");
    assert_eq!(header(&head, "eddy-retention"), Some("messages=2"));
    assert_eq!(header(&head, "eddy-stream-bytes"), Some("2"));

    let (gone, body) = send_empty(&app, "GET", &format!("/r?offset={start}")).await;
    assert_eq!(gone.status(), StatusCode::GONE);
    assert_eq!(header(&gone, "eddy-error"), Some("offset/dropped"));
    assert_eq!(
        header(&gone, "eddy-earliest-offset"),
        Some(earliest.as_str())
    );
    assert!(body.contains("retention"), "{body}");

    let (all, body) = send_empty(&app, "GET", "/r?offset=-1").await;
    assert_eq!(all.status(), StatusCode::OK);
    assert_eq!(body, "bc", "-1 reads what is kept");
    assert_eq!(header(&all, "eddy-retention"), Some("messages=2"));
    let (kept, body) = send_empty(&app, "GET", &format!("/r?offset={earliest}")).await;
    assert_eq!((kept.status(), body.as_str()), (StatusCode::OK, "bc"));
}

#[tokio::test]
async fn server_rules_give_a_policy_to_streams_created_without_one() {
    let config = ServerConfig {
        retention: vec![
            "logs/**=messages=1".parse().expect("rule"),
            "**=age=1d".parse().expect("rule"),
        ],
        ..fast()
    };
    let app = over(Arc::new(MemoryStorage::new()) as Arc<dyn Storage>, config);
    let (logs, _) = send(&app, put("/logs/app/1", None)).await;
    assert_eq!(header(&logs, "eddy-retention"), Some("messages=1"));
    let (other, _) = send(&app, put("/orders/1", None)).await;
    assert_eq!(header(&other, "eddy-retention"), Some("age=1d"));
    let (own, _) = send(&app, put("/logs/app/2", Some("messages=5"))).await;
    assert_eq!(
        header(&own, "eddy-retention"),
        Some("messages=5"),
        "the header wins"
    );
    let (none, _) = send(&app, put("/logs/app/3", Some("none"))).await;
    assert_eq!(header(&none, "eddy-retention"), None, "`none` opts out");
    let (again, _) = send(&app, put("/logs/app/1", None)).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "a repeated create matches the rule"
    );
}
