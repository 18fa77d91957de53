//! Operations on a real socket: graceful shutdown, slow clients, and the
//! bearer token on the wire.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use eddy_server::{Server, ServerConfig};
use eddy_streams::{
    Append, Appended, Created, Fork, MemoryStorage, Notifier, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{start, until_series};

/// Waits until the server refuses connections: it began to shut down.
async fn refuses_connections(addr: std::net::SocketAddr) {
    for _ in 0..1000 {
        if TcpStream::connect(addr).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the server kept accepting connections");
}

#[tokio::test]
async fn shutdown_ends_live_reads_and_lets_requests_finish() {
    let server = start(ServerConfig {
        long_poll_timeout: Duration::from_secs(30),
        ..ServerConfig::default()
    })
    .await;
    let url = format!("{}/s", server.url());
    let http = reqwest::Client::new();
    let created = http.put(&url).send().await.expect("create");
    assert_eq!(created.status(), 201);
    let poll = tokio::spawn({
        let http = http.clone();
        let url = url.clone();
        async move {
            http.get(format!("{url}?offset=now&live=long-poll"))
                .send()
                .await
        }
    });
    until_series(&server.url(), "eddy_live_readers", |n| n == 1.0).await;
    let started = Instant::now();
    server.stop().await.expect("stop");
    let answered = poll
        .await
        .expect("join")
        .expect("the long-poll is answered, not dropped");
    assert_eq!(answered.status(), 204);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown did not wait out the long-poll"
    );
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let server = start(ServerConfig {
        header_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let mut socket = TcpStream::connect(server.addr()).await.expect("connect");
    socket
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "the server closed the connection of a client that never finished its headers"
    );
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn slow_bodies_get_408() {
    let server = start(ServerConfig {
        body_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let mut socket = TcpStream::connect(server.addr()).await.expect("connect");
    socket
        .write_all(b"PUT /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
        .await
        .expect("write");
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf))
        .await
        .expect("answered in time")
        .expect("read");
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn very_long_paths_are_refused() {
    let server = start(ServerConfig::default()).await;
    let long = "a".repeat(eddy_streams::MAX_PATH_LEN + 1);
    let response = reqwest::Client::new()
        .put(format!("{}/{long}", server.url()))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 400);
    assert_eq!(
        response
            .headers()
            .get("eddy-error")
            .and_then(|v| v.to_str().ok()),
        Some("path/invalid")
    );
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn shutdown_finishes_an_append_in_flight() {
    let store = Arc::new(MemoryStorage::new());
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        store.clone(),
        ServerConfig::default(),
    )
    .await
    .expect("bind")
    .spawn();
    let base = server.url();
    let created = reqwest::Client::new()
        .put(format!("{base}/inflight"))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let mut socket = TcpStream::connect(server.addr()).await.expect("connect");
    socket
        .write_all(b"POST /inflight HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 10\r\n\r\nhello")
        .await
        .expect("write the first half");
    // This /metrics request and the append.
    until_series(&base, "eddy_requests_in_flight", |n| n == 2.0).await;
    let addr = server.addr();
    let stopping = tokio::spawn(server.stop());
    refuses_connections(addr).await;
    socket
        .write_all(b"world")
        .await
        .expect("write the second half");
    let mut buf = vec![0u8; 1024];
    let n = socket.read(&mut buf).await.expect("read");
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    stopping.await.expect("join").expect("stop");
    let path = eddy_streams::StreamPath::new("inflight").expect("path");
    let chunk =
        eddy_streams::Storage::read(&*store, &path, eddy_streams::ReadFrom::Beginning, 1024)
            .await
            .expect("read");
    assert_eq!(chunk.messages, vec![bytes::Bytes::from("helloworld")]);
}

#[cfg(feature = "remote")]
#[tokio::test]
async fn the_remote_client_sends_its_token() {
    use eddy_server::RemoteStorage;
    use eddy_streams::{Payload, Storage, StreamConfig, StreamPath};
    let server = start(ServerConfig {
        auth_token: Some("t0ken".into()),
        ..ServerConfig::default()
    })
    .await;
    let path = StreamPath::new("guarded").expect("path");
    let anonymous = RemoteStorage::new(&server.url()).expect("client");
    let refused = anonymous
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .err()
        .map(|e| e.to_string());
    assert!(
        refused.is_some_and(|m| m.contains("401")),
        "refused without the token"
    );
    let trusted = RemoteStorage::new(&server.url())
        .expect("client")
        .with_token("t0ken");
    let created = trusted
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create with the token");
    assert!(created.created);
    server.stop().await.expect("stop");
}

/// An operator report (what a bridge publishes for `eddy status`) goes
/// through a remote client with the admin token, is written once per
/// change, and is refused without that token: it lives under `__eddy/`.
#[cfg(feature = "remote")]
#[tokio::test]
async fn operator_reports_go_through_a_remote_client_with_the_admin_token() {
    use eddy_server::RemoteStorage;
    use eddy_streams::{Report, ReportItem};
    let server = start(ServerConfig {
        auth_token: Some("t0ken".into()),
        admin_token: Some("adm1n".into()),
        ..ServerConfig::default()
    })
    .await;
    let item = |n: u64| ReportItem {
        subject: format!("row-{n}"),
        code: "stream/closed".into(),
        message: "the stream is closed".into(),
        since_ms: n,
    };
    let one = Report::new("bridge/orders", "1 parked row").with_items(1, vec![item(1)]);
    let user = RemoteStorage::new(&server.url())
        .expect("client")
        .with_token("t0ken");
    let refused = one.publish(&user).await.err().map(|e| e.to_string());
    assert!(
        refused.as_deref().is_some_and(|m| m.contains("403")),
        "{refused:?}"
    );
    let admin = RemoteStorage::new(&server.url())
        .expect("client")
        .with_token("adm1n");
    assert!(one.publish(&admin).await.expect("publish"));
    assert!(!one.publish(&admin).await.expect("the same again"));
    let two = Report::new("bridge/orders", "2 parked rows").with_items(2, vec![item(1), item(2)]);
    assert!(two.publish(&admin).await.expect("a change"));
    let shown = eddy_streams::reports(&user).await.expect("reports");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(
        (shown[0].summary.as_str(), shown[0].items.len()),
        ("2 parked rows", 2)
    );
    server.stop().await.expect("stop");
}

/// A memory store whose appends to the stream `stuck` never finish, like a
/// store call that hangs.
struct StuckAppends(MemoryStorage);

#[async_trait]
impl Storage for StuckAppends {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.0.create(path, config, initial).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        if path.as_str() == "stuck" {
            std::future::pending::<()>().await;
        }
        self.0.append(path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.0.read(path, from, max_bytes).await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        self.0.fork(path, fork).await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.0.head(path).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.0.delete(path).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.0.list(prefix).await
    }

    fn notifier(&self) -> &Notifier {
        self.0.notifier()
    }
}

/// Regression: when a request was stuck, `stop` returned after the grace
/// period but the stuck connection lived on: its client kept waiting and
/// the connection task kept the store open.
#[tokio::test]
async fn shutdown_ends_within_its_grace_even_when_a_request_is_stuck() {
    let store = Arc::new(StuckAppends(MemoryStorage::new()));
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        store.clone(),
        ServerConfig {
            shutdown_grace: Duration::from_millis(300),
            ..ServerConfig::default()
        },
    )
    .await
    .expect("bind")
    .spawn();
    let base = server.url();
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{base}/stuck"))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let append = tokio::spawn({
        let http = http.clone();
        let url = format!("{base}/stuck");
        async move {
            http.post(url)
                .header("content-type", "application/octet-stream")
                .body("x")
                .send()
                .await
        }
    });
    until_series(&base, "eddy_requests_in_flight", |n| n == 2.0).await;
    tokio::time::timeout(Duration::from_secs(10), server.stop())
        .await
        .expect("stop returns once the grace period is over")
        .expect("stop");
    let answered = tokio::time::timeout(Duration::from_secs(10), append)
        .await
        .expect("the stuck request's connection is closed")
        .expect("join");
    assert!(answered.is_err(), "the client sees the connection end");
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "nothing of the server holds the store any more"
    );
}
