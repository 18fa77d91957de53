//! Connections are bounded: a cap on open connections, and timeouts that
//! close a connection unused before its first request (handshake) or
//! between requests (idle), on raw sockets.

use std::io::Read;
use std::time::Duration;

use eddy_server::ServerConfig;

use crate::support::start;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Far longer than any timeout these tests configure: only a connection
/// that is never closed reaches it.
const NEVER: Duration = Duration::from_secs(30);

/// Reads until the server closes the connection; returns what it sent,
/// or `None` when it kept the connection open.
async fn until_closed(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(NEVER, async {
        let mut buffer = [0u8; 4096];
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| received)
}

/// Regression: a socket that never sent a byte was held forever (the
/// HTTP version was awaited without a timeout).
#[tokio::test]
async fn a_silent_socket_is_closed_after_the_header_timeout() {
    let server = start(ServerConfig {
        header_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let mut silent = TcpStream::connect(server.addr()).await.expect("connect");
    assert_eq!(
        until_closed(&mut silent).await,
        Some(Vec::new()),
        "closed, without an answer"
    );
    server.stop().await.expect("stop");
}

/// The HTTP/2 client preface and settings: a client that says it speaks
/// HTTP/2 and then sends no request.
const H2_OPENING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Regression: an HTTP/2 connection that opened and then sent no request
/// was held forever.
#[tokio::test]
async fn an_http2_connection_without_a_request_is_closed_after_the_header_timeout() {
    let server = start(ServerConfig {
        header_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let mut socket = TcpStream::connect(server.addr()).await.expect("connect");
    socket.write_all(H2_OPENING).await.expect("preface");
    let received = until_closed(&mut socket).await.expect("closed");
    // Its settings, then a GOAWAY frame (type 7) before the close.
    assert!(
        received
            .windows(4)
            .any(|w| w[3] == 7 && w[..3] == [0, 0, 8]),
        "a GOAWAY: {received:?}"
    );
    server.stop().await.expect("stop");
}

/// Regression: an HTTP/2 connection was held forever once its requests
/// were answered (HTTP/2 has no header timeout between requests).
#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let server = start(ServerConfig {
        idle_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let socket = TcpStream::connect(server.addr()).await.expect("connect");
    let (mut client, connection) = h2::client::handshake(socket).await.expect("h2");
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{}/healthz", server.addr()))
        .body(())
        .expect("request");
    let (response, _) = client.send_request(request, true).expect("send");
    let response = response.await.expect("response");
    assert_eq!(response.status(), 200);
    drop(response);
    // The client keeps its end open (it would close a connection it can
    // no longer use): only the server ends it.
    let ended = tokio::time::timeout(NEVER, connection).await;
    assert!(ended.is_ok(), "the server closed the idle connection");
    drop(client);
    server.stop().await.expect("stop");
}

/// A long-poll in progress is not idle: it outlives the idle timeout and
/// ends with its own answer.
#[tokio::test]
async fn a_long_poll_is_not_cut_by_the_idle_timeout() {
    let server = start(ServerConfig {
        idle_timeout: Duration::from_millis(100),
        // An unused connection gets this long to close after it is told to.
        header_timeout: Duration::from_millis(200),
        long_poll_timeout: Duration::from_millis(700),
        ..ServerConfig::default()
    })
    .await;
    let http = reqwest::Client::new();
    let url = format!("{}/lp", server.url());
    let created = http.put(&url).send().await.expect("create");
    assert!(created.status().is_success());
    let waited = http
        .get(format!("{url}?offset=now&live=long-poll"))
        .send()
        .await
        .expect("the long-poll is answered, not cut");
    assert_eq!(waited.status(), 204, "its own timeout answer");
    server.stop().await.expect("stop");
}

/// Regression: connections were unlimited. At the cap the server accepts
/// no more until one closes: a new client waits (in the listen backlog)
/// and is served once a slot is free.
#[tokio::test]
async fn connections_over_the_cap_wait_until_one_closes() {
    let server = start(ServerConfig {
        max_connections: 1,
        header_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    // Holds the only slot until the header timeout closes it.
    let mut holder = std::net::TcpStream::connect(server.addr()).expect("connect");
    let mut waiting = TcpStream::connect(server.addr()).await.expect("connect");
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let answer = until_closed(&mut waiting).await.expect("answered");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    holder.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    assert_eq!(
        holder.read(&mut byte).ok(),
        Some(0),
        "the waiting client was served only after the holder's connection closed"
    );
    server.stop().await.expect("stop");
}

/// A request head that does not arrive whole within the header timeout
/// (a client trickling it, or stopping halfway) closes the connection,
/// on its first request and on a later one of a kept-alive connection,
/// long before the idle timeout.
#[tokio::test]
async fn a_head_that_stops_halfway_is_closed_after_the_header_timeout() {
    let header_timeout = Duration::from_millis(300);
    let server = start(ServerConfig {
        header_timeout,
        idle_timeout: NEVER,
        ..ServerConfig::default()
    })
    .await;
    let healthz = b"GET /healthz HTTP/1.1\r\nhost: eddy\r\n\r\n";
    for requests_before in [0, 1] {
        let mut socket = TcpStream::connect(server.addr()).await.expect("connect");
        for _ in 0..requests_before {
            socket.write_all(healthz).await.expect("write");
            let mut answer = [0u8; 512];
            let n = socket.read(&mut answer).await.expect("read");
            assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "answered");
        }
        let started = std::time::Instant::now();
        socket.write_all(&healthz[..20]).await.expect("write");
        let received = until_closed(&mut socket).await;
        let took = started.elapsed();
        assert!(
            received.is_some(),
            "after {requests_before} requests: a stopped head is closed"
        );
        assert!(
            took >= header_timeout && took < header_timeout * 4,
            "after {requests_before} requests: closed after {took:?}"
        );
    }
    server.stop().await.expect("stop");
}
