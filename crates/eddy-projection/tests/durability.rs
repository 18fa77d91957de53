//! Checkpoint durability at scale: storage that stays bounded over
//! 100 000 units, and exact recovery after SIGKILL at random moments.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use eddy_projection::{Declare, Host, RunOptions, Status};
use eddy_streams::{Durability, MemoryStorage, SqliteOptions, SqliteStorage, Storage};

use crate::support::{counts, prefix_sums, read_all, running_sum, sums};

/// Appends `range` to `counts`, creating it first.
async fn seed(store: &dyn Storage, range: std::ops::Range<u64>) {
    counts().create(store, &()).await.expect("create");
    let all: Vec<u64> = range.collect();
    for chunk in all.chunks(10_000) {
        counts().append(store, &(), chunk).await.expect("append");
    }
}

/// The streams, records and bytes under a binding's checkpoint path.
async fn footprint(store: &dyn Storage, base: &str) -> (usize, u64, u64) {
    let streams = store.list(&format!("{base}/")).await.expect("list");
    let records = streams.iter().map(|s| s.tail.position()).sum();
    let bytes = streams.iter().map(|s| s.bytes).sum();
    (streams.len(), records, bytes)
}

/// `units` units of a fold (one item each) on `store`: after every 10 000
/// the checkpoint takes at most two slot streams of at most 64 records of
/// this fold's size (under 200 bytes: a `u64` sum and one offset).
async fn units_stay_bounded(store: Arc<dyn Storage>, units: u64) {
    seed(store.as_ref(), 0..units).await;
    let declare = Declare::<()>::new("sum");
    let input = declare.input("counts", &counts());
    let fold = declare
        .fold(0u64)
        .on(input, |sum, entry, _| sum + entry.item)
        .build()
        .expect("declare")
        .at(())
        .expect("bind");
    let host = Host::new(store.clone());
    let base = fold.checkpoint_path().to_string();
    let max_records = 2 * eddy_projection::SLOT_RECORDS;
    for round in 1..=units / 10_000 {
        let progress = host
            .run(
                &fold,
                RunOptions::default().with_limit(10_000).with_unit_size(1),
            )
            .await
            .expect("run");
        assert_eq!(progress.units, 10_000);
        let (streams, records, bytes) = footprint(store.as_ref(), &base).await;
        assert!(
            streams <= 2,
            "{streams} slot streams after {round}0 000 units"
        );
        assert!(
            records <= max_records,
            "{records} records after {round}0 000 units"
        );
        assert!(
            bytes <= max_records * 200,
            "{bytes} bytes after {round}0 000 units"
        );
    }
    assert_eq!(
        host.read(&fold).await.expect("read"),
        (0..units).sum::<u64>()
    );
}

#[test]
fn a_hundred_thousand_units_keep_checkpoint_storage_bounded_on_memory() {
    let store = Arc::new(MemoryStorage::new());
    crate::support::runtime().block_on(units_stay_bounded(store, 100_000));
}

/// On SQLite, 20 000 units without an fsync per commit: a debug build of
/// the bundled SQLite takes about a millisecond a commit, so 100 000 would
/// take minutes (the release benchmark `checkpoint_footprint` runs
/// 100 000 on SQLite).
#[test]
fn twenty_thousand_units_keep_checkpoint_storage_bounded_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions {
        durability: Durability::Process,
        ..SqliteOptions::default()
    };
    let store = SqliteStorage::open_with(dir.path(), options).expect("open");
    crate::support::runtime().block_on(units_stay_bounded(Arc::new(store), 20_000));
}

/// The host of the crash worker: checkpoint slots of four records, so that
/// kills land in slot changes too.
fn crash_host(store: Arc<dyn Storage>) -> Host {
    let checkpoints =
        eddy_projection::StreamCheckpoints::new(store.clone()).with_slot_limits(4, 1 << 20);
    Host::new(store).with_checkpoints(Arc::new(checkpoints))
}

const CRASH_DIR: &str = "EDDY_PROJECTION_CRASH_DIR";
const CRASH_ITEMS: u64 = 2_000;

/// The worker the crash test starts and kills: it runs the projection on
/// the SQLite store in `$EDDY_PROJECTION_CRASH_DIR`, one small unit per
/// run, printing a line after each, until caught up. Without the variable
/// it does nothing (it is `#[ignore]`d anyway).
#[test]
#[ignore = "the crash test starts it in a child process"]
fn crash_worker() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else {
        return;
    };
    crate::support::runtime().block_on(async {
        let store: Arc<dyn Storage> = Arc::new(SqliteStorage::open(&dir).expect("open"));
        let host = crash_host(store);
        let bound = running_sum().at(()).expect("bind");
        let mut unit = 1 + fastrand::usize(..5);
        loop {
            let progress = host
                .run(
                    &bound,
                    RunOptions::default().with_limit(1).with_unit_size(unit),
                )
                .await
                .expect("run");
            println!("unit {}", progress.offsets["counts"]);
            if progress.status == Status::CaughtUp {
                return;
            }
            unit = 1 + fastrand::usize(..5);
        }
    });
}

/// Issue 11: the worker above (`running_sum`, see `support`) is killed with
/// SIGKILL after a random number of units, twenty times, and restarted on
/// the same SQLite directory. In the end each number's running sum is
/// written exactly once and in order,
/// the state is the sum of all numbers, and the checkpoint took at most two
/// slots.
#[test]
fn recovery_after_sigkill_at_random_moments_is_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = crate::support::runtime();
    runtime.block_on(async {
        let store = SqliteStorage::open(dir.path()).expect("open");
        seed(&store, 0..CRASH_ITEMS).await;
    });
    let exe = std::env::current_exe().expect("test binary");
    let mut kills = 0;
    for _ in 0..20 {
        let mut child = Command::new(&exe)
            .args([
                "durability::crash_worker",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env(CRASH_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the worker");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let wait_for = 1 + fastrand::usize(..40);
        let mut seen = 0;
        while seen < wait_for {
            match lines.next() {
                Some(Ok(line)) if line.starts_with("unit ") => seen += 1,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
        if seen == wait_for {
            // SIGKILL, wherever the worker is in its next unit.
            child.kill().expect("kill");
            kills += 1;
        }
        child.wait().expect("reap");
    }
    assert!(kills >= 10, "only {kills} kills landed");
    runtime.block_on(async {
        let store: Arc<dyn Storage> = Arc::new(SqliteStorage::open(dir.path()).expect("open"));
        let host = crash_host(store.clone());
        let bound = running_sum().at(()).expect("bind");
        let last = host
            .run(&bound, RunOptions::default())
            .await
            .expect("finish");
        let expected = prefix_sums(&(0..CRASH_ITEMS).collect::<Vec<_>>());
        assert_eq!(last.state, expected.last().copied());
        assert_eq!(read_all(store.as_ref(), &sums(), &()).await, expected);
        let (streams, _, _) = footprint(store.as_ref(), bound.checkpoint_path().as_str()).await;
        assert!(streams <= 2);
    });
}
