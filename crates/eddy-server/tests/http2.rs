//! HTTP/2 and TLS on a real socket (issue 15 §1): cleartext HTTP/2 with
//! prior knowledge, TLS with ALPN, the configured stream limit, plain HTTP
//! refused on the TLS port, certificates reloaded, and curl as a client.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use eddy_server::{Http2Config, RunningServer, Server, ServerConfig, TlsCertificates};
use eddy_streams::MemoryStorage;
use reqwest::Version;

async fn start(config: ServerConfig, tls: Option<&Arc<TlsCertificates>>) -> RunningServer {
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        config,
    )
    .await
    .expect("bind");
    match tls {
        Some(certificates) => server.tls(certificates).expect("tls"),
        None => server,
    }
    .spawn()
}

/// A self-signed certificate for `localhost`, written as PEM files.
fn certificate(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
    let pem = made.cert.pem();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pem).expect("write cert");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write key");
    (cert, key, pem)
}

/// A client that trusts only `pem` and reaches `localhost` at the server.
fn tls_client(server: &RunningServer, pem: &str) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem"))
        .resolve("localhost", server.addr())
}

fn https(server: &RunningServer, path: &str) -> String {
    format!("https://localhost:{}{path}", server.addr().port())
}

async fn metric(client: &reqwest::Client, base: &str, name: &str) -> u64 {
    let page = crate::support::metrics_page(client, base).await;
    crate::support::series(&page, name).unwrap_or_else(|| panic!("no metric {name} in {page}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sse_readers_on_one_h2c_connection_all_receive_an_append() {
    let server = start(ServerConfig::default(), None).await;
    let base = server.url();
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    for i in 0..100 {
        let created = client
            .put(format!("{base}/s/{i}"))
            .header("content-type", "text/plain")
            .send()
            .await
            .expect("create");
        assert_eq!(created.version(), Version::HTTP_2);
        assert_eq!(created.status(), 201);
    }
    let (ready_tx, mut ready) = tokio::sync::mpsc::channel(100);
    let mut readers = tokio::task::JoinSet::new();
    for i in 0..100 {
        let client = client.clone();
        let url = format!("{base}/s/{i}?offset=-1&live=sse");
        let ready_tx = ready_tx.clone();
        readers.spawn(async move {
            let mut response = client.get(url).send().await.expect("sse");
            assert_eq!(response.version(), Version::HTTP_2);
            let mut seen = String::new();
            let mut subscribed = false;
            while let Some(chunk) = response.chunk().await.expect("chunk") {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if !subscribed && seen.contains("event: control") {
                    subscribed = true;
                    ready_tx.send(()).await.expect("main waits");
                }
                if seen.contains(&format!("appended-{i}")) {
                    return i;
                }
            }
            panic!("stream {i} ended before the append: {seen}");
        });
    }
    for _ in 0..100 {
        ready.recv().await.expect("a reader is up to date");
    }
    for i in 0..100 {
        let appended = client
            .post(format!("{base}/s/{i}"))
            .header("content-type", "text/plain")
            .body(format!("appended-{i}"))
            .send()
            .await
            .expect("append");
        assert!(appended.status().is_success());
    }
    let mut served = Vec::new();
    while let Some(reader) = tokio::time::timeout(Duration::from_secs(30), readers.join_next())
        .await
        .expect("in time")
    {
        served.push(reader.expect("reader"));
    }
    served.sort_unstable();
    assert_eq!(served, (0..100).collect::<Vec<_>>());
    assert_eq!(metric(&client, &base, "eddy_connections_total").await, 1);
    server.stop().await.expect("stops");
}

#[tokio::test]
async fn the_concurrent_stream_limit_is_announced() {
    let server = start(
        ServerConfig {
            http2: Http2Config {
                max_concurrent_streams: 7,
                ..Http2Config::default()
            },
            ..ServerConfig::default()
        },
        None,
    )
    .await;
    let tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let mut send = send.ready().await.expect("ready");
    let request = http::Request::get(format!("{}/healthz", server.url()))
        .body(())
        .expect("request");
    let (response, _) = send.send_request(request, true).expect("send");
    assert_eq!(response.await.expect("response").status(), 200);
    assert_eq!(send.current_max_send_streams(), 7);
    server.stop().await.expect("stops");
}

#[tokio::test]
async fn tls_negotiates_h2_or_http1_and_refuses_plain_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, pem) = certificate(dir.path(), "a");
    let certificates = TlsCertificates::from_pem_files(&cert, &key).expect("load");
    let server = start(ServerConfig::default(), Some(&certificates)).await;
    assert!(server.url().starts_with("https://"));

    let h2 = tls_client(&server, &pem).build().expect("client");
    let response = h2.get(https(&server, "/healthz")).send().await.expect("h2");
    assert_eq!(
        (response.version(), response.status().as_u16()),
        (Version::HTTP_2, 200)
    );
    let h1 = tls_client(&server, &pem)
        .http1_only()
        .build()
        .expect("client");
    let response = h1.get(https(&server, "/healthz")).send().await.expect("h1");
    assert_eq!(
        (response.version(), response.status().as_u16()),
        (Version::HTTP_11, 200)
    );

    let plain = reqwest::get(format!("http://{}/healthz", server.addr()))
        .await
        .expect("an answer, not a reset");
    assert_eq!(plain.status(), 400);
    assert_eq!(
        plain
            .headers()
            .get("eddy-error")
            .and_then(|v| v.to_str().ok()),
        Some("http/tls-required")
    );
    assert!(plain.text().await.expect("body").contains("https://"));
    assert!(metric(&h2, &https(&server, ""), "eddy_tls_failures_total").await >= 1);
    server.stop().await.expect("stops");
}

#[tokio::test]
async fn a_reload_serves_the_new_certificate_and_a_bad_one_keeps_the_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, old_pem) = certificate(dir.path(), "live");
    let certificates = TlsCertificates::from_pem_files(&cert, &key).expect("load");
    let server = start(ServerConfig::default(), Some(&certificates)).await;
    let (new_cert, new_key, new_pem) = certificate(dir.path(), "renewed");

    // A broken renewal is refused and the old certificate stays.
    std::fs::write(&cert, "not a certificate").expect("write");
    assert!(certificates.reload().is_err());
    let old = tls_client(&server, &old_pem).build().expect("client");
    assert!(old.get(https(&server, "/healthz")).send().await.is_ok());

    std::fs::rename(&new_cert, &cert).expect("rename");
    std::fs::rename(&new_key, &key).expect("rename");
    certificates.reload().expect("reload");
    let new = tls_client(&server, &new_pem).build().expect("client");
    let response = new
        .get(https(&server, "/healthz"))
        .send()
        .await
        .expect("new cert");
    assert_eq!(response.status(), 200);
    let stale = tls_client(&server, &old_pem).build().expect("client");
    assert!(stale.get(https(&server, "/healthz")).send().await.is_err());
    server.stop().await.expect("stops");
}

/// curl is the reference HTTP/2 client: prior knowledge on the cleartext
/// port, ALPN on the TLS port.
#[tokio::test]
async fn curl_speaks_http2_with_prior_knowledge_and_over_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, _) = certificate(dir.path(), "c");
    let certificates = TlsCertificates::from_pem_files(&cert, &key).expect("load");
    let plain = start(ServerConfig::default(), None).await;
    let tls = start(ServerConfig::default(), Some(&certificates)).await;
    let curl = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_version} %{http_code}",
            ])
            .args(args)
            .output()
            .await
            .expect("curl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let prior = curl(vec![
        "--http2-prior-knowledge".into(),
        format!("{}/healthz", plain.url()),
    ])
    .await;
    assert_eq!(prior, "2 200");
    let alpn = curl(vec![
        "--http2".into(),
        "--cacert".into(),
        cert.display().to_string(),
        "--resolve".into(),
        format!("localhost:{}:127.0.0.1", tls.addr().port()),
        https(&tls, "/healthz"),
    ])
    .await;
    assert_eq!(alpn, "2 200");
    let upgrade_free = curl(vec![format!("{}/healthz", plain.url())]).await;
    assert_eq!(upgrade_free, "1.1 200");
    plain.stop().await.expect("stops");
    tls.stop().await.expect("stops");
}
