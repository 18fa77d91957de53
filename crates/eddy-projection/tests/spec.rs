//! Spec rules that each get a test of their own: the default retry
//! schedule and repair interval, a repair pass that picks up a missed
//! wake-up, an input created again, and `keep_gone`.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{
    Declare, FollowOptions, Host, Retry, RunOptions, Status, DEFAULT_REPAIR_INTERVAL,
};
use eddy_streams::{MemoryStorage, SqliteStorage, Storage};
use futures::StreamExt;

use crate::run::{order_totals, seed, total_fold};
use crate::support::{orders, runtime, Faulty};

/// `follow` retries with a jittered exponential schedule from 200 ms,
/// doubling, capped at 30 s, forever; a host uses it unless told
/// otherwise.
#[test]
fn the_default_retry_is_jittered_exponential_from_200ms_capped_at_30s() {
    let retry = Retry::default();
    for attempt in 0..16u32 {
        let nominal = Duration::from_millis(200)
            .saturating_mul(1 << attempt)
            .min(Duration::from_secs(30));
        let samples: Vec<Duration> = (0..64)
            .map(|_| retry.delay(attempt).expect("it never gives up"))
            .collect();
        for delay in &samples {
            assert!(
                *delay >= nominal / 2 && *delay <= nominal,
                "attempt {attempt}: {delay:?} outside [{:?}, {nominal:?}]",
                nominal / 2
            );
        }
        assert!(
            samples.iter().any(|d| *d != samples[0]),
            "attempt {attempt}: not jittered"
        );
    }
    assert!(retry.delay(u32::MAX).is_some(), "it retries forever");
    assert_eq!(Host::new(Arc::new(MemoryStorage::new())).retry(), retry);
}

/// `repairIntervalMs` defaults to 30 000 ms.
#[test]
fn the_default_repair_interval_is_30_000_ms() {
    assert_eq!(DEFAULT_REPAIR_INTERVAL, Duration::from_millis(30_000));
    assert_eq!(
        FollowOptions::default().repair_interval,
        DEFAULT_REPAIR_INTERVAL
    );
}

/// A commit the follower is never woken for (its store's live waits
/// hear nothing, as for commits of another process) is picked up by the
/// repair pass after one repair interval.
async fn a_repair_pass_picks_up_a_missed_wake_up(store: Arc<dyn Storage>) {
    seed(store.as_ref(), 0..1).await;
    let deaf: Arc<dyn Storage> = Arc::new(Faulty::deaf(store.clone()));
    let host = Host::new(deaf);
    let mut follow = host.follow(
        &order_totals().at(()).expect("bind"),
        FollowOptions::default().with_repair_interval(std::time::Duration::from_millis(200)),
    );
    let first = follow.next().await.expect("element").expect("ok");
    assert_eq!(first.items, 1);
    seed(store.as_ref(), 1..3).await;
    let repaired = tokio::time::timeout(Duration::from_secs(10), follow.next())
        .await
        .expect("the repair pass finds the commit")
        .expect("element")
        .expect("ok");
    assert_eq!((repaired.units, repaired.items), (1, 2));
}

#[test]
fn a_repair_pass_picks_up_a_missed_wake_up_on_memory_and_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    runtime().block_on(a_repair_pass_picks_up_a_missed_wake_up(Arc::new(
        MemoryStorage::new(),
    )));
    let sqlite = SqliteStorage::open(dir.path()).expect("open");
    runtime().block_on(a_repair_pass_picks_up_a_missed_wake_up(Arc::new(sqlite)));
}

/// An input deleted and created again is a new stream: the stream the
/// binding read is gone. Its final unit commits (here on memory and
/// SQLite, with the new stream longer and shorter than the old), the
/// binding is forgotten, and the next run reads the new stream from its
/// beginning. Before stream incarnations, a longer new stream was read on
/// from the old offset: the binding mixed the two streams' items.
#[test]
fn an_input_created_again_is_gone_for_its_binding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite: Arc<dyn Storage> = Arc::new(SqliteStorage::open(dir.path()).expect("open"));
    for store in [Arc::new(MemoryStorage::new()) as Arc<dyn Storage>, sqlite] {
        for again in [10..17, 10..12] {
            runtime().block_on(async {
                let path = orders().path(&()).expect("path");
                let _ = store.delete(&path).await;
                seed(store.as_ref(), 0..5).await;
                let host = Host::new(store.clone());
                let bound = total_fold().at(()).expect("bind");
                host.forget(&bound).await.expect("a fresh binding");
                host.run(&bound, RunOptions::default()).await.expect("run");
                store.delete(&path).await.expect("delete");
                seed(store.as_ref(), again.clone()).await;
                let last = host
                    .run(&bound, RunOptions::default())
                    .await
                    .expect("the final unit");
                assert_eq!(
                    (last.status, last.units, last.state),
                    (Status::Forgotten, 1, Some(10.0)),
                    "{again:?}"
                );
                assert_eq!(host.read(&bound).await.expect("read"), 0.0, "forgotten");
                let fresh = host.run(&bound, RunOptions::default()).await.expect("run");
                let expected: f64 = again.clone().map(|i| i as f64).sum();
                assert_eq!(fresh.state, Some(expected), "{again:?}");
            });
        }
    }
}

/// With `keep_gone`, the final unit of a gone input commits and the
/// checkpoint stays: the binding reads as its final state, and later runs
/// and followers report it closed.
#[test]
fn keep_gone_keeps_the_checkpoint_after_the_final_unit() {
    runtime().block_on(async {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        seed(store.as_ref(), 0..3).await;
        let declare = Declare::<()>::new("kept").with_keep_gone();
        let input = declare.input("orders", &orders());
        let projection = declare
            .fold(0.0)
            .on(input, |sum, entry, _| sum + entry.item.amount)
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default()).await.expect("run");
        store
            .delete(&orders().path(&()).expect("path"))
            .await
            .expect("delete");
        let last = host
            .run(&bound, RunOptions::default())
            .await
            .expect("final");
        assert_eq!(
            (last.status, last.units, last.state),
            (Status::Closed, 1, Some(3.0))
        );
        assert_eq!(host.read(&bound).await.expect("read"), 3.0, "not forgotten");
        let again = host
            .run(&bound, RunOptions::default())
            .await
            .expect("again");
        assert_eq!((again.status, again.units), (Status::Closed, 0));
        let mut follow = host.follow(&bound, FollowOptions::default());
        let element = follow.next().await.expect("element").expect("ok");
        assert_eq!(element.status, Status::Closed);
        assert!(follow.next().await.is_none(), "it ends");
    });
}
