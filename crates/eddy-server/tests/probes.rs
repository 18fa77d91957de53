//! The probes (`/healthz`, `/readyz`) and request ids.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::{MemoryStorage, SqliteStorage, Storage};

use crate::router::send;

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("request")
}

fn with_token() -> ServerConfig {
    ServerConfig {
        auth_token: Some("secret".into()),
        ..ServerConfig::default()
    }
}

#[tokio::test]
async fn readyz_needs_no_token_and_follows_the_store_and_shutdown() {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let router = app(AppState::new(
        Arc::new(MemoryStorage::new()),
        with_token(),
        stopping,
    ));
    let (response, body) = send(&router, get("/readyz")).await;
    assert_eq!(response.status(), StatusCode::OK, "{body}");
    assert_eq!(body, "ready\n");
    let (response, _) = send(&router, get("/healthz")).await;
    assert_eq!(response.status(), StatusCode::OK);
    // A second probe is as good as the first.
    let (response, _) = send(&router, get("/readyz")).await;
    assert_eq!(response.status(), StatusCode::OK);

    stop.send_replace(true);
    let (response, body) = send(&router, get("/readyz")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("shutting down"), "{body}");
    let (response, _) = send(&router, get("/healthz")).await;
    assert_eq!(response.status(), StatusCode::OK, "the process is still up");
}

#[tokio::test]
async fn readyz_fails_when_the_store_cannot_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStorage::open(dir.path()).expect("open"));
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let router = app(AppState::new(
        Arc::clone(&store) as Arc<dyn Storage>,
        ServerConfig::default(),
        stopping,
    ));
    let (response, _) = send(&router, get("/readyz")).await;
    assert_eq!(response.status(), StatusCode::OK);
    // The probe went through the writer and left nothing behind.
    let listed = store.list("").await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
    store.close();
    let (response, body) = send(&router, get("/readyz")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("closed"), "{body}");
    let (response, _) = send(&router, get("/healthz")).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let router = crate::router::router(ServerConfig::default());
    let (first, _) = send(&router, get("/missing")).await;
    let (second, _) = send(&router, get("/missing")).await;
    let id = |response: &axum::http::Response<Body>| {
        response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (a, b) = (id(&first), id(&second));
    assert!(a.as_ref().is_some_and(|a| a.len() == 36), "a UUID: {a:?}");
    assert_ne!(a, b, "a new id per request");
    let request = Request::get("/missing")
        .header("x-request-id", "client-42")
        .body(Body::empty())
        .expect("request");
    let (echoed, _) = send(&router, request).await;
    assert_eq!(
        id(&echoed).as_deref(),
        Some("client-42"),
        "the client's id is kept"
    );
}

/// A remote store is writable while its server is ready.
#[cfg(feature = "remote")]
#[tokio::test]
async fn a_remote_store_is_writable_while_its_server_is_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStorage::open(dir.path()).expect("open"));
    let server = eddy_server::Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::clone(&store) as Arc<dyn Storage>,
        ServerConfig::default(),
    )
    .await
    .expect("bind")
    .spawn();
    let remote = eddy_server::RemoteStorage::new(&server.url()).expect("client");
    remote.writable().await.expect("writable");
    store.close();
    let refused = remote.writable().await.expect_err("the store is closed");
    assert!(refused.is_retryable(), "{refused}");
    assert!(refused.to_string().contains("closed"), "{refused}");
    server.stop().await.expect("stop");
}
