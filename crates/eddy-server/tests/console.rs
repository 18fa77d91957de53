//! The console page (issue 14 §3) in a real headless Chromium, driven over
//! WebDriver (`chromedriver`): it lists the streams and the bindings, and
//! its live tail shows an append made after the page loaded. A screenshot
//! goes to `target/tmp/console.png`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`scripts/test.sh`
//! installs them); without them the test says it was skipped, unless
//! `EDDY_REQUIRE_CHROMIUM` is set.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{Commit, Declare, Host, RunOptions, Step};
use eddy_server::{RunningServer, Server, ServerConfig};
use eddy_streams::{
    Compaction, JsonStream, MemoryStorage, Payload, Retention, Storage, StreamConfig,
};
use fantoccini::{Client, ClientBuilder, Locator};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// `chromedriver` on a free port, killed on drop.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn driver() -> Option<Driver> {
    if !std::path::Path::new(CHROMEDRIVER).exists() {
        let required = std::env::var_os("EDDY_REQUIRE_CHROMIUM").is_some();
        assert!(!required, "{CHROMEDRIVER} is missing");
        eprintln!("console test: skipped, {CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    Some(Driver(child, port))
}

async fn browser(driver: &Driver) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1200,900"],
        }),
    );
    // Both rustls providers are in this build: pick the server's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://127.0.0.1:{}", driver.1);
    // chromedriver takes a moment to listen: retry the session's start.
    let mut last = None;
    for _ in 0..100 {
        match ClientBuilder::rustls()
            .expect("TLS roots")
            .capabilities(capabilities.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return client,
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no WebDriver session: {last:?}");
}

/// A server with a stream of five numbers, a binding that committed two
/// of them, and one whose handler failed.
async fn server() -> RunningServer {
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let numbers = JsonStream::<i64>::new("numbers", "numbers").expect("route");
    numbers.create(store.as_ref(), &()).await.expect("create");
    numbers
        .append(store.as_ref(), &(), &[1, 2, 3, 4, 5])
        .await
        .expect("append");
    // A stream that keeps its last two messages, after a sweep dropped
    // the first three.
    let logs = JsonStream::<i64>::new("logs", "logs").expect("route");
    let policy: Retention = "messages=2".parse().expect("policy");
    store
        .create(
            &logs.path(&()).expect("path"),
            StreamConfig::json().with_retention(policy),
            Payload::empty(),
        )
        .await
        .expect("create");
    logs.append(store.as_ref(), &(), &[1, 2, 3, 4, 5])
        .await
        .expect("append");
    while store.sweep(64).await.expect("sweep") > 0 {}
    // A compacted state stream.
    let policy: Compaction = "messages=100".parse().expect("policy");
    store
        .create(
            &eddy_streams::StreamPath::new("rows").expect("path"),
            StreamConfig::json().with_compaction(policy),
            Payload::empty(),
        )
        .await
        .expect("create");
    let declare = Declare::<()>::new("sum");
    let input = declare.input("numbers", &numbers);
    let sum = declare
        .fold(0_i64)
        .on(input, |sum, entry, _| sum + entry.item)
        .build()
        .expect("declare");
    let two = RunOptions::default().with_limit(1).with_unit_size(2);
    let host = Host::new(Arc::clone(&store));
    host.run(&sum.at(()).expect("bind"), two)
        .await
        .expect("run");
    let declare = Declare::<()>::new("mailer");
    let input = declare.input("numbers", &numbers);
    let mailer = declare
        .process_each(Commit::at_least_once())
        .on(input, |_, _| Step::<()>::fail("the mail server refused"))
        .build()
        .expect("declare");
    let failed = host
        .run(&mailer.at(()).expect("bind"), RunOptions::default())
        .await;
    assert!(failed.is_err(), "the handler fails");
    Server::bind(([127, 0, 0, 1], 0).into(), store, ServerConfig::default())
        .await
        .expect("bind")
        .spawn()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_streams_and_bindings_and_tails_live() {
    let Some(driver) = driver() else {
        return;
    };
    let server = server().await;
    let base = server.url();
    let page = browser(&driver).await;
    page.goto(&format!("{base}/console")).await.expect("open");
    let wait = || page.wait().at_most(Duration::from_secs(20));

    let link = wait()
        .for_element(Locator::XPath(
            "//table[@id='streams']//a[text()='numbers']",
        ))
        .await
        .expect("the stream is listed");
    wait()
        .for_element(Locator::XPath(
            "//table[@id='streams']//tr[td[1]='logs'][td[3]='5'][td[4]='3'][td[7]='messages=2']",
        ))
        .await
        .expect("the retained stream is listed with its earliest kept and its policy");
    wait()
        .for_element(Locator::XPath(
            "//table[@id='streams']//tr[td[1]='rows'][td[8]='messages=100; deletes=1d']",
        ))
        .await
        .expect("the compacted stream is listed with its policy");
    wait()
        .for_element(Locator::XPath(
            "//table[@id='bindings']//tr[td[1]='sum v1 _'][td[2]='behind'][td[4]='3']",
        ))
        .await
        .expect("the binding is listed, 3 behind");
    wait()
        .for_element(Locator::XPath(
            "//table[@id='bindings']//tr[td[1]='mailer v1 _'][td[2]='failed'][contains(td[6], 'the mail server refused')]",
        ))
        .await
        .expect("the failed binding is listed with its handler's error");

    link.click().await.expect("choose the stream");
    // The page's tail is connected, so an append now reaches it.
    crate::support::until_series(&base, "eddy_live_readers", |n| n == 1.0).await;
    let appended = reqwest::Client::new()
        .post(format!("{base}/numbers"))
        .header("content-type", "application/json")
        .body("4242")
        .send()
        .await
        .expect("append");
    assert!(appended.status().is_success());
    wait()
        .for_element(Locator::XPath("//pre[@id='tail'][contains(., '4242')]"))
        .await
        .expect("the live tail shows the append");

    let png = page.screenshot().await.expect("screenshot");
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    std::fs::write(&file, png).expect("write the screenshot");
    eprintln!("console screenshot: {}", file.display());
    page.close().await.expect("close the browser");
    server.stop().await.expect("stop");
}

#[tokio::test]
async fn no_console_serves_neither_route() {
    let config = ServerConfig {
        console: false,
        ..ServerConfig::default()
    };
    let server = Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        config,
    )
    .await
    .expect("bind")
    .spawn();
    let http = reqwest::Client::new();
    for path in ["/console", "/_eddy/bindings"] {
        let response = http
            .get(format!("{}{path}", server.url()))
            .send()
            .await
            .expect("get");
        assert_ne!(response.status(), 200, "{path}");
    }
    server.stop().await.expect("stop");
}
