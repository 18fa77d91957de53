//! Regression (issue 32): a client that does not read held what it was
//! sent forever. A response its client never took was held until its body
//! was dropped, and counted as in progress, so the connection was never
//! closed: SSE feeds never polled kept their live-reader slots (every
//! other client's long-poll got 503), and HTTP/2 connections with many
//! streams pinned a read answer per stream. Now a connection whose client
//! takes no byte for the write timeout is closed, and the read answers one
//! connection holds are bounded.

use std::time::Duration;

use eddy_server::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{metrics_page, series, start, until_series};

/// A stream of `count` messages of `size` bytes each.
async fn big_stream(base: &str, path: &str, count: usize, size: usize) {
    let http = reqwest::Client::new();
    let url = format!("{base}/{path}");
    let created = http
        .put(&url)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .expect("create");
    assert!(created.status().is_success());
    for n in 0..count {
        let appended = http
            .post(&url)
            .header("content-type", "application/octet-stream")
            .body(vec![b'a' + (n % 26) as u8; size])
            .send()
            .await
            .expect("append");
        assert!(appended.status().is_success());
    }
}

/// A raw HTTP/1.1 client with a tiny receive buffer that sends `request`
/// and never reads.
async fn never_reading(addr: std::net::SocketAddr, request: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("buffer");
    let mut stream = socket.connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("request");
    stream
}

async fn metric(base: &str, name: &str) -> f64 {
    series(&metrics_page(&reqwest::Client::new(), base).await, name).unwrap_or(0.0)
}

/// SSE readers that never read hold every live-reader slot; once the
/// write timeout passes, their connections are closed and another
/// client's long-poll is served.
#[tokio::test]
async fn sse_readers_that_never_read_give_their_slots_back() {
    let server = start(ServerConfig {
        max_live_readers: 2,
        write_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    let base = server.url();
    // More than the sockets' buffers hold, so the SSE bodies stall.
    big_stream(&base, "big", 24, 1024 * 1024).await;
    let request = "GET /big?offset=-1&live=sse HTTP/1.1\r\nHost: eddy\r\n\r\n";
    let stalled = [
        never_reading(server.addr(), request).await,
        never_reading(server.addr(), request).await,
    ];
    until_series(&base, "eddy_live_readers", |v| v >= 2.0).await;

    let http = reqwest::Client::new();
    let lp = format!("{base}/quiet");
    http.put(&lp).send().await.expect("create");
    until_series(&base, "eddy_connections_stalled_closed_total", |v| v >= 2.0).await;
    let served = http
        .get(format!("{lp}?offset=now&live=long-poll"))
        .send()
        .await
        .expect("long-poll");
    assert_eq!(served.status(), 204, "a slot was given back");
    assert_eq!(metric(&base, "eddy_live_readers").await, 0.0);
    drop(stalled);
    server.stop().await.expect("stop");
}

/// An HTTP/2 client that opens many streams and reads none: the server
/// makes only as many read answers as the connection's unread budget
/// holds, then closes the connection after the write timeout.
#[tokio::test]
async fn an_http2_client_that_reads_nothing_pins_at_most_its_unread_budget() {
    let read = 256 * 1024;
    let server = start(ServerConfig {
        max_read_bytes: read,
        max_unread_bytes: 2 * read,
        write_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    })
    .await;
    let base = server.url();
    big_stream(&base, "wide", 16, read).await;
    let reads_before = metric(&base, "eddy_reads_total").await;

    let socket = TcpStream::connect(server.addr()).await.expect("connect");
    let (mut client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(socket)
        .await
        .expect("h2");
    let connection = tokio::spawn(connection);
    let mut pending = Vec::new();
    for _ in 0..16 {
        let request = http::Request::get(format!("http://{}/wide?offset=-1", server.addr()))
            .body(())
            .expect("request");
        let (response, _) = client.send_request(request, true).expect("send");
        pending.push(response);
    }
    until_series(&base, "eddy_connections_stalled_closed_total", |v| v >= 1.0).await;
    let made = metric(&base, "eddy_reads_total").await - reads_before;
    assert_eq!(made, 2.0, "read answers made for a client that takes none");
    let ended = tokio::time::timeout(Duration::from_secs(10), connection).await;
    assert!(ended.is_ok(), "the connection was closed");
    drop(pending);
    server.stop().await.expect("stop");
}
