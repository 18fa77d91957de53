//! One authorization gate (issue 24 §2): every request that names a
//! stream — as its target, a fork's source, a subscription's wake stream
//! or watched streams — is decided from (token, operation, path) by one
//! function. Each path around the admin token found by review is tested
//! with an ordinary token (refused) and the admin token (allowed), and
//! the wake tokens of pull-wake acks and webhook callbacks work with
//! `--auth-token` on.

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::ServerConfig;

use crate::router::{fast, header, json_body, req, router, send};

fn guarded() -> ServerConfig {
    ServerConfig {
        auth_token: Some("client".into()),
        admin_token: Some("admin".into()),
        ..fast()
    }
}

fn as_who(method: &str, uri: &str, token: &str) -> axum::http::request::Builder {
    req(method, uri)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
}

const CHECKPOINT: &str = "__eddy/checkpoints/p/1/_/0";

/// Regression: a pull-wake subscription whose wake stream was under
/// `__eddy/` made the server append into a projection checkpoint for a
/// client without the admin token — at the root, and under a base path.
#[tokio::test]
async fn a_wake_stream_under_the_reserved_prefix_needs_the_admin_token() {
    let app = router(guarded());
    for (uri, wake_stream) in [
        ("/__ds/subscriptions/s1", CHECKPOINT.to_owned()),
        (
            "/__eddy/__ds/subscriptions/s2",
            "checkpoints/p/1/_/0".to_owned(),
        ),
    ] {
        let body = serde_json::json!({
            "type": "pull-wake", "pattern": "*", "wake_stream": wake_stream,
        })
        .to_string();
        let (refused, text) = send(
            &app,
            as_who("PUT", uri, "client")
                .body(Body::from(body.clone()))
                .expect("request"),
        )
        .await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{uri}: {text}");
        assert_eq!(header(&refused, "eddy-error"), Some("auth/forbidden"));
        let (allowed, text) = send(
            &app,
            as_who("PUT", uri, "admin")
                .body(Body::from(body))
                .expect("request"),
        )
        .await;
        assert_eq!(allowed.status(), StatusCode::CREATED, "{uri}: {text}");
    }
}

/// Regression: a fork whose source was under `__eddy/` turned that
/// checkpoint slot's later delete into a soft delete (the binding's saves
/// failed), for a client without the admin token.
#[tokio::test]
async fn a_fork_of_a_reserved_stream_needs_the_admin_token() {
    let app = router(guarded());
    let (created, _) = send(
        &app,
        as_who("PUT", &format!("/{CHECKPOINT}"), "admin")
            .body(Body::from("[1]"))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let fork = |token: &str, path: &str| {
        as_who("PUT", path, token)
            .header("stream-forked-from", format!("/{CHECKPOINT}"))
            .body(Body::empty())
            .expect("request")
    };
    let (refused, text) = send(&app, fork("client", "/mine")).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{text}");
    assert_eq!(header(&refused, "eddy-error"), Some("auth/forbidden"));
    let (deleted, _) = send(
        &app,
        as_who("DELETE", &format!("/{CHECKPOINT}"), "admin")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (gone, _) = send(
        &app,
        as_who("PUT", &format!("/{CHECKPOINT}"), "admin")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        gone.status(),
        StatusCode::CREATED,
        "the refused fork left nothing holding the slot"
    );
    let (allowed, text) = send(&app, fork("admin", "/theirs")).await;
    assert_eq!(allowed.status(), StatusCode::CREATED, "{text}");
}

/// Regression: with `--auth-token` on, a pull-wake's ack and release
/// could never succeed — the gate wanted the server's token in the
/// `Authorization` header that carries the claim's token.
#[tokio::test]
async fn with_auth_on_a_pull_wake_is_claimed_acked_and_released() {
    let app = router(guarded());
    let subscription = serde_json::json!({
        "type": "pull-wake", "pattern": "orders/*", "wake_stream": "wakes",
    });
    let (created, text) = send(
        &app,
        as_who("PUT", "/__ds/subscriptions/w", "client")
            .body(Body::from(subscription.to_string()))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED, "{text}");
    let (written, _) = send(
        &app,
        as_who("PUT", "/orders/a", "client")
            .body(Body::from("[1]"))
            .expect("request"),
    )
    .await;
    assert_eq!(written.status(), StatusCode::CREATED);
    let (claimed, text) = send(
        &app,
        as_who("POST", "/__ds/subscriptions/w/claim", "client")
            .body(Body::from(r#"{"worker":"w1"}"#))
            .expect("request"),
    )
    .await;
    assert_eq!(claimed.status(), StatusCode::OK, "{text}");
    let claim = json_body(&text);
    let token = claim["token"].as_str().expect("a claim token");
    let tail = claim["streams"][0]["tail_offset"].clone();
    let ack = serde_json::json!({
        "wake_id": claim["wake_id"], "generation": claim["generation"],
        "acks": [{"stream": "orders/a", "offset": tail}],
    });
    let (acked, text) = send(
        &app,
        as_who("POST", "/__ds/subscriptions/w/ack", token)
            .body(Body::from(ack.to_string()))
            .expect("request"),
    )
    .await;
    assert_eq!(acked.status(), StatusCode::OK, "{text}");
    let release = serde_json::json!({
        "wake_id": claim["wake_id"], "generation": claim["generation"],
    });
    let (released, text) = send(
        &app,
        as_who("POST", "/__ds/subscriptions/w/release", token)
            .body(Body::from(release.to_string()))
            .expect("request"),
    )
    .await;
    assert_eq!(released.status(), StatusCode::NO_CONTENT, "{text}");
    let (stranger, _) = send(
        &app,
        as_who("POST", "/__ds/subscriptions/w/ack", "guess")
            .body(Body::from(ack.to_string()))
            .expect("request"),
    )
    .await;
    assert!(
        stranger.status().is_client_error() && stranger.status() != StatusCode::OK,
        "a guessed token acks nothing"
    );
}
