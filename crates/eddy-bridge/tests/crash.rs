//! The deliverer killed with SIGKILL at random moments under load: the
//! projection keeps committing notices into the outbox (an embedded table
//! in a SQLite file) while a deliverer process drains it into a SQLite
//! stream store, and is killed and started again ten times. In the end
//! each shipment's stream holds each of its notices exactly once, in
//! scan order.
//!
//! The deliverer is the `deliverer` example's code, run by this test
//! binary itself as the test `crash::deliverer` with
//! `EDDY_BRIDGE_DELIVERER` naming its case and files (the other cases,
//! in `crash_cases.rs`, share this harness: [`Deliverer`]).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use eddy_dynamo::{process_batch, BatchProjection, ChangeFeed, EmbeddedTable};
use eddy_streams::{ReadFrom, SqliteStorage, Storage, StreamPath};

use crate::{model, notices};

const SHIPMENTS: usize = 6;
const ROUNDS: usize = 40;
const KILLS: usize = 10;

/// The deliverer process (run by the crash tests; ignored otherwise).
#[test]
#[ignore = "the crash tests run it as their deliverer process"]
fn deliverer() {
    let Ok(given) = std::env::var("EDDY_BRIDGE_DELIVERER") else {
        return;
    };
    let mut lines = given.lines();
    let (Some(case), Some(table_file), Some(streams)) = (lines.next(), lines.next(), lines.next())
    else {
        panic!("EDDY_BRIDGE_DELIVERER: case, table file and streams, a line each");
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let delivered = match case {
        "freight" => runtime.block_on(notices::run(table_file, streams)),
        case => runtime.block_on(crate::crash_cases::run(case, table_file, streams)),
    };
    delivered.expect("the deliverer");
}

/// A deliverer process of one case, killed with SIGKILL at random and
/// started again by the test that drives its load.
pub struct Deliverer {
    case: String,
    table_file: String,
    streams: String,
    child: Child,
    delivered: mpsc::Receiver<()>,
    /// Kills so far, and the most a test wants.
    pub kills: usize,
    max_kills: usize,
    kill_after: u64,
    seed: u64,
}

impl Deliverer {
    /// Starts the deliverer of `case` on the table in `table_file` and the
    /// streams in `streams`, to be killed at most `max_kills` times.
    pub fn start(case: &str, table_file: &str, streams: &str, max_kills: usize) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("crash test {case}: seed {seed}");
        let (child, delivered) = start(case, table_file, streams);
        let mut deliverer = Deliverer {
            case: case.to_owned(),
            table_file: table_file.to_owned(),
            streams: streams.to_owned(),
            child,
            delivered,
            kills: 0,
            max_kills,
            kill_after: 0,
            seed,
        };
        deliverer.kill_after = 1 + deliverer.random(20);
        deliverer
    }

    fn random(&mut self, n: u64) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed % n
    }

    /// Counts the deliveries so far, killing the process (and starting
    /// another) after a random number of them.
    pub fn maybe_kill(&mut self) {
        while self.kills < self.max_kills && self.delivered.try_recv().is_ok() {
            self.counted();
        }
    }

    /// One delivery more: the process is killed (and another started)
    /// when it was the last one before its kill.
    fn counted(&mut self) {
        self.kill_after -= 1;
        if self.kill_after == 0 {
            self.child.kill().expect("SIGKILL");
            let _ = self.child.wait();
            self.kills += 1;
            self.kill_after = 1 + self.random(20);
            (self.child, self.delivered) = start(&self.case, &self.table_file, &self.streams);
        }
    }

    /// Waits (30 s at most) until `done` says so, looking again at each
    /// delivery the process reports (or every 50 ms when it reports none),
    /// killing it at random meanwhile too. Whether it was done.
    pub fn wait_until(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        mut done: impl AsyncFnMut() -> bool,
    ) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if runtime.block_on(done()) {
                return true;
            }
            self.maybe_kill();
            let delivery = self.delivered.recv_timeout(Duration::from_millis(50));
            if delivery.is_ok() && self.kills < self.max_kills {
                self.counted();
            }
        }
        false
    }

    /// [`wait_until`](Self::wait_until) `settled`, then stops the
    /// process. Whether it settled.
    pub fn settle(
        mut self,
        runtime: &tokio::runtime::Runtime,
        settled: impl AsyncFnMut() -> bool,
    ) -> bool {
        let done = self.wait_until(runtime, settled);
        self.child.kill().expect("stop");
        let _ = self.child.wait();
        eprintln!("crash test {}: killed {} times", self.case, self.kills);
        done
    }
}

/// Starts a deliverer; its `delivered` lines arrive on the returned channel.
fn start(case: &str, table_file: &str, streams: &str) -> (Child, mpsc::Receiver<()>) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "crash::deliverer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "EDDY_BRIDGE_DELIVERER",
            format!("{case}\n{table_file}\n{streams}"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the deliverer");
    let stdout = child.stdout.take().expect("stdout");
    let (sender, delivered) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "delivered" && sender.send(()).is_err() {
                return;
            }
        }
    });
    (child, delivered)
}

fn location(round: usize) -> String {
    format!("L{round:02}")
}

#[test]
fn sigkill_of_the_deliverer_under_load_delivers_each_notice_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table_file = dir.path().join("freight.db").to_string_lossy().into_owned();
    let streams = dir.path().join("streams").to_string_lossy().into_owned();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let table = EmbeddedTable::open_sqlite(&table_file, model::schema("freight")).expect("table");
    let freight = model::Freight::new(Arc::new(table.clone())).expect("freight");
    let outbox = freight.outbox().expect("outbox");
    let shipments = freight
        .projection(Some(Arc::new(outbox.clone())))
        .expect("projection");
    let projections: [&dyn BatchProjection; 1] = [&shipments];
    let mut deliverer = Deliverer::start("freight", &table_file, &streams, KILLS);
    let mut after = None;
    for round in 0..ROUNDS {
        // Load: one scan per shipment, each folded alone (so each leaves
        // its notice), committed while the deliverer drains.
        runtime.block_on(async {
            for n in 0..SHIPMENTS {
                let id = freight
                    .scans
                    .id([("shipmentId", format!("sh-{n}").as_str())])
                    .expect("id");
                let at = freight.scans.current_version(&id).await.expect("version");
                let scan = model::ScanEvent::Scanned {
                    location: location(round),
                };
                freight.scans.append(&id, &[scan], at).await.expect("scan");
            }
            loop {
                let read = table.read_changes(after.as_ref(), 1).await.expect("feed");
                let Some(last) = read.last_position() else {
                    break;
                };
                after = Some(last.clone());
                let result = process_batch(read.records(), &projections).await;
                assert!(result.failures.is_empty(), "{:?}", result.failures);
            }
        });
        // Kill after a random number of deliveries, while the load goes on.
        deliverer.maybe_kill();
    }
    assert!(
        deliverer.kills > 0,
        "the deliverer was never killed under load"
    );
    // The last deliverer drains what is left.
    let drained = deliverer.settle(&runtime, async || {
        outbox.pending_rows().await.expect("pending").is_empty()
    });
    assert!(drained, "the outbox was not drained in 30 s");

    let store = SqliteStorage::open(&streams).expect("streams");
    runtime.block_on(async {
        let want: Vec<String> = (0..ROUNDS).map(|r| format!("at {}", location(r))).collect();
        for n in 0..SHIPMENTS {
            let path = StreamPath::new(format!("freight/notices/sh-{n}")).expect("path");
            let chunk = store
                .read(&path, ReadFrom::Beginning, usize::MAX)
                .await
                .expect("read");
            let got: Vec<String> = chunk
                .messages
                .iter()
                .map(|m| {
                    let notice: model::ShipmentNotice = serde_json::from_slice(m).expect("notice");
                    notice.kind
                })
                .collect();
            assert_eq!(got, want, "sh-{n}: each notice once, in scan order");
        }
    });
}
