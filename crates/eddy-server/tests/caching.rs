//! HTTP caching of reads (issue 15 §3): historical chunks are immutable
//! with a strong `ETag`, the tail, live reads and `HEAD` are never cached,
//! long-poll answers carry a cursor, and a bearer token makes cacheable
//! answers private unless the operator marks a prefix public.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::{app, AppState, CacheConfig, ServerConfig};
use eddy_streams::MemoryStorage;
use http_body_util::BodyExt;

use crate::router::{fast, header, req, router, send, send_empty};

/// A server whose reads carry at most 16 bytes, so one append of four
/// 8-byte messages makes two chunks: one historical, one at the tail.
fn paged(mut config: ServerConfig) -> ServerConfig {
    config.max_read_bytes = 16;
    config
}

async fn create_with_four_messages(app: &eddy_server::App, path: &str, token: Option<&str>) {
    let request = |method: &str, body: String| {
        let mut builder = req(method, path).header("content-type", "text/plain");
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(Body::from(body)).expect("request")
    };
    let (created, _) = send(app, request("PUT", String::new())).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    for i in 0..4 {
        let (appended, _) = send(app, request("POST", format!("message{i}"))).await;
        assert!(appended.status().is_success());
    }
}

/// The URL of a stream's first chunk at its own offset: what a read from
/// `-1` names in `Content-Location`.
async fn first_chunk_url(app: &eddy_server::App, path: &str, token: Option<&str>) -> String {
    let mut request = req("GET", &format!("{path}?offset=-1"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let (first, _) = send(app, request.body(Body::empty()).expect("request")).await;
    let location = header(&first, "content-location").expect("content-location");
    format!("{path}{location}")
}

#[tokio::test]
async fn a_historical_chunk_is_immutable_and_the_tail_is_not_stored() {
    let app = router(paged(fast()));
    create_with_four_messages(&app, "/s", None).await;
    let url = first_chunk_url(&app, "/s", None).await;

    let (first, body) = send_empty(&app, "GET", &url).await;
    assert_eq!(body, "message0message1");
    assert_eq!(header(&first, "stream-up-to-date"), None);
    assert_eq!(
        header(&first, "cache-control"),
        Some("public, max-age=3600, immutable")
    );
    let etag = header(&first, "etag").expect("etag").to_owned();
    assert!(etag.starts_with('"') && !etag.starts_with("W/"), "{etag}");
    assert!(header(&first, "vary").is_some_and(|v| v.contains("accept-encoding")));

    // The same chunk again is the same representation, and a revalidation
    // is a 304 with the tag.
    let (again, _) = send_empty(&app, "GET", &url).await;
    assert_eq!(header(&again, "etag"), Some(etag.as_str()));
    let (revalidated, body) = send(
        &app,
        req("GET", &url)
            .header("if-none-match", &etag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        (revalidated.status(), body.as_str()),
        (StatusCode::NOT_MODIFIED, "")
    );
    assert_eq!(header(&revalidated, "etag"), Some(etag.as_str()));

    // The chunk that reaches the tail changes with the next append.
    let next = header(&first, "stream-next-offset")
        .expect("offset")
        .to_owned();
    let (tail, body) = send_empty(&app, "GET", &format!("/s?offset={next}")).await;
    assert_eq!(body, "message2message3");
    assert_eq!(header(&tail, "stream-up-to-date"), Some("true"));
    assert_eq!(header(&tail, "cache-control"), Some("no-store"));

    let (now, _) = send_empty(&app, "GET", "/s?offset=now").await;
    assert_eq!(header(&now, "cache-control"), Some("no-store"));
    let (head, _) = send_empty(&app, "HEAD", "/s").await;
    assert_eq!(header(&head, "cache-control"), Some("no-store"));
}

#[tokio::test]
async fn writes_errors_and_sse_are_never_cached() {
    let app = router(paged(fast()));
    let (missing, _) = send_empty(&app, "GET", "/absent?offset=-1").await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(header(&missing, "cache-control"), Some("no-store"));
    let (created, _) = send(
        &app,
        req("PUT", "/closed")
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body(Body::from("x"))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(header(&created, "cache-control"), Some("no-store"));
    let (sse, _) = send_empty(&app, "GET", "/closed?offset=-1&live=sse").await;
    assert_eq!(header(&sse, "cache-control"), Some("no-cache"));
}

#[tokio::test]
async fn long_poll_data_is_cacheable_per_cursor_and_timeouts_are_not() {
    let app = router(paged(fast()));
    create_with_four_messages(&app, "/lp", None).await;
    let (data, body) = send_empty(&app, "GET", "/lp?offset=-1&live=long-poll").await;
    assert_eq!(data.status(), StatusCode::OK);
    assert_eq!(body, "message0message1");
    assert_eq!(
        header(&data, "cache-control"),
        Some("no-store"),
        "`-1` names whichever stream the path holds now"
    );
    let own = header(&data, "eddy-read-start").expect("start").to_owned();
    let (data, body) = send_empty(&app, "GET", &format!("/lp?offset={own}&live=long-poll")).await;
    assert_eq!(body, "message0message1");
    assert_eq!(header(&data, "cache-control"), Some("public, max-age=20"));
    assert!(header(&data, "stream-cursor").is_some());
    assert!(header(&data, "etag").is_some());

    let (head, _) = send_empty(&app, "HEAD", "/lp").await;
    let end = header(&head, "stream-next-offset")
        .expect("tail")
        .to_owned();
    let (timeout, _) = send_empty(&app, "GET", &format!("/lp?offset={end}&live=long-poll")).await;
    assert_eq!(timeout.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&timeout, "cache-control"), Some("no-store"));
    assert!(header(&timeout, "stream-cursor").is_some());
}

#[tokio::test]
async fn with_a_token_chunks_are_private_unless_their_prefix_is_public() {
    let config = paged(ServerConfig {
        auth_token: Some("secret".into()),
        cache: CacheConfig {
            max_age: Duration::from_secs(60),
            public_prefixes: vec!["news/".into()],
            ..CacheConfig::default()
        },
        ..fast()
    });
    let app = router(config);
    create_with_four_messages(&app, "/news/today", Some("secret")).await;
    create_with_four_messages(&app, "/mail/alice", Some("secret")).await;
    let read = |url: String| {
        req("GET", &url)
            .header("authorization", "Bearer secret")
            .body(Body::empty())
            .expect("request")
    };
    let news = first_chunk_url(&app, "/news/today", Some("secret")).await;
    let mail = first_chunk_url(&app, "/mail/alice", Some("secret")).await;
    let (public, _) = send(&app, read(news)).await;
    assert_eq!(
        header(&public, "cache-control"),
        Some("public, max-age=60, immutable")
    );
    let (private, _) = send(&app, read(mail)).await;
    assert_eq!(
        header(&private, "cache-control"),
        Some("private, max-age=60, immutable")
    );
}

/// Bounded memory per request: an SSE reader that takes nothing makes the
/// server read nothing more than the chunk it is sending, however much
/// the stream holds.
#[tokio::test]
async fn a_slow_sse_reader_makes_the_server_read_one_chunk_at_a_time() {
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    let state = AppState::new(Arc::new(MemoryStorage::new()), paged(fast()), stopping);
    let metrics = Arc::clone(state.metrics());
    let app = app(state);
    send(
        &app,
        req("PUT", "/big")
            .header("content-type", "text/plain")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    for i in 0..100 {
        send(
            &app,
            req("POST", "/big")
                .header("content-type", "text/plain")
                .body(Body::from(format!("msg{i:05}")))
                .expect("request"),
        )
        .await;
    }
    let reads = |m: &eddy_server::Metrics| crate::metrics_page::current(m, "eddy_reads_total");
    let before = reads(&metrics);
    let response = tower::ServiceExt::oneshot(
        app.clone(),
        req("GET", "/big?offset=-1&live=sse")
            .body(Body::empty())
            .expect("request"),
    )
    .await
    .expect("infallible");
    let mut body = response.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    let first = String::from_utf8_lossy(first.data_ref().expect("data")).into_owned();
    assert!(first.contains("msg00000"), "{first}");
    // Give a read-ahead task every chance to run before looking.
    for _ in 0..1000 {
        tokio::task::yield_now().await;
    }
    assert_eq!(reads(&metrics) - before, 1.0, "one chunk read, none ahead");
    // Taking the events makes the next reads; all 50 chunks arrive.
    let mut seen = first;
    while !seen.contains("msg00099") {
        let frame = body.frame().await.expect("a frame").expect("data");
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().expect("data")));
    }
    assert_eq!(reads(&metrics) - before, 50.0);
}

/// Regression (issue 32): a read from `-1` or the zero offset answered
/// with a redirect, which the public Python client (and every client that
/// does not follow redirects) could not read. It is answered with the
/// data, never stored (its bytes depend on the stream the path holds
/// now), naming the same bytes' immutable URL in `Content-Location`.
#[tokio::test]
async fn a_first_read_is_answered_with_its_data_and_names_its_immutable_url() {
    let app = router(paged(fast()));
    create_with_four_messages(&app, "/first", None).await;
    for sentinel in ["-1", "0000000000000000_0000000000000000"] {
        let (first, body) = crate::router::send_raw(
            &app,
            req("GET", &format!("/first?offset={sentinel}&eddy=1"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        assert_eq!(first.status(), StatusCode::OK, "{sentinel}");
        assert_eq!(body, "message0message1", "{sentinel}");
        assert_eq!(header(&first, "cache-control"), Some("no-store"));
        let location = header(&first, "content-location").expect("content-location");
        assert!(
            location.starts_with("?offset=") && location.ends_with("_0000000000000000&eddy=1"),
            "{location}"
        );
        assert!(
            !location.starts_with("?offset=0000000000000000_"),
            "{location}"
        );
        // The named URL answers the same bytes, immutable.
        let query = location.trim_start_matches('?');
        let (own, own_body) = crate::router::send_raw(
            &app,
            req("GET", &format!("/first?{query}"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        assert_eq!(own.status(), StatusCode::OK);
        assert_eq!(own_body, body);
        assert_eq!(header(&own, "etag"), header(&first, "etag"));
        assert!(header(&own, "cache-control").is_some_and(|c| c.contains("immutable")));
        assert_eq!(header(&own, "content-location"), None);
    }
}

/// With `redirect_first_reads`, a read from `-1` or the zero offset is a
/// redirect that is never stored, to the same read at the stream's own
/// offset, so that caches see every first read under the immutable URL.
#[tokio::test]
async fn first_reads_may_be_redirected_to_their_immutable_url() {
    let mut config = paged(fast());
    config.cache.redirect_first_reads = true;
    let app = router(config);
    create_with_four_messages(&app, "/again", None).await;
    for sentinel in ["-1", "0000000000000000_0000000000000000"] {
        let (redirect, body) = crate::router::send_raw(
            &app,
            req("GET", &format!("/again?offset={sentinel}&eddy=1"))
                .body(Body::empty())
                .expect("request"),
        )
        .await;
        assert_eq!(
            redirect.status(),
            StatusCode::TEMPORARY_REDIRECT,
            "{sentinel}"
        );
        assert_eq!(header(&redirect, "cache-control"), Some("no-store"));
        let location = header(&redirect, "location").expect("location");
        assert!(
            location.starts_with("?offset=") && location.ends_with("_0000000000000000&eddy=1"),
            "{location}"
        );
        assert_eq!(body, "");
    }
}

/// What a cache may keep stays right when a stream is deleted and created
/// again (issue 24 §1): the old stream's chunk URLs and tags never name
/// the new stream's bytes: its offsets are refused as stale (never
/// stored), and a revalidation with its tag is answered in full.
#[tokio::test]
async fn a_stream_created_again_never_answers_for_the_old_one() {
    let app = router(paged(fast()));
    create_with_four_messages(&app, "/again", None).await;
    let (old, old_body) = send_empty(&app, "GET", "/again?offset=-1").await;
    let old_url = format!(
        "/again?offset={}",
        header(&old, "eddy-read-start").expect("start")
    );
    let old_tag = header(&old, "etag").expect("etag").to_owned();
    assert_eq!(old_body, "message0message1");

    send_empty(&app, "DELETE", "/again").await;
    let (created, _) = send(
        &app,
        req("PUT", "/again")
            .header("content-type", "text/plain")
            .body(Body::from("fresh000fresh001fresh002"))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);

    let (stale, body) = send_empty(&app, "GET", &old_url).await;
    assert_eq!(stale.status(), StatusCode::GONE);
    assert_eq!(header(&stale, "eddy-error"), Some("offset/stale"));
    assert_eq!(header(&stale, "cache-control"), Some("no-store"));
    assert!(!body.contains("fresh"), "{body}");

    let (new, new_body) = send_empty(&app, "GET", "/again?offset=-1").await;
    assert_eq!(new_body, "fresh000fresh001fresh002");
    let new_url = format!(
        "/again?offset={}",
        header(&new, "eddy-read-start").expect("start")
    );
    assert_ne!(new_url, old_url);
    let (revalidated, body) = send(
        &app,
        req("GET", &new_url)
            .header("if-none-match", &old_tag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(
        revalidated.status(),
        StatusCode::OK,
        "the old tag is not this chunk's"
    );
    assert_eq!(body, "fresh000fresh001fresh002");
    assert_ne!(header(&revalidated, "etag"), Some(old_tag.as_str()));
}
