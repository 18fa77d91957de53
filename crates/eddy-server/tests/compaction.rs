//! Compaction over HTTP: `Eddy-Compaction` on create and its echo, the
//! server's rules by path pattern, and reads of a compacted stream (from
//! `-1`, from inside a compacted range, page by page, long-poll) whose
//! offsets have holes, and where compaction dropped a delete.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::{MemoryStorage, Storage, StreamPath};

use crate::router::{fast, header, req, send, send_empty};

/// The application over `store`.
fn over(store: Arc<MemoryStorage>, config: ServerConfig) -> eddy_server::App {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    std::mem::forget(stop);
    app(AppState::new(store, config, stopping))
}

fn put(uri: &str, content_type: &str, compaction: Option<&str>) -> axum::http::Request<Body> {
    let mut request = req("PUT", uri).header("content-type", content_type);
    if let Some(policy) = compaction {
        request = request.header("eddy-compaction", policy);
    }
    request.body(Body::empty()).expect("request")
}

fn upsert(key: &str, value: u32) -> String {
    format!(r#"{{"type":"row","key":"{key}","value":{value},"headers":{{"operation":"upsert"}}}}"#)
}

async fn append(app: &eddy_server::App, uri: &str, body: String) {
    let request = req("POST", uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    assert_eq!(send(app, request).await.0.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_policy_is_set_on_create_echoed_and_part_of_the_config() {
    let app = over(Arc::new(MemoryStorage::new()), fast());
    let json = "application/json";
    let (created, _) = send(&app, put("/s", json, Some("deletes=48h; messages=10"))).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(
        header(&created, "eddy-compaction"),
        Some("messages=10; deletes=2d"),
        "echoed in its canonical form"
    );
    let (head, _) = send_empty(&app, "HEAD", "/s").await;
    assert_eq!(
        header(&head, "eddy-compaction"),
        Some("messages=10; deletes=2d")
    );
    let (read, _) = send_empty(&app, "GET", "/s?offset=-1").await;
    assert_eq!(
        header(&read, "eddy-compaction"),
        Some("messages=10; deletes=2d")
    );
    let (again, _) = send(&app, put("/s", json, Some("messages=10; deletes=172800s"))).await;
    assert_eq!(
        again.status(),
        StatusCode::OK,
        "the same policy, written otherwise"
    );
    let (other, _) = send(&app, put("/s", json, Some("on"))).await;
    assert_eq!(other.status(), StatusCode::CONFLICT);
    assert_eq!(header(&other, "eddy-error"), Some("stream/config-conflict"));
    let (none, _) = send(&app, put("/s", json, None)).await;
    assert_eq!(none.status(), StatusCode::CONFLICT);

    let (bad, body) = send(&app, put("/bad", json, Some("messages=0"))).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&bad, "eddy-error"), Some("compaction/invalid"));
    assert!(body.contains("above 0"), "{body}");
    let (text, body) = send(&app, put("/text", "text/plain", Some("on"))).await;
    assert_eq!(text.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&text, "eddy-error"), Some("compaction/invalid"));
    assert!(body.contains("only JSON streams"), "{body}");
    for path in ["/bad", "/text"] {
        let (absent, _) = send_empty(&app, "HEAD", path).await;
        assert_eq!(
            absent.status(),
            StatusCode::NOT_FOUND,
            "a refused create made nothing"
        );
    }
}

#[tokio::test]
async fn server_rules_give_json_streams_a_policy() {
    let config = ServerConfig {
        compaction: vec![
            "state/scratch/*=none".parse().expect("rule"),
            "state/**=age=1h".parse().expect("rule"),
        ],
        ..fast()
    };
    let app = over(Arc::new(MemoryStorage::new()), config);
    let json = "application/json";
    let (rows, _) = send(&app, put("/state/a", json, None)).await;
    assert_eq!(header(&rows, "eddy-compaction"), Some("age=1h; deletes=1d"));
    let (scratch, _) = send(&app, put("/state/scratch/a", json, None)).await;
    assert_eq!(header(&scratch, "eddy-compaction"), None, "`none` exempts");
    let (text, _) = send(&app, put("/state/b", "text/plain", None)).await;
    assert_eq!(
        text.status(),
        StatusCode::CREATED,
        "rules skip other streams"
    );
    assert_eq!(header(&text, "eddy-compaction"), None);
    let (own, _) = send(&app, put("/state/c", json, Some("none"))).await;
    assert_eq!(header(&own, "eddy-compaction"), None, "the header wins");
}

#[tokio::test]
async fn reads_of_a_compacted_stream_skip_what_went_and_keep_offsets() {
    let store = Arc::new(MemoryStorage::new());
    let app = over(store.clone(), fast());
    let (created, _) = send(&app, put("/s", "application/json", Some("on"))).await;
    let start = header(&created, "stream-next-offset")
        .expect("offset")
        .to_owned();
    // Positions 0..6: a, b, a, b, a, c.
    for (key, value) in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5), ("c", 6)] {
        append(&app, "/s", upsert(key, value)).await;
    }
    let (head, _) = send_empty(&app, "HEAD", "/s").await;
    let tail = header(&head, "stream-next-offset")
        .expect("tail")
        .to_owned();
    let path = StreamPath::new("s").expect("path");
    assert_eq!(store.compact(&path).await, Ok(3));

    let (all, body) = send_empty(&app, "GET", "/s?offset=-1").await;
    assert_eq!(all.status(), StatusCode::OK);
    let expected = format!("[{},{},{}]", upsert("b", 4), upsert("a", 5), upsert("c", 6));
    assert_eq!(body, expected, "the latest of each row, in order");
    assert_eq!(header(&all, "stream-next-offset"), Some(tail.as_str()));
    assert_eq!(header(&all, "stream-up-to-date"), Some("true"));

    // From a dropped position: what is kept after it, no 410.
    let at = |position: u64| format!("{}{position:016}", &start[..17]);
    let (inside, body) = send_empty(&app, "GET", &format!("/s?offset={}", at(1))).await;
    assert_eq!(inside.status(), StatusCode::OK);
    assert_eq!(body, expected);
    let (later, body) = send_empty(&app, "GET", &format!("/s?offset={}", at(4))).await;
    assert_eq!(later.status(), StatusCode::OK);
    assert_eq!(body, format!("[{},{}]", upsert("a", 5), upsert("c", 6)));

    // A message at a time: the next offset is after the message
    // returned, never inside a hole it skipped.
    let one_by_one = over(
        store.clone(),
        ServerConfig {
            max_read_bytes: 1,
            ..fast()
        },
    );
    let mut from = start.clone();
    let mut read = Vec::new();
    loop {
        let (chunk, body) = send_empty(&one_by_one, "GET", &format!("/s?offset={from}")).await;
        assert_eq!(chunk.status(), StatusCode::OK);
        let next = header(&chunk, "stream-next-offset")
            .expect("next")
            .to_owned();
        if body != "[]" {
            read.push(body);
        }
        if header(&chunk, "stream-up-to-date") == Some("true") {
            break;
        }
        assert!(next > from, "{next} after {from}");
        from = next;
    }
    assert_eq!(read.concat().replace("][", ","), expected);

    // A long-poll at the tail waits for the next append as before.
    let (at_tail, _) = send_empty(&app, "GET", &format!("/s?offset={tail}&live=long-poll")).await;
    assert_eq!(at_tail.status(), StatusCode::NO_CONTENT);
}

/// `store` served on a local port, and a remote client of it.
#[cfg(feature = "remote")]
async fn served(
    store: Arc<MemoryStorage>,
) -> (eddy_server::RunningServer, eddy_server::RemoteStorage) {
    let server = eddy_server::Server::bind(([127, 0, 0, 1], 0).into(), store, fast())
        .await
        .expect("bind")
        .spawn();
    let remote = eddy_server::RemoteStorage::new(&server.url()).expect("client");
    (server, remote)
}

/// The remote client knows each message's offset in a compacted stream
/// (the `eddy-positions` extension), so what reads per message offsets
/// (a state stream's skipped messages, typed chunks, projections) is
/// right over HTTP too.
#[cfg(feature = "remote")]
#[tokio::test]
async fn the_remote_client_reads_each_messages_offset() {
    let store = Arc::new(MemoryStorage::new());
    let (server, remote) = served(store.clone()).await;
    let path = StreamPath::new("s").expect("path");
    let config = eddy_streams::StreamConfig::json().with_compaction(eddy_streams::Compaction::ON);
    remote
        .create(&path, config, eddy_streams::Payload::empty())
        .await
        .expect("create");
    for (key, value) in [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)] {
        remote
            .append(&path, eddy_streams::Append::body(upsert(key, value)))
            .await
            .expect("append");
    }
    assert_eq!(store.compact(&path).await, Ok(2));
    let chunk = remote
        .read(&path, eddy_streams::ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    let positions: Vec<u64> = (0..chunk.messages.len())
        .map(|i| chunk.offset_of(i).position())
        .collect();
    assert_eq!(positions, [2, 3, 4]);
    assert_eq!(chunk.offset_after(1).position(), 3);
    assert_eq!(chunk.next_offset.position(), 5);
    assert_eq!(chunk.compaction, Some(eddy_streams::Compaction::ON));
    server.stop().await.expect("stop");
}

fn change(key: &str, operation: &str) -> String {
    format!(r#"{{"type":"row","key":"{key}","value":1,"headers":{{"operation":"{operation}"}}}}"#)
}

/// A store whose clock the test moves, with a compacted stream `s` at
/// positions 0..4 (a's insert, b's insert, a's delete, c's insert) whose
/// delete a pass dropped past its one-minute lifetime.
async fn with_a_dropped_delete() -> Arc<MemoryStorage> {
    let clock = Arc::new(eddy_streams::ManualClock::at(1_764_000_000_000));
    let store = Arc::new(MemoryStorage::new().with_clock(clock.clone()));
    let path = StreamPath::new("s").expect("path");
    let policy = "deletes=1m".parse().expect("policy");
    let config = eddy_streams::StreamConfig::json().with_compaction(policy);
    store
        .create(&path, config, eddy_streams::Payload::empty())
        .await
        .expect("create");
    for message in [
        change("a", "insert"),
        change("b", "insert"),
        change("a", "delete"),
        change("c", "insert"),
    ] {
        store
            .append(&path, eddy_streams::Append::body(message))
            .await
            .expect("append");
    }
    clock.advance(std::time::Duration::from_secs(61));
    assert_eq!(store.compact(&path).await, Ok(2), "a's insert and delete");
    store
}

/// Where compaction dropped a delete goes out on GET and HEAD (absent
/// before any was dropped), so a remote reader resuming before it knows
/// it may have missed one.
#[tokio::test]
async fn reads_and_heads_say_where_a_delete_was_dropped() {
    let store = with_a_dropped_delete().await;
    let app = over(store.clone(), fast());
    let (head, _) = send_empty(&app, "HEAD", "/s").await;
    let tail = header(&head, "stream-next-offset")
        .expect("tail")
        .to_owned();
    let before = format!("{}{:016}", &tail[..17], 3);
    assert_eq!(
        header(&head, "eddy-deletes-dropped-before"),
        Some(before.as_str())
    );
    assert_eq!(header(&head, "eddy-deletes-dropped"), Some("1"));
    let (read, _) = send_empty(&app, "GET", &format!("/s?offset={tail}")).await;
    assert_eq!(
        header(&read, "eddy-deletes-dropped-before"),
        Some(before.as_str())
    );
    assert_eq!(header(&read, "eddy-deletes-dropped"), Some("1"));

    let (_, _) = send(&app, put("/plain", "application/json", Some("on"))).await;
    let (plain, _) = send_empty(&app, "HEAD", "/plain").await;
    assert_eq!(header(&plain, "eddy-deletes-dropped-before"), None);
    assert_eq!(header(&plain, "eddy-deletes-dropped"), None);
}

/// The remote client reads where compaction dropped a delete back into
/// its reads and heads, so remote projections learn of it too.
#[cfg(feature = "remote")]
#[tokio::test]
async fn the_remote_client_reads_where_a_delete_was_dropped() {
    let store = with_a_dropped_delete().await;
    let (server, remote) = served(store.clone()).await;
    let path = StreamPath::new("s").expect("path");
    let local = store.head(&path).await.expect("head");
    assert!(local.dropped_deletes.is_some());
    let head = remote.head(&path).await.expect("head");
    assert_eq!(head.dropped_deletes, local.dropped_deletes);
    let chunk = remote
        .read(&path, eddy_streams::ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read");
    assert_eq!(chunk.dropped_deletes, local.dropped_deletes);
    let listed = remote.list("").await.expect("list");
    assert_eq!(listed[0].dropped_deletes, local.dropped_deletes);
    server.stop().await.expect("stop");
}
