//! Limits on what clients can create: each over-limit answer names the
//! limit, so an operator knows which flag to raise.

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::ServerConfig;

use crate::router::{fast, header, json_body, req, router, send, send_empty};

fn subscribe(id: &str, streams: &[&str]) -> axum::http::Request<Body> {
    let body = serde_json::json!({
        "type": "pull-wake",
        "streams": streams,
        "wake_stream": "wake",
    });
    req("PUT", &format!("/v1/__ds/subscriptions/{id}"))
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// Regression: subscriptions were unlimited; a client could make them
/// until the server ran out of memory.
#[tokio::test]
async fn subscriptions_over_the_server_limit_are_503_naming_it() {
    let app = router(ServerConfig {
        max_subscriptions: 1,
        ..fast()
    });
    let (first, _) = send(&app, subscribe("a", &["x"])).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let (again, _) = send(&app, subscribe("a", &["x"])).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "re-creating is not a new one"
    );
    let (refused, body) = send(&app, subscribe("b", &["x"])).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let error = &json_body(&body)["error"];
    assert_eq!(error["code"], "LIMIT_REACHED");
    assert_eq!(error["limit"], "max_subscriptions");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains('1')),
        "{body}"
    );
    send_empty(&app, "DELETE", "/v1/__ds/subscriptions/a").await;
    let (after_delete, _) = send(&app, subscribe("b", &["x"])).await;
    assert_eq!(after_delete.status(), StatusCode::CREATED);
}

/// Regression: a subscription's explicit stream list was unlimited.
#[tokio::test]
async fn explicit_streams_over_the_subscription_limit_are_429_naming_it() {
    let app = router(ServerConfig {
        max_subscription_streams: 2,
        ..fast()
    });
    let (refused, body) = send(&app, subscribe("a", &["x", "y", "z"])).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(
        json_body(&body)["error"]["limit"],
        "max_subscription_streams"
    );
    let (created, _) = send(&app, subscribe("a", &["x", "y"])).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let (added, body) = send(
        &app,
        req("POST", "/v1/__ds/subscriptions/a/streams")
            .body(Body::from(r#"{"streams":["z"]}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(added.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    let (same, _) = send(
        &app,
        req("POST", "/v1/__ds/subscriptions/a/streams")
            .body(Body::from(r#"{"streams":["x"]}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(same.status(), StatusCode::NO_CONTENT, "already listed");
}

/// Regression: streams were unlimited; a client could create them until
/// the store filled the disk or the memory.
#[tokio::test]
async fn streams_over_the_server_limit_are_503_naming_it() {
    let app = router(ServerConfig {
        max_streams: 2,
        ..fast()
    });
    for path in ["/a", "/b"] {
        let (created, _) = send_empty(&app, "PUT", path).await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    let (refused, body) = send_empty(&app, "PUT", "/c").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(header(&refused, "eddy-error"), Some("limit/streams"));
    assert_eq!(header(&refused, "eddy-limit"), Some("2"));
    assert!(body.contains("max_streams"), "{body}");
    let (fork, _) = send(
        &app,
        req("PUT", "/d")
            .header("stream-forked-from", "/a")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        fork.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a fork is a stream"
    );
    let (again, _) = send_empty(&app, "PUT", "/a").await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "an existing stream is not a new one"
    );
    let (deleted, _) = send_empty(&app, "DELETE", "/a").await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (created, _) = send_empty(&app, "PUT", "/c").await;
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "room again after a delete"
    );
}

/// Regression: producer states were unlimited per stream; a client could
/// grow a stream's state without end by sending new producer ids. Over
/// the store's limit a new producer gets 429 naming it; a known producer
/// still appends.
#[tokio::test]
async fn producers_over_the_stream_limit_are_429_naming_it() {
    use std::sync::Arc;

    use eddy_server::{app, AppState};
    use eddy_streams::MemoryStorage;

    let store = MemoryStorage::new().with_max_producers_per_stream(1);
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let app = app(AppState::new(Arc::new(store), fast(), stopping));
    let append = |producer: &str, seq: u64| {
        req("POST", "/p")
            .header("content-type", "text/plain")
            .header("producer-id", producer)
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(Body::from("x"))
            .expect("request")
    };
    let (created, _) = send(
        &app,
        req("PUT", "/p")
            .header("content-type", "text/plain")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let (first, body) = send(&app, append("a", 0)).await;
    assert!(first.status().is_success(), "{body}");

    let (refused, body) = send(&app, append("b", 0)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(header(&refused, "eddy-error"), Some("limit/producers"));
    assert_eq!(header(&refused, "eddy-limit"), Some("1"));
    assert_eq!(
        header(&refused, "retry-after"),
        None,
        "retrying does not help"
    );
    let error = json_body(&body);
    assert_eq!(error["code"], "limit/producers");
    assert_eq!(error["details"]["limit"], 1);
    assert_eq!(error["details"]["producer"], "b");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_producers_per_stream")),
        "{body}"
    );

    let (known, body) = send(&app, append("a", 1)).await;
    assert!(known.status().is_success(), "{body}");
}

/// Regression: a subscription kept its whole create request, of any size
/// (up to the 8 MiB body limit), and the paths added to it later.
#[tokio::test]
async fn a_subscription_keeps_at_most_its_byte_limit_and_413_names_it() {
    let with_description = |id: &str, bytes: usize| {
        let mut body = serde_json::json!({
            "type": "pull-wake",
            "streams": ["x"],
            "wake_stream": "wake",
            "description": "",
        });
        let bare = body.to_string().len();
        body["description"] = "d".repeat(bytes - bare).into();
        req("PUT", &format!("/v1/__ds/subscriptions/{id}"))
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    let app = router(ServerConfig {
        max_subscription_bytes: 200,
        ..fast()
    });
    let (refused, body) = send(&app, with_description("a", 201)).await;
    assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let error = &json_body(&body)["error"];
    assert_eq!(error["code"], "LIMIT_REACHED");
    assert_eq!(error["limit"], "max_subscription_bytes");
    let (created, body) = send(&app, with_description("a", 200)).await;
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "at the limit: {body}"
    );
    let (added, body) = send(
        &app,
        req("POST", "/v1/__ds/subscriptions/a/streams")
            .body(Body::from(r#"{"streams":["y"]}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(added.status(), StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(json_body(&body)["error"]["limit"], "max_subscription_bytes");
}

fn subscribe_pattern(id: &str, pattern: &str) -> axum::http::Request<Body> {
    let body = serde_json::json!({
        "type": "pull-wake",
        "pattern": pattern,
        "wake_stream": "wake",
    });
    req("PUT", &format!("/v1/__ds/subscriptions/{id}"))
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// The paths a subscription watches, as `GET` describes it.
async fn watched(app: &eddy_server::App, id: &str) -> Vec<String> {
    let (_, body) = send_empty(app, "GET", &format!("/v1/__ds/subscriptions/{id}")).await;
    let mut paths: Vec<String> = json_body(&body)["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .map(|s| s["path"].as_str().expect("path").to_owned())
        .collect();
    paths.sort();
    paths
}

async fn append(app: &eddy_server::App, path: &str) {
    let (appended, body) = send(
        app,
        req("POST", path)
            .header("content-type", "text/plain")
            .body(Body::from("x"))
            .expect("request"),
    )
    .await;
    assert!(appended.status().is_success(), "{path}: {body}");
}

async fn create(app: &eddy_server::App, path: &str) {
    let (created, body) = send(
        app,
        req("PUT", path)
            .header("content-type", "text/plain")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED, "{path}: {body}");
}

/// Regression: the streams a subscription's pattern matched were kept
/// forever, deleted or not, and without bound: a client could grow one
/// subscription by creating streams.
#[tokio::test]
async fn streams_matched_by_a_pattern_are_bounded_and_dropped_once_deleted() {
    let app = router(ServerConfig {
        max_subscription_matches: 2,
        ..fast()
    });
    for path in ["/v1/e/a", "/v1/e/b", "/v1/e/c"] {
        create(&app, path).await;
    }
    let (refused, body) = send(&app, subscribe_pattern("over", "e/*")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    let error = &json_body(&body)["error"];
    assert_eq!(error["code"], "LIMIT_REACHED");
    assert_eq!(error["limit"], "max_subscription_matches");

    send_empty(&app, "DELETE", "/v1/e/c").await;
    let (created, body) = send(&app, subscribe_pattern("s", "e/*")).await;
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "at the limit: {body}"
    );
    assert_eq!(watched(&app, "s").await, ["e/a", "e/b"]);

    create(&app, "/v1/e/d").await;
    append(&app, "/v1/e/d").await;
    send_empty(&app, "DELETE", "/v1/e/a").await;
    // A claim reads the streams again: the deleted one is dropped, and
    // the one left out for want of room is watched now.
    let (claimed, body) = send(
        &app,
        req("POST", "/v1/__ds/subscriptions/s/claim")
            .body(Body::from(r#"{"worker":"w"}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(claimed.status(), StatusCode::OK, "{body}");
    assert_eq!(json_body(&body)["streams"][0]["path"], "e/d");
    assert_eq!(watched(&app, "s").await, ["e/b", "e/d"]);
}

/// Regression: any lease was accepted: 1 ms (a wake that ends before a
/// worker can act, and a re-delivery storm) or longer than a clock can
/// count (a panic when the lease began).
#[tokio::test]
async fn a_lease_outside_the_sane_range_is_refused_at_create() {
    let app = router(ServerConfig {
        min_lease_ttl: std::time::Duration::from_millis(500),
        ..fast()
    });
    let create = |id: &str, lease_ttl_ms: u64| {
        let body = serde_json::json!({
            "type": "pull-wake",
            "streams": ["x"],
            "wake_stream": "wake",
            "lease_ttl_ms": lease_ttl_ms,
        });
        req("PUT", &format!("/v1/__ds/subscriptions/{id}"))
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    for lease in [499, u64::MAX] {
        let (refused, body) = send(&app, create("a", lease)).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{lease}: {body}");
        let error = &json_body(&body)["error"];
        assert_eq!(error["code"], "INVALID_LEASE", "{body}");
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains("500")),
            "{body}"
        );
    }
    let (created, body) = send(&app, create("a", 500)).await;
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "at the limit: {body}"
    );
}

/// Issue 33: the stream cap counted the store by listing it, which on
/// DynamoDB read every stream's record (a `Query` of the directory and a
/// `BatchGetItem` per 100 records). It now counts the directory's
/// entries alone: a create at the cap over 1 000 streams reads no record.
#[tokio::test]
async fn the_stream_cap_on_dynamodb_counts_without_reading_records() {
    use std::sync::Arc;

    use eddy_streams::{Payload, Storage, StreamConfig, StreamPath};

    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout(format!("cap-{:08x}", fastrand::u32(..))),
    ));
    let store = eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
        .expect("open");
    for n in 0..1000 {
        let path = StreamPath::new(format!("s/{n:04}")).expect("path");
        store
            .create(&path, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
    }
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let config = ServerConfig {
        max_streams: 1000,
        ..fast()
    };
    let app = eddy_server::app(eddy_server::AppState::new(
        Arc::new(store),
        config,
        stopping,
    ));
    let before = table.request_stats();
    let (refused, body) = send_empty(&app, "PUT", "/one-more").await;
    let cost = table.request_stats() - before;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // The first count, and the recount at the cap: a Query each (1 000
    // directory entries fit one page), and the create's `GetItem` of its
    // path; no BatchGetItem (which the embedded table counts as a
    // transaction), no record read. (Listing: 2 Queries and 20
    // BatchGetItems, 4 000 items.)
    assert_eq!(cost.reads, 3, "{cost:?}");
    assert_eq!(cost.transactions, 0, "{cost:?}");
    assert_eq!(cost.items_read, 2000, "{cost:?}");
}
