//! Harnesses that feed arbitrary bytes to every parser `eddy-server`
//! exposes — request headers, offsets, JSON bodies, subscription bodies and
//! subscription patterns — through its router (the parsers themselves are
//! private). Each asserts what must hold for any input: the server answers
//! in time, without a panic, never with a 5xx, and a 400 says why.
//!
//! `fuzz_targets/` runs each harness under libFuzzer
//! (`cargo +nightly fuzz run <name>` in `crates/eddy-server`, with
//! `cargo install cargo-fuzz`); the property tests at the bottom run the
//! same harnesses on arbitrary bytes in `cargo test`.
#![deny(missing_docs)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use eddy_server::{app, App, AppState, ServerConfig};
use eddy_streams::MemoryStorage;
use http_body_util::BodyExt;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use tower::ServiceExt;

/// Splits fuzz input into parts at `0xFF` (a byte no UTF-8 text has), so
/// one input carries several values.
fn parts(data: &[u8]) -> Vec<&[u8]> {
    data.split(|b| *b == 0xFF).collect()
}

fn part<'a>(parts: &[&'a [u8]], i: usize) -> &'a [u8] {
    parts.get(i).copied().unwrap_or_default()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `f` on this thread's runtime (made once per thread).
fn run<F: Future<Output = ()>>(f: F) {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(f));
}

/// A router over a fresh memory store, with a short long-poll.
fn fresh_app() -> App {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    // The server never stops while the harness runs.
    std::mem::forget(stop);
    let config = ServerConfig {
        long_poll_timeout: Duration::from_millis(20),
        ..ServerConfig::default()
    };
    app(AppState::new(
        Arc::new(MemoryStorage::new()),
        config,
        stopping,
    ))
}

/// A request with `headers` where the bytes make a valid header value
/// (others cannot reach the server over HTTP either).
fn request(
    method: &str,
    uri: &str,
    headers: &[(&str, &[u8])],
    body: Vec<u8>,
) -> Option<Request<Body>> {
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            builder = builder.header(name, value);
        }
    }
    builder.body(Body::from(body)).ok()
}

/// Sends a request and checks the answer; returns the status and body.
async fn send(app: &App, request: Option<Request<Body>>) -> Option<(StatusCode, Vec<u8>)> {
    let request = request?;
    let live = request
        .uri()
        .query()
        .is_some_and(|q| q.contains("live=sse"));
    let response = tokio::time::timeout(Duration::from_secs(10), app.clone().oneshot(request))
        .await
        .expect("the server answers in time")
        .expect("the router is infallible");
    let status = response.status();
    // An event stream on an open stream never ends: its head is the answer.
    let body = if live && status == StatusCode::OK {
        Vec::new()
    } else {
        tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
            .await
            .expect("the body ends in time")
            .expect("the body reads")
            .to_bytes()
            .to_vec()
    };
    assert!(
        !status.is_server_error(),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    if status == StatusCode::BAD_REQUEST {
        assert!(!body.is_empty(), "a 400 says why");
    }
    Some((status, body))
}

fn encode(value: &str) -> String {
    utf8_percent_encode(value, NON_ALPHANUMERIC).to_string()
}

/// Every protocol header of creates, appends, forks and reads, each taking
/// one part of the input.
pub fn headers(data: &[u8]) {
    let values = parts(data);
    let names = [
        "content-type",
        "stream-ttl",
        "stream-expires-at",
        "stream-closed",
        "producer-id",
        "producer-epoch",
        "producer-seq",
        "stream-seq",
        "stream-expected-offset",
        "stream-forked-from",
        "stream-fork-offset",
        "stream-fork-sub-offset",
        "if-none-match",
        "eddy-max-bytes",
        "eddy-framing",
        "authorization",
    ];
    let headers: Vec<(&str, &[u8])> = names
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, part(&values, i)))
        .collect();
    run(async {
        let app = fresh_app();
        send(
            &app,
            request(
                "PUT",
                "/s",
                &[("content-type", b"text/plain")],
                b"a".to_vec(),
            ),
        )
        .await;
        for (method, uri, body) in [
            ("PUT", "/c", b"x".to_vec()),
            ("POST", "/s", b"x".to_vec()),
            ("POST", "/s", Vec::new()),
            ("PUT", "/f", Vec::new()),
            ("GET", "/s?offset=-1", Vec::new()),
            ("GET", "/s?offset=-1&live=long-poll", Vec::new()),
            ("HEAD", "/s", Vec::new()),
        ] {
            send(&app, request(method, uri, &headers, body)).await;
        }
    });
}

/// Offsets wherever a client sends one: the `offset` query parameter
/// (catch-up and live), `Stream-Fork-Offset` and `Stream-Expected-Offset`.
pub fn offsets(data: &[u8]) {
    let raw = text(data);
    let encoded = encode(&raw);
    run(async {
        let app = fresh_app();
        send(
            &app,
            request(
                "PUT",
                "/s",
                &[("content-type", b"text/plain")],
                b"abc".to_vec(),
            ),
        )
        .await;
        for query in [
            format!("offset={encoded}"),
            format!("offset={encoded}&live=long-poll"),
            format!("offset={encoded}&live=sse"),
            format!("offset={encoded}&offset=-1"),
        ] {
            send(
                &app,
                request("GET", &format!("/s?{query}"), &[], Vec::new()),
            )
            .await;
        }
        // The raw bytes as a query string, where they make a valid URI.
        send(&app, request("GET", &format!("/s?{raw}"), &[], Vec::new())).await;
        send(
            &app,
            request(
                "PUT",
                "/f",
                &[("stream-forked-from", b"/s"), ("stream-fork-offset", data)],
                Vec::new(),
            ),
        )
        .await;
        send(
            &app,
            request(
                "POST",
                "/s",
                &[
                    ("content-type", b"text/plain"),
                    ("stream-expected-offset", data),
                ],
                b"d".to_vec(),
            ),
        )
        .await;
    });
}

/// JSON bodies of creates and appends (plain and by a producer). Whatever
/// a JSON stream accepted reads back as one valid JSON array.
pub fn json_bodies(data: &[u8]) {
    let json: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let producer: &[(&str, &[u8])] = &[
        ("content-type", b"application/json"),
        ("producer-id", b"p"),
        ("producer-epoch", b"0"),
        ("producer-seq", b"0"),
    ];
    run(async {
        let app = fresh_app();
        send(&app, request("PUT", "/created", json, data.to_vec())).await;
        send(&app, request("PUT", "/j", json, Vec::new())).await;
        send(&app, request("POST", "/j", json, data.to_vec())).await;
        send(&app, request("POST", "/j", producer, data.to_vec())).await;
        for stream in ["/created", "/j"] {
            let read = send(
                &app,
                request("GET", &format!("{stream}?offset=-1"), &[], Vec::new()),
            )
            .await;
            if let Some((StatusCode::OK, body)) = read {
                let value: serde_json::Value =
                    serde_json::from_slice(&body).expect("a JSON stream reads as JSON");
                assert!(value.is_array(), "a JSON stream reads as an array");
            }
        }
    });
}

/// Bodies of every subscription endpoint: create, add streams, claim, ack,
/// callback and release.
pub fn subscription_bodies(data: &[u8]) {
    run(async {
        let app = fresh_app();
        let pull_wake = br#"{"type":"pull-wake","pattern":"events/*","wake_stream":"wake"}"#;
        send(
            &app,
            request("PUT", "/v1/__ds/subscriptions/p", &[], pull_wake.to_vec()),
        )
        .await;
        send(
            &app,
            request("PUT", "/v1/__ds/subscriptions/new", &[], data.to_vec()),
        )
        .await;
        for action in ["streams", "claim", "ack", "callback", "release"] {
            let uri = format!("/v1/__ds/subscriptions/p/{action}");
            send(
                &app,
                request(
                    "POST",
                    &uri,
                    &[("authorization", b"Bearer t")],
                    data.to_vec(),
                ),
            )
            .await;
        }
        send(
            &app,
            request("GET", "/v1/__ds/subscriptions/p", &[], Vec::new()),
        )
        .await;
    });
}

/// A subscription pattern and a stream path: the pattern is compiled (or
/// refused with a reason) and matched against existing and new streams.
pub fn patterns(data: &[u8]) {
    let values = parts(data);
    let pattern = text(part(&values, 0));
    let path: Vec<String> = text(part(&values, 1)).split('/').map(encode).collect();
    let stream = format!("/v1/{}", path.join("/"));
    let subscription = serde_json::json!({
        "type": "pull-wake",
        "pattern": pattern,
        "wake_stream": "wake",
    })
    .to_string();
    run(async {
        let app = fresh_app();
        let json: &[(&str, &[u8])] = &[("content-type", b"application/json")];
        send(&app, request("PUT", &stream, json, b"[]".to_vec())).await;
        send(
            &app,
            request(
                "PUT",
                "/v1/__ds/subscriptions/s",
                &[],
                subscription.into_bytes(),
            ),
        )
        .await;
        send(&app, request("POST", &stream, json, b"1".to_vec())).await;
        send(
            &app,
            request(
                "POST",
                "/v1/__ds/subscriptions/s/claim",
                &[],
                br#"{"worker":"w"}"#.to_vec(),
            ),
        )
        .await;
    });
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Arbitrary bytes, or values near what the parsers accept, joined
    /// into parts.
    fn input() -> impl Strategy<Value = Vec<u8>> {
        let value = prop_oneof![
            any::<Vec<u8>>(),
            Just(b"0000000000000000_0000000000000000".to_vec()),
            Just(b"-1".to_vec()),
            Just(b"now".to_vec()),
            Just(b"application/json".to_vec()),
            Just(b"true".to_vec()),
            "[0-9]{0,24}".prop_map(String::into_bytes),
            "[\\[\\]{}\",:0-9a-z*?/]{0,40}".prop_map(String::into_bytes),
        ];
        proptest::collection::vec(value, 0..8).prop_map(|parts| parts.join(&0xFF))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn headers_get_a_clean_answer(data in input()) {
            headers(&data);
        }

        #[test]
        fn offsets_get_a_clean_answer(data in input()) {
            offsets(&data);
        }

        #[test]
        fn json_bodies_get_a_clean_answer(data in input()) {
            json_bodies(&data);
        }

        #[test]
        fn subscription_bodies_get_a_clean_answer(data in input()) {
            subscription_bodies(&data);
        }

        #[test]
        fn patterns_get_a_clean_answer(data in input()) {
            patterns(&data);
        }
    }
}
