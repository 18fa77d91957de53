//! `eddy serve` as operators run it: a config file, JSON logs whose lines
//! name the request id and the stream path, the readiness probe, and the
//! store's metrics on the page.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[tokio::test]
async fn json_logs_name_the_request_and_the_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("eddy.toml");
    std::fs::write(
        &config,
        "storage = \"memory\"\nlisten = \"127.0.0.1:0\"\nlog-format = \"json\"\n",
    )
    .expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_eddy"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "debug")
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
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();

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

    child.kill().expect("kill");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read logs");
    let _ = child.wait();
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

/// The value of the unlabelled series `name` on a Prometheus text page.
fn series(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in {page}"))
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
    let page = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
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
