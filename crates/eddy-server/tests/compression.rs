//! Response compression (issue 15 §2): every content type of the
//! conformance suite round-trips through gzip, brotli and zstd to the same
//! bytes; text over the threshold is compressed with `Vary:
//! Accept-Encoding`, binary and SSE are sent as stored.

use axum::body::Body;
use axum::http::StatusCode;
use eddy_server::{CompressionConfig, ServerConfig};
use tokio::io::AsyncReadExt;

use crate::router::{fast, header, req, router, send};

/// The content types the conformance suite uses, and whether they are
/// compressed.
const CONTENT_TYPES: [(&str, bool); 8] = [
    ("text/plain", true),
    ("TEXT/PLAIN", true),
    ("application/json", true),
    ("APPLICATION/JSON", true),
    ("application/json; charset=utf-8", true),
    ("application/jwk-set+json", true),
    ("application/octet-stream", false),
    ("application/x-protobuf", false),
];

const CODINGS: [&str; 3] = ["gzip", "br", "zstd"];

async fn decode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZstdDecoder};
    let mut out = Vec::new();
    let read = match coding {
        "gzip" => GzipDecoder::new(bytes).read_to_end(&mut out).await,
        "br" => BrotliDecoder::new(bytes).read_to_end(&mut out).await,
        "zstd" => ZstdDecoder::new(bytes).read_to_end(&mut out).await,
        other => panic!("unexpected coding {other}"),
    };
    read.expect("decodes");
    out
}

/// A message of about `size` bytes valid for `content_type`.
fn message(content_type: &str, size: usize) -> Vec<u8> {
    if content_type.to_ascii_lowercase().contains("json") {
        let text = "event ".repeat(size / 6);
        format!(r#"[{{"text":"{text}"}}]"#).into_bytes()
    } else if content_type.starts_with("text") || content_type.starts_with("TEXT") {
        "event ".repeat(size / 6).into_bytes()
    } else {
        (0..size).map(|i| (i % 7) as u8).collect()
    }
}

async fn read_raw(
    app: &eddy_server::App,
    path: &str,
    accept: Option<&str>,
) -> (axum::http::Response<Body>, Vec<u8>) {
    let mut request = req("GET", &format!("{path}?offset=-1"));
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    crate::router::send_for_bytes(app, request.body(Body::empty()).expect("request")).await
}

async fn create(app: &eddy_server::App, path: &str, content_type: &str, body: Vec<u8>) {
    let (created, _) = send(
        app,
        req("PUT", path)
            .header("content-type", content_type)
            .body(Body::from(body))
            .expect("request"),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED, "{content_type}");
}

#[tokio::test]
async fn every_conformance_content_type_round_trips_in_every_coding() {
    let app = router(fast());
    for (i, (content_type, compressed)) in CONTENT_TYPES.into_iter().enumerate() {
        let path = format!("/c{i}");
        create(&app, &path, content_type, message(content_type, 4096)).await;
        let (plain, expected) = read_raw(&app, &path, None).await;
        assert_eq!(header(&plain, "content-encoding"), None);
        for coding in CODINGS {
            let (response, bytes) = read_raw(&app, &path, Some(coding)).await;
            assert_eq!(response.status(), StatusCode::OK);
            let sent = header(&response, "content-encoding");
            let vary = response
                .headers()
                .get_all("vary")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(", ");
            assert!(
                vary.contains("accept-encoding"),
                "{content_type}: vary {vary}"
            );
            if compressed {
                assert_eq!(sent, Some(coding), "{content_type}");
                assert!(bytes.len() < expected.len() / 4, "{content_type} {coding}");
                assert_eq!(
                    decode(coding, &bytes).await,
                    expected,
                    "{content_type} {coding}"
                );
                // A compressed copy is another representation: its own tag.
                let tag = header(&response, "etag").expect("etag");
                assert!(tag.ends_with(&format!("-{coding}\"")), "{tag}");
            } else {
                assert_eq!(sent, None, "{content_type} is not recompressed");
                assert_eq!(bytes, expected, "{content_type}");
            }
        }
    }
}

#[tokio::test]
async fn the_client_preference_and_the_threshold_decide() {
    let app = router(fast());
    create(
        &app,
        "/big",
        "application/json",
        message("application/json", 8192),
    )
    .await;
    create(
        &app,
        "/small",
        "application/json",
        message("application/json", 200),
    )
    .await;
    let (preferred, _) = read_raw(&app, "/big", Some("gzip;q=0.5, zstd;q=1.0, br;q=0.1")).await;
    assert_eq!(header(&preferred, "content-encoding"), Some("zstd"));
    let (small, bytes) = read_raw(&app, "/small", Some("gzip")).await;
    assert_eq!(header(&small, "content-encoding"), None);
    assert!(bytes.starts_with(b"[{"));
    let (identity, _) = read_raw(&app, "/big", Some("identity")).await;
    assert_eq!(header(&identity, "content-encoding"), None);
}

#[tokio::test]
async fn compression_can_be_turned_off() {
    let app = router(ServerConfig {
        compression: CompressionConfig {
            enabled: false,
            ..CompressionConfig::default()
        },
        ..fast()
    });
    create(&app, "/big", "text/plain", message("text/plain", 8192)).await;
    let (response, _) = read_raw(&app, "/big", Some("gzip, br, zstd")).await;
    assert_eq!(header(&response, "content-encoding"), None);
}

#[tokio::test]
async fn a_compressed_tag_revalidates_to_304() {
    let app = router(ServerConfig {
        max_read_bytes: 4096,
        ..fast()
    });
    create(&app, "/t", "text/plain", message("text/plain", 4000)).await;
    send(
        &app,
        req("POST", "/t")
            .header("content-type", "text/plain")
            .body(Body::from(message("text/plain", 4000)))
            .expect("request"),
    )
    .await;
    let (first, _) = read_raw(&app, "/t", Some("gzip")).await;
    assert_eq!(header(&first, "content-encoding"), Some("gzip"));
    let tag = header(&first, "etag").expect("etag").to_owned();
    let (revalidated, _) = send(
        &app,
        req("GET", "/t?offset=-1")
            .header("accept-encoding", "gzip")
            .header("if-none-match", &tag)
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(revalidated.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&revalidated, "etag"), Some(tag.as_str()));
}

#[tokio::test]
async fn sse_is_never_compressed() {
    let app = router(fast());
    send(
        &app,
        req("PUT", "/live")
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body(Body::from(message("text/plain", 8192)))
            .expect("request"),
    )
    .await;
    let (response, body) = send(
        &app,
        req("GET", "/live?offset=-1&live=sse")
            .header("accept-encoding", "gzip, br, zstd")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(header(&response, "content-encoding"), None);
    assert!(body.starts_with("event: data"), "{body}");
}
