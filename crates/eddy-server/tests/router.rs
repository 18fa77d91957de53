//! The application without a socket: requests go straight to `eddy_server::app` with
//! `tower::ServiceExt::oneshot`, over a real memory store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::MemoryStorage;
use http_body_util::BodyExt;
use tower::ServiceExt;

/// The application over a fresh memory store.
pub(crate) fn router(config: ServerConfig) -> eddy_server::App {
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    // Keep the sender alive for the router's lifetime.
    std::mem::forget(_stop);
    app(AppState::new(
        Arc::new(MemoryStorage::new()),
        config,
        stopping,
    ))
}

pub(crate) fn fast() -> ServerConfig {
    ServerConfig {
        long_poll_timeout: Duration::from_millis(100),
        ..ServerConfig::default()
    }
}

/// Sends a request and, as an HTTP client does, follows the redirect a
/// read from `-1` or the zero offset answers with (to the same read at
/// the stream's own offset: a `Location` that is a query alone).
pub(crate) async fn send(
    app: &eddy_server::App,
    request: Request<Body>,
) -> (Response<Body>, String) {
    let (response, bytes) = send_for_bytes(app, request).await;
    (response, String::from_utf8_lossy(&bytes).into_owned())
}

/// Sends a request and does not follow a redirect.
pub(crate) async fn send_raw(
    app: &eddy_server::App,
    request: Request<Body>,
) -> (Response<Body>, String) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (
        Response::from_parts(parts, Body::empty()),
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// [`send`], with the body as bytes.
pub(crate) async fn send_for_bytes(
    app: &eddy_server::App,
    request: Request<Body>,
) -> (Response<Body>, Vec<u8>) {
    let (method, uri, headers) = (
        request.method().clone(),
        request.uri().clone(),
        request.headers().clone(),
    );
    let mut response = app.clone().oneshot(request).await.expect("infallible");
    if response.status() == StatusCode::TEMPORARY_REDIRECT {
        let location = header(&response, "location")
            .expect("a location")
            .to_owned();
        let query = location.strip_prefix('?').expect("a relative location");
        let mut again = Request::builder()
            .method(method)
            .uri(format!("{}?{query}", uri.path()));
        for (name, value) in &headers {
            again = again.header(name, value);
        }
        let again = again.body(Body::empty()).expect("request");
        response = app.clone().oneshot(again).await.expect("infallible");
    }
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (Response::from_parts(parts, Body::empty()), bytes.to_vec())
}

/// Sends a request without headers or body.
pub(crate) async fn send_empty(
    app: &eddy_server::App,
    method: &str,
    uri: &str,
) -> (Response<Body>, String) {
    send(app, req(method, uri).body(Body::empty()).expect("request")).await
}

pub(crate) fn req(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder().method(method).uri(uri)
}

pub(crate) fn header<'a>(response: &'a Response<Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn json_round_trip_with_protocol_headers() {
    let app = router(fast());
    let (created, _) = send(
        &app,
        req("PUT", "/v1/stream/orders")
            .header("content-type", "application/json")
            .header("host", "example.test")
            .body(Body::from(r#"[{"id":1}]"#))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(
        header(&created, "location"),
        Some("http://example.test/v1/stream/orders")
    );
    let offset = header(&created, "stream-next-offset").expect("offset");
    let (incarnation, position) = offset.split_once('_').expect("two parts");
    assert_eq!(position, "0000000000000001");
    assert!(
        incarnation.len() == 16 && incarnation != "0000000000000000",
        "the stream's incarnation: {offset}"
    );
    let (appended, _) = send(
        &app,
        req("POST", "/v1/stream/orders")
            .header("content-type", "application/json")
            .body(Body::from(r#"[{"id":2},{"id":3}]"#))
            .expect("request"),
    )
    .await;
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let (read, body) = send_empty(&app, "GET", "/v1/stream/orders?offset=-1").await;
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(body, r#"[{"id":1},{"id":2},{"id":3}]"#);
    assert_eq!(header(&read, "stream-up-to-date"), Some("true"));
    assert_eq!(header(&read, "x-content-type-options"), Some("nosniff"));
    let etag = header(&read, "etag").expect("etag").to_owned();
    let (cached, body) = send(
        &app,
        req("GET", "/v1/stream/orders?offset=-1")
            .header("if-none-match", &etag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        (cached.status(), body.as_str()),
        (StatusCode::NOT_MODIFIED, "")
    );
}

#[tokio::test]
async fn errors_carry_codes_messages_and_protocol_headers() {
    let app = router(fast());
    let (missing, body) = send_empty(&app, "GET", "/nope").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(header(&missing, "eddy-error"), Some("stream/not-found"));
    assert_eq!(header(&missing, "x-content-type-options"), Some("nosniff"));
    assert!(body.contains("does not exist"), "{body}");

    send(
        &app,
        req("PUT", "/p")
            .header("content-type", "text/plain")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    let producer = |epoch: &str, seq: &str| {
        req("POST", "/p")
            .header("content-type", "text/plain")
            .header("producer-id", "w")
            .header("producer-epoch", epoch)
            .header("producer-seq", seq)
            .body(Body::from("x"))
            .expect("request")
    };
    let (first, _) = send(&app, producer("1", "0")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (dup, _) = send(&app, producer("1", "0")).await;
    assert_eq!(
        (dup.status(), header(&dup, "producer-seq")),
        (StatusCode::NO_CONTENT, Some("0"))
    );
    let (gap, _) = send(&app, producer("1", "5")).await;
    assert_eq!(gap.status(), StatusCode::CONFLICT);
    assert_eq!(header(&gap, "producer-expected-seq"), Some("1"));
    assert_eq!(header(&gap, "producer-received-seq"), Some("5"));
    let (fenced, _) = send(&app, producer("0", "0")).await;
    assert_eq!(
        (fenced.status(), header(&fenced, "producer-epoch")),
        (StatusCode::FORBIDDEN, Some("1"))
    );
    let (bad, body) = send(&app, producer("1e3", "0")).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(body.contains("Producer-Epoch"), "{body}");
}

#[tokio::test]
async fn bad_paths_and_offsets_are_400() {
    let app = router(fast());
    for uri in ["/a/%2e%2e/b", "/a%00b", "/a//b", "/%FF"] {
        let (response, body) = send_empty(&app, "PUT", uri).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri}: {body}");
    }
    send_empty(&app, "PUT", "/s").await;
    for query in [
        "offset=",
        "offset=1&offset=2",
        "offset=abc",
        "live=sse",
        "offset=-1&live=forever",
    ] {
        let (response, body) = send_empty(&app, "GET", &format!("/s?{query}")).await;
        assert_eq!(
            response.status(),
            StatusCode::BAD_REQUEST,
            "{query}: {body}"
        );
        assert!(!body.is_empty());
    }
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let app = router(ServerConfig {
        max_body_bytes: 16,
        ..fast()
    });
    send_empty(&app, "PUT", "/s").await;
    let (response, _) = send(
        &app,
        req("POST", "/s")
            .header("content-type", "application/octet-stream")
            .body(Body::from(vec![0u8; 17]))
            .expect("request"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(header(&response, "eddy-limit"), Some("16"));
}

#[tokio::test]
async fn live_readers_over_the_cap_get_503() {
    let app = router(ServerConfig {
        max_live_readers: 0,
        ..fast()
    });
    send_empty(&app, "PUT", "/s").await;
    for live in ["long-poll", "sse"] {
        let (response, body) = send_empty(&app, "GET", &format!("/s?offset=-1&live={live}")).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{live}");
        assert_eq!(header(&response, "retry-after"), Some("1"));
        assert!(body.contains("too many live readers"), "{body}");
    }
    let (catch_up, _) = send_empty(&app, "GET", "/s?offset=-1").await;
    assert_eq!(
        catch_up.status(),
        StatusCode::OK,
        "catch-up reads are not capped"
    );
}

#[tokio::test]
async fn bearer_token_guards_everything_but_healthz_and_preflight() {
    let app = router(ServerConfig {
        auth_token: Some("s3cret".into()),
        ..fast()
    });
    let (denied, _) = send_empty(&app, "PUT", "/s").await;
    assert_eq!(denied.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&denied, "www-authenticate"), Some("Bearer"));
    let (wrong, _) = send(
        &app,
        req("PUT", "/s")
            .header("authorization", "Bearer nope")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let (metrics, _) = send_empty(&app, "GET", "/metrics").await;
    assert_eq!(metrics.status(), StatusCode::UNAUTHORIZED);
    let (allowed, _) = send(
        &app,
        req("PUT", "/s")
            .header("authorization", "Bearer s3cret")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(allowed.status(), StatusCode::CREATED);
    let (health, body) = send_empty(&app, "GET", "/healthz").await;
    assert_eq!((health.status(), body.as_str()), (StatusCode::OK, "ok\n"));
    let (preflight, _) = send_empty(&app, "OPTIONS", "/s").await;
    assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
    assert!(header(&preflight, "access-control-allow-headers")
        .is_some_and(|h| h.contains("if-none-match")));
}

/// Issue 11: streams under `__eddy/` (projection checkpoints) are Eddy's
/// own. Client writes and deletes there are refused with 403 unless the
/// request carries the admin token; reads stay open to every client.
#[tokio::test]
async fn the_reserved_prefix_takes_writes_only_from_administrators() {
    let app = router(ServerConfig {
        auth_token: Some("client".into()),
        admin_token: Some("admin".into()),
        ..fast()
    });
    let as_who = |method: &str, uri: &str, token: &str| {
        req(method, uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
    };
    let checkpoint = "/__eddy/checkpoints/p/1/_/0";
    for (method, body) in [("PUT", ""), ("POST", "[1]"), ("DELETE", "")] {
        let (refused, text) = send(
            &app,
            as_who(method, checkpoint, "client")
                .body(Body::from(body))
                .expect("request"),
        )
        .await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{method}: {text}");
        assert_eq!(header(&refused, "eddy-error"), Some("auth/forbidden"));
    }
    let (created, _) = send(
        &app,
        as_who("PUT", checkpoint, "admin")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let (appended, _) = send(
        &app,
        as_who("POST", checkpoint, "admin")
            .body(Body::from("[1]"))
            .expect("request"),
    )
    .await;
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    let (read, body) = send(
        &app,
        as_who("GET", &format!("{checkpoint}?offset=-1"), "client")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!((read.status(), body.as_str()), (StatusCode::OK, "[1]"));
    let (elsewhere, _) = send(
        &app,
        as_who("PUT", "/__eddyish/s", "client")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        elsewhere.status(),
        StatusCode::CREATED,
        "only the prefix is reserved"
    );

    // Without an admin token nobody may write there.
    let closed = router(fast());
    let (refused, _) = send_empty(&closed, "PUT", checkpoint).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn metrics_count_appends_and_bytes() {
    let app = router(fast());
    send(
        &app,
        req("PUT", "/m")
            .header("content-type", "text/plain")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    for _ in 0..3 {
        send(
            &app,
            req("POST", "/m")
                .header("content-type", "text/plain")
                .body(Body::from("hello"))
                .expect("request"),
        )
        .await;
    }
    let (response, body) = send_empty(&app, "GET", "/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(body.contains("eddy_appends_total 3"), "{body}");
    assert!(body.contains("eddy_append_bytes_total 15"), "{body}");
    assert!(body.contains("eddy_live_readers 0"), "{body}");
    assert!(body.contains("eddy_requests_in_flight 1"), "{body}");
}

#[tokio::test]
async fn sse_on_a_closed_stream_sends_data_then_closes() {
    let app = router(fast());
    send(
        &app,
        req("PUT", "/bin")
            .header("content-type", "application/octet-stream")
            .header("stream-closed", "true")
            .body(Body::from(vec![0u8, 1, 2, 255]))
            .expect("request"),
    )
    .await;
    let (head, _) = send_empty(&app, "HEAD", "/bin").await;
    let tail = header(&head, "stream-next-offset")
        .expect("tail")
        .to_owned();
    let (response, body) = send_empty(&app, "GET", "/bin?offset=-1&live=sse").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "content-type"), Some("text/event-stream"));
    assert_eq!(
        header(&response, "stream-sse-data-encoding"),
        Some("base64")
    );
    assert_eq!(
        body,
        format!(
            "event: data\ndata:AAEC/w==\n\nevent: control\n\
             data:{{\"streamClosed\":true,\"streamNextOffset\":\"{tail}\",\"upToDate\":true}}\n\n"
        )
    );
}

#[tokio::test]
async fn long_poll_times_out_with_204_and_a_cursor() {
    let app = router(fast());
    send_empty(&app, "PUT", "/lp").await;
    let (response, body) = send_empty(&app, "GET", "/lp?offset=now&live=long-poll").await;
    assert_eq!(
        (response.status(), body.as_str()),
        (StatusCode::NO_CONTENT, "")
    );
    assert_eq!(header(&response, "stream-up-to-date"), Some("true"));
    assert!(
        header(&response, "stream-cursor").is_some_and(|c| c.bytes().all(|b| b.is_ascii_digit()))
    );
}

pub(crate) fn json_body(body: &str) -> serde_json::Value {
    serde_json::from_str(body).expect("a JSON body")
}

#[tokio::test]
async fn subscriptions_publish_a_key_and_refuse_private_webhooks() {
    let app = router(fast());
    let (jwks, body) = send_empty(&app, "GET", "/v1/stream/__ds/jwks.json").await;
    assert_eq!(
        header(&jwks, "content-type"),
        Some("application/jwk-set+json")
    );
    let keys = json_body(&body);
    assert_eq!(keys["keys"][0]["kty"], "OKP");
    assert_eq!(keys["keys"][0]["crv"], "Ed25519");
    let private =
        r#"{"type":"webhook","pattern":"events/*","webhook":{"url":"http://192.168.1.10/hook"}}"#;
    let (refused, body) = send(
        &app,
        req("PUT", "/v1/stream/__ds/subscriptions/s1")
            .body(Body::from(private))
            .expect("request"),
    )
    .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_body(&body)["error"]["code"], "WEBHOOK_URL_REJECTED");
}

#[tokio::test]
async fn pull_wake_claims_are_leased_and_acks_fenced() {
    let app = router(fast());
    let put = |uri: &str, body: &str| {
        req("PUT", uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request")
    };
    let post = |uri: &str, token: Option<&str>, body: String| {
        let mut builder = req("POST", uri).header("content-type", "application/json");
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(Body::from(body)).expect("request")
    };
    let claim_as = |worker: &str| {
        post(
            "/v1/stream/__ds/subscriptions/p1/claim",
            None,
            format!(r#"{{"worker":"{worker}"}}"#),
        )
    };
    send(&app, put("/v1/stream/wake/pool", "[]")).await;
    send(&app, put("/v1/stream/events/old", r#"{"before":true}"#)).await;
    let create = r#"{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/pool","lease_ttl_ms":60000}"#;
    let (created, _) = send(&app, put("/v1/stream/__ds/subscriptions/p1", create)).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let (again, _) = send(&app, put("/v1/stream/__ds/subscriptions/p1", create)).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "the same subscription again is idempotent"
    );

    let (nothing, _) = send(&app, claim_as("w1")).await;
    assert_eq!(
        nothing.status(),
        StatusCode::NO_CONTENT,
        "streams from before the subscription are not pending"
    );
    send(&app, put("/v1/stream/events/new", r#"{"n":1}"#)).await;
    let (claimed, body) = send(&app, claim_as("w1")).await;
    assert_eq!(claimed.status(), StatusCode::OK, "{body}");
    let claim = json_body(&body);
    let streams = claim["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0]["path"], "events/new");
    let (busy, body) = send(&app, claim_as("w2")).await;
    assert_eq!(busy.status(), StatusCode::CONFLICT);
    assert_eq!(json_body(&body)["error"]["current_holder"], "w1");

    let token = claim["token"].as_str().expect("token");
    let ack = serde_json::json!({
        "wake_id": claim["wake_id"],
        "generation": claim["generation"],
        "acks": [{"stream": "events/new", "offset": streams[0]["tail_offset"]}],
        "done": true,
    })
    .to_string();
    let (acked, body) = send(
        &app,
        post(
            "/v1/stream/__ds/subscriptions/p1/ack",
            Some(token),
            ack.clone(),
        ),
    )
    .await;
    assert_eq!(acked.status(), StatusCode::OK);
    assert_eq!(
        json_body(&body),
        serde_json::json!({"ok": true, "next_wake": false})
    );
    let (stale, body) = send(
        &app,
        post("/v1/stream/__ds/subscriptions/p1/ack", Some(token), ack),
    )
    .await;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert_eq!(json_body(&body)["error"]["code"], "FENCED");
}

/// Every response passes the middleware, whichever endpoint answers it:
/// it carries a request id, a `Cache-Control`, and the security and CORS
/// headers each once, with the middleware's values (whether the endpoint
/// began its answer from them or the middleware added them).
pub(crate) fn assert_through_the_middleware(response: &Response<Body>, label: &str) {
    let headers = response.headers();
    let once = |name: &str| {
        let values: Vec<_> = headers.get_all(name).iter().collect();
        assert_eq!(values.len(), 1, "{label}: {name} once, got {values:?}");
        values[0].to_str().expect("text").to_owned()
    };
    assert_eq!(once("x-request-id").len(), 36, "{label}");
    assert!(!once("cache-control").is_empty(), "{label}");
    assert_eq!(once("x-content-type-options"), "nosniff", "{label}");
    assert_eq!(
        once("cross-origin-resource-policy"),
        "cross-origin",
        "{label}"
    );
    assert_eq!(once("access-control-allow-origin"), "*", "{label}");
    assert!(
        once("access-control-expose-headers").contains("stream-next-offset"),
        "{label}"
    );
}

/// `path` names a stream: a PUT creates it and a GET reads it back.
async fn assert_names_a_stream(app: &eddy_server::App, path: &str) {
    let (created, _) = send(
        app,
        req("PUT", path)
            .header("content-type", "text/plain")
            .body(Body::from("hello"))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED, "{path}");
    assert_through_the_middleware(&created, path);
    let (read, body) = send_empty(app, "GET", &format!("{path}?offset=-1")).await;
    assert_eq!(
        (read.status(), body.as_str()),
        (StatusCode::OK, "hello"),
        "{path}"
    );
}

#[tokio::test]
async fn operational_paths_reach_their_endpoints_and_all_others_name_streams() {
    let app = router(fast());
    for (path, content_type) in [
        ("/healthz", "text/plain; charset=utf-8"),
        ("/readyz", "text/plain; charset=utf-8"),
        ("/metrics", "text/plain; version=0.0.4"),
        ("/console", "text/html; charset=utf-8"),
        ("/_eddy/bindings", "application/json"),
    ] {
        let (response, _) = send_empty(&app, "GET", path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(
            header(&response, "content-type"),
            Some(content_type),
            "{path}"
        );
        if path == "/healthz" {
            // The liveness probe is answered before the middleware.
            assert!(header(&response, "x-request-id").is_none());
            assert_eq!(header(&response, "cache-control"), Some("no-store"));
        } else {
            assert_through_the_middleware(&response, path);
        }
    }
    for path in ["/healthz/x", "/metricsx", "/console/page", "/readyz_"] {
        assert_names_a_stream(&app, path).await;
    }
}

#[tokio::test]
async fn with_the_console_off_its_page_path_names_a_stream() {
    let app = router(ServerConfig {
        console: false,
        ..fast()
    });
    // (Its bindings path is under `/_eddy/`, which is never a stream's.)
    assert_names_a_stream(&app, "/console").await;
}

/// Regression: `eddy serve` printed its address, and a browser that
/// opened it got `{"code":"path/invalid",…}`. A request for HTML at the
/// root is sent to the console; an API client still learns that `/`
/// names no stream; with the console off nothing changes.
#[tokio::test]
async fn a_browser_at_the_root_lands_on_the_console() {
    let browser = || {
        req("GET", "/")
            .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
            .body(Body::empty())
            .expect("request")
    };
    let app = router(fast());
    let (landed, _) = send_raw(&app, browser()).await;
    assert_eq!(landed.status(), StatusCode::SEE_OTHER);
    assert_eq!(header(&landed, "location"), Some("/console"));
    let (page, body) = send_empty(&app, "GET", "/console").await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        body.contains("<html") || body.contains("<!doctype"),
        "{body}"
    );
    let (api, _) = send(
        &app,
        req("GET", "/")
            .header("accept", "application/json")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(header(&api, "eddy-error"), Some("path/invalid"));

    let off = router(ServerConfig {
        console: false,
        ..fast()
    });
    let (not_served, _) = send_raw(&off, browser()).await;
    assert_eq!(header(&not_served, "eddy-error"), Some("path/invalid"));
}

/// `GET /_eddy/streams` pages with `limit` and `after` (an object with
/// the page's `streams` and the `next` page's `after`), and answers the
/// whole listing as an array without them, as before.
#[tokio::test]
async fn the_listing_pages_with_a_cursor_and_keeps_its_array_form() {
    let app = router(fast());
    for name in ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1"] {
        let (created, _) = send(
            &app,
            req("PUT", &format!("/{name}"))
                .header("content-type", "text/plain")
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    let (_, whole) = send_empty(&app, "GET", "/_eddy/streams?prefix=a%2F").await;
    let whole: serde_json::Value = serde_json::from_str(&whole).expect("json");
    assert_eq!(whole.as_array().map(Vec::len), Some(5), "{whole}");

    let mut paths = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..5 {
        let uri = match &after {
            Some(after) => format!("/_eddy/streams?prefix=a%2F&limit=2&after={after}"),
            None => "/_eddy/streams?prefix=a%2F&limit=2".to_owned(),
        };
        let (response, body) = send_empty(&app, "GET", &uri).await;
        assert_eq!(response.status(), StatusCode::OK, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).expect("json");
        let streams = page["streams"].as_array().expect("streams");
        assert!(streams.len() <= 2, "{page}");
        paths.extend(
            streams
                .iter()
                .filter_map(|s| s["path"].as_str().map(str::to_owned)),
        );
        match page["next"].as_str() {
            Some(next) => after = Some(next.replace('/', "%2F")),
            None => break,
        }
    }
    assert_eq!(paths, ["a/1", "a/2", "a/3", "a/4", "a/5"]);
    let (refused, _) = send_empty(&app, "GET", "/_eddy/streams?limit=0").await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
}

/// `POST /_eddy/compact/PATH` runs a pass of that stream now and says
/// what it dropped; it takes the token that may write the stream, only
/// `POST`, and a stream that exists.
#[tokio::test]
async fn the_compact_endpoint_runs_a_pass_with_the_writers_token() {
    let app = router(ServerConfig {
        auth_token: Some("client".into()),
        admin_token: Some("admin".into()),
        ..fast()
    });
    let as_who = |method: &str, uri: &str, token: &str, body: &str| {
        req(method, uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .expect("request")
    };
    let (created, _) = send(
        &app,
        req("PUT", "/state/rows")
            .header("authorization", "Bearer client")
            .header("content-type", "application/json")
            .header("eddy-compaction", "on")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    for value in 0..4 {
        let change = format!(
            r#"{{"type":"row","key":"a","value":{value},"headers":{{"operation":"upsert"}}}}"#
        );
        let (appended, _) = send(&app, as_who("POST", "/state/rows", "client", &change)).await;
        assert_eq!(appended.status(), StatusCode::NO_CONTENT);
    }
    let (anonymous, _) = send_empty(&app, "POST", "/_eddy/compact/state/rows").await;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (read_only, _) = send(
        &app,
        as_who("GET", "/_eddy/compact/state/rows", "client", ""),
    )
    .await;
    assert_eq!(read_only.status(), StatusCode::METHOD_NOT_ALLOWED);
    let (missing, _) = send(
        &app,
        as_who("POST", "/_eddy/compact/state/none", "client", ""),
    )
    .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let (reserved, _) = send(
        &app,
        as_who("POST", "/_eddy/compact/__eddy/checkpoints/x", "client", ""),
    )
    .await;
    assert_eq!(reserved.status(), StatusCode::FORBIDDEN);

    let (compacted, body) = send(
        &app,
        as_who("POST", "/_eddy/compact/state/rows", "client", ""),
    )
    .await;
    assert_eq!(compacted.status(), StatusCode::OK, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["dropped"], 3, "{answer}");
    let (read, rows) = send(&app, as_who("GET", "/state/rows?offset=-1", "client", "")).await;
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(
        rows,
        r#"[{"type":"row","key":"a","value":3,"headers":{"operation":"upsert"}}]"#
    );
    assert_eq!(answer["bytes"], rows.len() - 2, "{answer}");
}
