//! `eddy serve` as operators run it: a config file, text and JSON logs whose lines
//! name the request id and the stream path, the readiness probe, the
//! store's metrics on the page, and the TLS certificate reloaded on SIGHUP.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// Starts `eddy serve` with its output piped and returns it with the URL
/// its first line says it listens on.
fn start(command: &mut Command) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start eddy serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, url)
}

/// Stops the server and returns what it logged.
fn stop(mut child: Child) -> String {
    child.kill().expect("kill");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read logs");
    let _ = child.wait();
    stderr
}

#[tokio::test]
async fn json_logs_name_the_request_and_the_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eddy.toml");
    std::fs::write(
        &config,
        "storage = \"memory\"\nlisten = \"127.0.0.1:0\"\nlog-format = \"json\"\n",
    )
    .expect("write config");
    let (child, url) = start(
        Command::new(env!("CARGO_BIN_EXE_eddy"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "debug"),
    );

    let http = reqwest::Client::new();
    let ready = http
        .get(format!("{url}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);
    let missing = http
        .get(format!("{url}/orders/missing"))
        .header("x-request-id", "probe-7")
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(
        missing
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("probe-7")
    );

    let stderr = stop(child);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let refused = lines
        .iter()
        .find(|line| line["fields"]["message"] == "request refused")
        .unwrap_or_else(|| panic!("no refusal logged: {stderr}"));
    let request = &refused["spans"][0];
    assert_eq!(request["name"], "request", "{refused}");
    assert_eq!(request["request_id"], "probe-7", "{refused}");
    assert_eq!(request["path"], "/orders/missing", "{refused}");
}

#[tokio::test]
async fn text_logs_name_the_request_and_the_stream() {
    let (child, url) = start(
        Command::new(env!("CARGO_BIN_EXE_eddy"))
            .args(["serve", "--storage", "memory", "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "debug")
            .env_remove("EDDY_LOG_FORMAT"),
    );
    let missing = reqwest::Client::new()
        .get(format!("{url}/orders/missing"))
        .header("x-request-id", "probe-8")
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status().as_u16(), 404);

    let stderr = stop(child);
    let refused = stderr
        .lines()
        .find(|line| line.contains("request refused"))
        .unwrap_or_else(|| panic!("no refusal logged: {stderr}"));
    assert!(
        refused.contains("request{request_id=probe-8 method=GET path=/orders/missing}:"),
        "{refused}"
    );
    assert!(refused.contains("code=\"stream/not-found\""), "{refused}");
}

/// The server's `/metrics` page.
pub(crate) async fn metrics_page(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body")
}

/// The value of the unlabelled series `name` on a Prometheus text page,
/// if it is there.
pub(crate) fn series_value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The value of the unlabelled series `name` on a Prometheus text page.
pub(crate) fn series(page: &str, name: &str) -> f64 {
    series_value(page, name).unwrap_or_else(|| panic!("no series {name} in {page}"))
}

#[tokio::test]
async fn metrics_show_the_sqlite_group_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_string_lossy().into_owned();
    let (mut child, url) = crate::crash::serve(
        crate::crash::eddy_binary(),
        &["--storage", "sqlite", "--data", &data],
    );
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{url}/orders"))
        .header("content-type", "text/plain")
        .send()
        .await
        .expect("create");
    assert_eq!(created.status().as_u16(), 201);
    for i in 0..5 {
        let appended = http
            .post(format!("{url}/orders"))
            .header("content-type", "text/plain")
            .body(format!("order {i}"))
            .send()
            .await
            .expect("append");
        assert_eq!(appended.status().as_u16(), 204);
    }
    let page = metrics_page(&http, &url).await;
    child.kill().expect("kill");
    let _ = child.wait();

    // Six write calls, each answered only after its group committed.
    let calls = series(&page, "eddy_store_commit_group_size_sum");
    let groups = series(&page, "eddy_store_commit_group_size_count");
    assert!(calls >= 6.0, "{page}");
    assert!((1.0..=calls).contains(&groups), "{page}");
    assert_eq!(
        series(&page, "eddy_store_commit_duration_seconds_count"),
        groups,
        "{page}"
    );
    assert_eq!(series(&page, "eddy_store_writer_queue_jobs"), 0.0, "{page}");
    assert!(
        page.contains("# HELP eddy_store_commit_group_size Calls committed together"),
        "{page}"
    );
}

/// A self-signed certificate for `localhost` written as `name.crt` and
/// `name.key` under `dir`; returns both paths and the certificate's PEM.
#[cfg(unix)]
fn certificate(
    dir: &std::path::Path,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
    let pem = made.cert.pem();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &pem).expect("write cert");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write key");
    (cert, key, pem)
}

/// Whether a client that trusts only `pem` completes a `/healthz` request.
#[cfg(unix)]
async fn trusted_by(pem: &str, addr: std::net::SocketAddr) -> bool {
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("pem"))
        .resolve("localhost", addr)
        .build()
        .expect("client");
    client
        .get(format!("https://localhost:{}/healthz", addr.port()))
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
}

/// SIGHUP makes `eddy serve` read its certificate and key again: a broken
/// renewal is logged and the old certificate stays; a good one is served
/// from then on.
#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_tls_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key, old_pem) = certificate(dir.path(), "live");
    let (new_cert, new_key, new_pem) = certificate(dir.path(), "renewed");
    let (mut child, url) = start(
        Command::new(env!("CARGO_BIN_EXE_eddy"))
            .args(["serve", "--storage", "memory", "--listen", "127.0.0.1:0"])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .env("RUST_LOG", "info"),
    );
    let addr: std::net::SocketAddr = url
        .strip_prefix("https://")
        .unwrap_or_else(|| panic!("not a TLS address: {url}"))
        .parse()
        .expect("address");
    // The log lines, as they come: each SIGHUP's outcome is awaited on them.
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let hang_up = |child: &std::process::Child| {
        let status = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(status.success());
    };
    let logged = |needle: &str| loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no log line containing {needle:?}"));
        if line.contains(needle) {
            break;
        }
    };
    assert!(trusted_by(&old_pem, addr).await);

    std::fs::write(&cert, "not a certificate").expect("write");
    hang_up(&child);
    logged("TLS reload failed");
    assert!(
        trusted_by(&old_pem, addr).await,
        "the old certificate stays"
    );

    std::fs::rename(&new_cert, &cert).expect("rename");
    std::fs::rename(&new_key, &key).expect("rename");
    hang_up(&child);
    logged("TLS certificate and key reloaded");
    assert!(
        trusted_by(&new_pem, addr).await,
        "the renewed certificate is served"
    );
    assert!(!trusted_by(&old_pem, addr).await, "the old one is not");

    child.kill().expect("kill");
    let _ = child.wait();
}

/// The first page a newcomer sees: the start-up line names the console's
/// address, and a browser that opens the address it prints lands there.
#[tokio::test]
async fn the_start_up_line_names_the_console_and_the_address_opens_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eddy"))
        .args(["serve", "--storage", "memory", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start eddy serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let (address, console) = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_once(" (console: "))
        .and_then(|(address, rest)| Some((address, rest.strip_suffix(')')?)))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    assert_eq!(console, format!("{address}/console"));
    let page = reqwest::Client::new()
        .get(address)
        .header("accept", "text/html")
        .send()
        .await
        .expect("open the address");
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(page.url().path(), "/console");
    assert!(page
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html")));
    child.kill().expect("kill");
    let _ = child.wait();
}
