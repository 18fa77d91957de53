//! Subscription patterns through the API: linear-time matching and clear
//! refusals of patterns over the limits.

use std::sync::mpsc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;

use crate::router::{fast, json_body, req, router, send};

/// Creates a pull-wake subscription with `pattern` after a stream named
/// `stream` exists (so creating it matches the pattern against the name),
/// and returns the status and body. Runs on its own thread: a matcher that
/// never returns would block any runtime it ran on.
fn subscribe_after(stream: String, pattern: String) -> (StatusCode, String) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let app = router(fast());
            let put = |uri: String, body: String| {
                req("PUT", &uri)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .expect("request")
            };
            let (created, _) = send(&app, put(format!("/v1/{stream}"), "[]".into())).await;
            assert_eq!(created.status(), StatusCode::CREATED);
            let body = serde_json::json!({
                "type": "pull-wake",
                "pattern": pattern,
                "wake_stream": "wake",
            });
            let (response, body) = send(
                &app,
                put("/v1/__ds/subscriptions/s".into(), body.to_string()),
            )
            .await;
            let _ = done.send((response.status(), body));
        });
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the subscription request finished")
}

/// Regression: patterns were matched by backtracking, so `*a*a*…*b`
/// against a long segment of `a`s took exponential time: one request
/// pegged a core for good (and then blocked graceful shutdown).
#[test]
fn a_backtracking_pattern_is_matched_in_linear_time() {
    let stream = "a".repeat(200);
    let pattern = format!("{}*b", "*a".repeat(12));
    let (status, body) = subscribe_after(stream, pattern);
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let streams = &json_body(&body)["streams"];
    assert_eq!(
        streams.as_array().map(Vec::len),
        Some(0),
        "no match: {body}"
    );
}

#[test]
fn globs_match_within_and_across_segments() {
    for (stream, pattern, matches) in [
        ("events/a", "events/*", true),
        ("events/a/b", "events/*", false),
        ("events/a/b", "events/**", true),
        ("orders/eu-1", "orders/eu-*", true),
        ("orders/us-1", "orders/eu-*", false),
        ("exact", "exact", true),
    ] {
        let (status, body) = subscribe_after(stream.into(), pattern.into());
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let listed = json_body(&body)["streams"]
            .as_array()
            .map(|s| s.iter().any(|w| w["path"] == stream));
        assert_eq!(listed, Some(matches), "{pattern} vs {stream}: {body}");
    }
}

#[test]
fn patterns_over_the_limits_are_400_with_the_reason() {
    let too_long = "a".repeat(eddy_server::ServerConfig::default().max_pattern_bytes + 1);
    let too_wild = "*x".repeat(eddy_server::ServerConfig::default().max_pattern_wildcards + 1);
    for (pattern, reason) in [
        (too_long, "bytes"),
        (too_wild, "wildcards"),
        ("events/[".to_owned(), "pattern"),
    ] {
        let (status, body) = subscribe_after("x".into(), pattern.clone());
        assert_eq!(status, StatusCode::BAD_REQUEST, "{pattern}: {body}");
        let error = &json_body(&body)["error"];
        assert_eq!(error["code"], "INVALID_PATTERN", "{body}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains(reason)),
            "{body}"
        );
    }
}
