//! The deliverer killed with SIGKILL at random moments under load: the
//! projection keeps committing notices into the outbox (an embedded table
//! in a SQLite file) while a deliverer process drains it into a SQLite
//! stream store, and is killed and started again ten times. In the end
//! each shipment's stream holds each of its notices exactly once, in
//! scan order.
//!
//! The deliverer is the `deliverer` example's code, run by this test
//! binary itself as the test `crash::deliverer` with
//! `EDDY_BRIDGE_DELIVERER` naming its files.

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

/// The deliverer process (run by the crash test; ignored otherwise).
#[test]
#[ignore = "the crash test runs it as its deliverer process"]
fn deliverer() {
    let Ok(files) = std::env::var("EDDY_BRIDGE_DELIVERER") else {
        return;
    };
    let (table_file, streams) = files.split_once('\n').expect("two paths");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime
        .block_on(notices::run(table_file, streams))
        .expect("the deliverer");
}

/// Starts a deliverer; its `delivered` lines arrive on the returned channel.
fn start(table_file: &str, streams: &str) -> (Child, mpsc::Receiver<()>) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "crash::deliverer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EDDY_BRIDGE_DELIVERER", format!("{table_file}\n{streams}"))
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
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("crash test seed {seed}");
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };

    let (mut deliverer, mut delivered) = start(&table_file, &streams);
    let mut kills = 0;
    let mut after = None;
    let mut kill_after = 1 + random(40);
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
        while kills < KILLS && delivered.try_recv().is_ok() {
            kill_after -= 1;
            if kill_after == 0 {
                deliverer.kill().expect("SIGKILL");
                let _ = deliverer.wait();
                kills += 1;
                kill_after = 1 + random(40);
                (deliverer, delivered) = start(&table_file, &streams);
            }
        }
    }
    // The last deliverer drains what is left.
    let drained = runtime.block_on(async {
        for _ in 0..600 {
            if outbox.pending_rows().await.expect("pending").is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    deliverer.kill().expect("stop");
    let _ = deliverer.wait();
    assert!(drained, "the outbox was not drained in 30 s");
    eprintln!("crash test: the deliverer was killed {kills} times");
    assert!(kills > 0, "the deliverer was never killed under load");

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
