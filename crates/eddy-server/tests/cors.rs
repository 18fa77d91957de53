//! What a browser client may read of a response: every header the server
//! answers with is either CORS-safelisted, a CORS or security header of the
//! server's own, or named in `Access-Control-Expose-Headers`.
//!
//! Regression: `eddy-limit` (the limit a 413 or 429 names),
//! `eddy-read-start`, `eddy-duplicate`, `retry-after` and `x-request-id`
//! were sent but not exposed, so a browser client could not read them.

use axum::body::Body;
use axum::http::{Response, StatusCode};
use eddy_server::ServerConfig;

use crate::router::{assert_through_the_middleware, fast, req, router, send};

/// Headers every browser reads without being told, and those that only
/// speak to the browser or a proxy (never to the page's code).
const NOT_FOR_THE_PAGE: &[&str] = &[
    // CORS-safelisted response headers.
    "cache-control",
    "content-language",
    "content-length",
    "content-type",
    "expires",
    "last-modified",
    "pragma",
    // For the browser and caches.
    "access-control-allow-origin",
    "access-control-expose-headers",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
    "x-content-type-options",
    "cross-origin-resource-policy",
    "vary",
    "date",
    "www-authenticate",
    "allow",
    "x-accel-buffering",
    "content-encoding",
];

fn unexposed(response: &Response<Body>) -> Vec<String> {
    let exposed: Vec<String> = response
        .headers()
        .get("access-control-expose-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(',')
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    response
        .headers()
        .keys()
        .map(|name| name.as_str().to_owned())
        .filter(|name| !NOT_FOR_THE_PAGE.contains(&name.as_str()) && !exposed.contains(name))
        .collect()
}

#[tokio::test]
async fn every_header_a_client_reads_is_exposed_to_browsers() {
    let app = router(ServerConfig {
        max_body_bytes: 16,
        ..fast()
    });
    let text = |method: &str, uri: &str, body: &'static str| {
        req(method, uri)
            .header("content-type", "text/plain")
            .body(Body::from(body))
            .expect("request")
    };
    let producer = |seq: &str| {
        req("POST", "/s")
            .header("content-type", "text/plain")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", seq)
            .body(Body::from("x"))
            .expect("request")
    };
    let mut answers = Vec::new();
    for request in [
        text("PUT", "/s", ""),
        text("POST", "/s", "hello"),
        producer("0"),
        // A duplicate, then a sequence gap.
        producer("0"),
        producer("5"),
        text("GET", "/s?offset=-1", ""),
        text("GET", "/s?offset=-1&live=long-poll", ""),
        text("HEAD", "/s", ""),
        // Over the body limit: the answer names it.
        text("POST", "/s", "far more than sixteen bytes"),
        text("GET", "/missing", ""),
        text("PUT", "/ttl", ""),
        // A stream with a retention policy, echoed on its answers.
        req("PUT", "/kept")
            .header("content-type", "text/plain")
            .header("eddy-retention", "messages=1")
            .body(Body::empty())
            .expect("request"),
        text("GET", "/kept?offset=-1", ""),
    ] {
        let label = format!("{} {}", request.method(), request.uri());
        let (response, _) = send(&app, request).await;
        answers.push((label, response));
    }
    let statuses: Vec<StatusCode> = answers.iter().map(|(_, r)| r.status()).collect();
    assert!(
        statuses.contains(&StatusCode::PAYLOAD_TOO_LARGE)
            && statuses.contains(&StatusCode::CONFLICT),
        "the requests reach the limit and the sequence gap: {statuses:?}"
    );
    for (label, response) in &answers {
        assert_through_the_middleware(response, label);
        assert_eq!(
            unexposed(response),
            Vec::<String>::new(),
            "{label} ({}) sends headers a browser client cannot read",
            response.status()
        );
    }
}
