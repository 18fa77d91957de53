//! Crash test on the real binary: `eddy serve` on SQLite (and on
//! PostgreSQL, in `postgres.rs`) is killed with SIGKILL at random moments
//! under concurrent idempotent-producer appends, twenty times, and
//! restarted on the same store. In the end every acknowledged append is
//! present exactly once, and the appends whose outcome the kill hid are
//! present exactly once too: their retries after the restart were
//! deduplicated.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

pub(crate) const WRITERS: usize = 8;
pub(crate) const KILLS: usize = 20;
/// Each kill comes after 1 to this many acknowledged appends.
pub(crate) const KILL_AFTER_ACKS: u64 = 400;

/// The `eddy` binary Cargo built for these tests.
pub(crate) fn eddy_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_eddy"))
}

/// Starts `eddy serve` on SQLite in `data` on a free port; returns the
/// child and its base URL.
fn start(binary: &Path, data: &Path) -> (Child, String) {
    let data = data.to_string_lossy();
    serve(binary, &["--storage", "sqlite", "--data", &data])
}

/// Starts `eddy serve` with `args` on a free port; returns the child and
/// its base URL.
pub(crate) fn serve(binary: &Path, args: &[&str]) -> (Child, String) {
    serve_with(binary, args, &[])
}

/// [`serve`] with these environment variables set for the child.
pub(crate) fn serve_with(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let mut child = Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start eddy serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
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

/// A small xorshift generator: random kill moments without a dependency.
pub(crate) struct Rng(pub u64);

impl Rng {
    /// A generator seeded from the clock (the seed is printed).
    pub(crate) fn from_clock() -> Rng {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
            | 1;
        eprintln!("crash test seed {seed}");
        Rng(seed)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one writer knows after a run: the next sequence number to send and
/// the highest one the server acknowledged.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Writer {
    pub next: u64,
    pub acknowledged: Option<u64>,
    /// Retries the server recognised as already written.
    pub deduplicated: u64,
}

/// Counts the appends a server acknowledged, so a test kills it after a
/// random number of them: the kill lands mid-load without a guessed delay.
#[derive(Clone)]
pub(crate) struct Acks(Arc<watch::Sender<u64>>);

impl Acks {
    pub(crate) fn new() -> Acks {
        Acks(Arc::new(watch::channel(0).0))
    }

    /// Waits until `n` appends were acknowledged (a minute at most).
    pub(crate) async fn reached(&self, n: u64) {
        let mut counted = self.0.subscribe();
        let waited =
            tokio::time::timeout(Duration::from_secs(60), counted.wait_for(|&got| got >= n));
        assert!(
            matches!(waited.await, Ok(Ok(_))),
            "the server acknowledged fewer than {n} appends in a minute"
        );
    }
}

/// Appends as producer `id` until a request fails (the server died),
/// counting each acknowledged append in `acks`.
pub(crate) async fn write_until_failure(
    http: reqwest::Client,
    url: String,
    id: usize,
    mut state: Writer,
    acks: Acks,
) -> Writer {
    loop {
        let sent = http
            .post(&url)
            .header("content-type", "application/json")
            .header("producer-id", format!("w{id}"))
            .header("producer-epoch", "0")
            .header("producer-seq", state.next.to_string())
            .body(format!("\"{id}-{}\"", state.next))
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                if response.headers().contains_key("eddy-duplicate") {
                    state.deduplicated += 1;
                }
                state.acknowledged = Some(state.next);
                state.next += 1;
                acks.0.send_modify(|n| *n += 1);
            }
            Ok(response) => panic!(
                "writer {id} seq {}: unexpected {}",
                state.next,
                response.status()
            ),
            // The outcome is unknown: retry the same seq after the restart.
            Err(_) => return state,
        }
    }
}

#[test]
fn sigkill_under_load_loses_and_duplicates_nothing() {
    let binary = eddy_binary();
    let dir = tempfile::tempdir().expect("tempdir");
    crash_under_load(&|| start(binary, dir.path()));
}

/// Runs the crash test on the servers `launch` starts (on one store).
pub(crate) fn crash_under_load(launch: &dyn Fn() -> (Child, String)) {
    let runtime = runtime();
    let mut rng = Rng::from_clock();
    let http = client();
    let mut writers = [Writer::default(); WRITERS];
    for round in 0..=KILLS {
        let (mut child, base) = launch();
        let url = format!("{base}/crash/log");
        runtime.block_on(create(&http, &url));
        if round == KILLS {
            // A last round without a kill: retry what is pending, then stop.
            runtime.block_on(finish(&http, &url, &mut writers));
            child.kill().expect("stop");
            let _ = child.wait();
            break;
        }
        let acks = Acks::new();
        let tasks: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(id, state)| {
                let task = write_until_failure(http.clone(), url.clone(), id, *state, acks.clone());
                runtime.spawn(task)
            })
            .collect();
        runtime.block_on(acks.reached(1 + rng.below(KILL_AFTER_ACKS)));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        for (id, task) in tasks.into_iter().enumerate() {
            writers[id] = runtime.block_on(task).expect("writer task");
        }
    }
    assert!(writers.iter().all(|w| w.next > 0));
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// The number a server's `/metrics` page reports for `series`.
#[cfg(any(feature = "aws", feature = "postgres"))]
async fn metric(http: &reqwest::Client, base: &str, series: &str) -> f64 {
    let page = crate::serve_cli::metrics_page(http, base).await;
    crate::serve_cli::series_value(&page, series).unwrap_or(0.0)
}

/// Waits until the server at `base` counts `readers` live readers: each
/// has read the stream and parked, so only a wake can bring it new data.
#[cfg(any(feature = "aws", feature = "postgres"))]
pub(crate) async fn until_live_readers(http: &reqwest::Client, base: &str, readers: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while metric(http, base, "eddy_live_readers").await < readers as f64 {
        assert!(tokio::time::Instant::now() < deadline, "readers not parked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stream's tail offset now, as `?offset=now` answers it.
#[cfg(any(feature = "aws", feature = "postgres"))]
pub(crate) async fn tail(http: &reqwest::Client, url: &str) -> String {
    http.get(format!("{url}?offset=now"))
        .send()
        .await
        .expect("tail")
        .headers()
        .get("stream-next-offset")
        .and_then(|offset| offset.to_str().ok())
        .map(str::to_owned)
        .expect("next offset")
}

/// Creates the JSON stream at `url` (or finds it).
pub(crate) async fn create(http: &reqwest::Client, url: &str) {
    let created = http
        .put(url)
        .header("content-type", "application/json")
        .send()
        .await
        .expect("create");
    assert!(
        created.status().is_success(),
        "create: {}",
        created.status()
    );
}

/// Retries what each writer has pending, then checks the stream.
pub(crate) async fn finish(http: &reqwest::Client, url: &str, writers: &mut [Writer]) {
    for (id, writer) in writers.iter_mut().enumerate() {
        let response = http
            .post(url)
            .header("content-type", "application/json")
            .header("producer-id", format!("w{id}"))
            .header("producer-epoch", "0")
            .header("producer-seq", writer.next.to_string())
            .body(format!("\"{id}-{}\"", writer.next))
            .send()
            .await
            .expect("append");
        assert!(response.status().is_success());
        writer.acknowledged = Some(writer.next);
        writer.next += 1;
    }
    check(http, url, writers).await;
}

/// Every writer's messages are exactly `0..next`, each once, in order.
pub(crate) async fn check(http: &reqwest::Client, url: &str, writers: &[Writer]) {
    let body = http
        .get(format!("{url}?offset=-1"))
        .header("eddy-max-bytes", (64 * 1024 * 1024).to_string())
        .send()
        .await
        .expect("read")
        .text()
        .await
        .expect("body");
    let messages: Vec<String> = serde_json::from_str(&body).expect("a JSON array");
    for (id, writer) in writers.iter().enumerate() {
        let prefix = format!("{id}-");
        let mine: Vec<u64> = messages
            .iter()
            .filter_map(|m| m.strip_prefix(&prefix))
            .map(|seq| seq.parse().expect("seq"))
            .collect();
        let expected: Vec<u64> = (0..writer.next).collect();
        assert_eq!(
            mine, expected,
            "writer {id}: each append exactly once, in order"
        );
        assert_eq!(writer.acknowledged, writer.next.checked_sub(1));
    }
    eprintln!(
        "crash test: {} appends by {} writers survived {KILLS} kills; {} retries deduplicated",
        messages.len(),
        writers.len(),
        writers.iter().map(|w| w.deduplicated).sum::<u64>()
    );
}

/// Regression: a SIGTERM sent right after the "listening on" line killed
/// the process, because the handler was installed only when the server
/// first polled its shutdown future.
#[test]
fn sigterm_shuts_down_cleanly() {
    let binary = eddy_binary();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut child, _url) = start(binary, dir.path());
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("send SIGTERM");
    assert!(status.success());
    for _ in 0..100 {
        if let Some(exit) = child.try_wait().expect("wait") {
            assert!(exit.success(), "eddy serve exits 0 on SIGTERM, got {exit}");
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("eddy serve did not stop within 5 s of SIGTERM");
}
