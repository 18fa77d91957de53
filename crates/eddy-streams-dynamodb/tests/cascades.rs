//! Regression (issue 33): a removal whose cascade (a stream with its
//! dead forks, and the sources the last fork releases) wrote more than
//! the 100 items of one transaction failed with a storage error (500),
//! and failed again at every later attempt. The dead streams now go
//! first, in steps of one transaction each, and the call's own removal
//! last.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eddy_dynamo::{Table, TableError};
use eddy_streams::{Expiry, Fork, ManualClock, Payload, Storage, StreamConfig, StreamPath};

use crate::common;

fn store(table: &Arc<dyn Table>, clock: &Arc<ManualClock>) -> Arc<dyn Storage> {
    Arc::new(common::clocked_store(table, clock))
}

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

/// A source with `n` forks, each retired (deleted while its own fork
/// reads it), and those forks' forks expired: deleting the source
/// removes 2n + 1 streams at once, about 4 items each.
async fn dead_tree(store: &Arc<dyn Storage>, clock: &ManualClock, n: usize) -> StreamPath {
    let source = path("tree/source");
    store
        .create(&source, StreamConfig::json(), Payload::Body("[1]".into()))
        .await
        .expect("create");
    for i in 0..n {
        let fork = path(&format!("tree/f{i:03}"));
        store
            .fork(&fork, Fork::of(source.clone()))
            .await
            .expect("fork");
        let leaf = Fork::of(fork.clone()).with_expiry(Expiry::Ttl(60));
        store
            .fork(&path(&format!("tree/f{i:03}/g")), leaf)
            .await
            .expect("fork of a fork");
        store.delete(&fork).await.expect("retire the fork");
    }
    clock.advance(Duration::from_secs(120));
    source
}

async fn a_cascade_past_one_transaction_is_removed_in_steps(table: Arc<dyn Table>, n: usize) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = store(&table, &clock);
    let source = dead_tree(&store, &clock, n).await;
    store.delete(&source).await.expect("delete the source");
    assert_eq!(
        store.head(&source).await.expect_err("deleted").code(),
        "stream/gone"
    );
    for i in 0..n {
        let fork = path(&format!("tree/f{i:03}"));
        assert_eq!(
            store.head(&fork).await.expect_err("removed").code(),
            "stream/gone"
        );
        let leaf = path(&format!("tree/f{i:03}/g"));
        assert_eq!(
            store.head(&leaf).await.expect_err("removed").code(),
            "stream/not-found"
        );
    }
    assert_eq!(
        common::items(&*table, "ds|l").await,
        0,
        "every directory entry is gone"
    );
    // The path can be used again.
    store
        .create(&source, StreamConfig::json(), Payload::empty())
        .await
        .expect("create again");
}

#[test]
fn a_cascade_past_one_transaction_is_removed_in_steps_embedded() {
    common::runtime().block_on(a_cascade_past_one_transaction_is_removed_in_steps(
        common::embedded(),
        40,
    ));
}

#[cfg(feature = "aws")]
#[test]
fn a_cascade_past_one_transaction_is_removed_in_steps_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            a_cascade_past_one_transaction_is_removed_in_steps(table, 30).await;
        }
    });
}

/// Fails one chosen transaction, without applying it.
struct FailOne {
    transactions: AtomicUsize,
    fail_at: AtomicUsize,
}

#[async_trait::async_trait]
impl common::Hooks for FailOne {
    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), TableError> {
        let n = self.transactions.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at.load(Ordering::SeqCst) {
            return Err(TableError::Unavailable {
                message: "injected".into(),
                source: None,
            });
        }
        table.transact_write_items(items).await
    }
}

/// A delete that fails between two steps has removed only dead streams:
/// the source still reads, the dead ones read as gone, and the delete
/// called again finishes.
#[test]
fn a_removal_interrupted_between_steps_is_finished_by_the_next_call() {
    common::runtime().block_on(async {
        let inner = common::embedded();
        let hooks = FailOne {
            transactions: AtomicUsize::new(0),
            fail_at: AtomicUsize::new(usize::MAX),
        };
        let hooked = common::Hooked::new(Arc::clone(&inner), hooks);
        let table: Arc<dyn Table> = hooked.clone();
        let clock = Arc::new(ManualClock::starting_now());
        let store = store(&table, &clock);
        let source = dead_tree(&store, &clock, 40).await;
        let done = hooked.hooks.transactions.load(Ordering::SeqCst);
        // The first step commits, the second fails.
        hooked.hooks.fail_at.store(done + 2, Ordering::SeqCst);
        let err = store.delete(&source).await.expect_err("interrupted");
        assert_eq!(err.code(), "storage-failure", "{err}");
        store.head(&source).await.expect("the source is still live");
        for i in 0..40 {
            let fork = path(&format!("tree/f{i:03}"));
            assert_eq!(
                store.head(&fork).await.expect_err("dead").code(),
                "stream/gone"
            );
        }
        assert!(
            common::items(&*table, "ds|l").await < 81,
            "the first step removed some"
        );
        store.delete(&source).await.expect("the delete again");
        assert_eq!(
            store.head(&source).await.expect_err("deleted").code(),
            "stream/gone"
        );
        assert_eq!(common::items(&*table, "ds|l").await, 0);
    });
}

fn link(i: usize) -> StreamPath {
    path(&format!("chain/{i:03}"))
}

/// A chain of `n + 1` streams, each forked from the one before, all but
/// the last deleted (retired: the next one reads them): deleting the last
/// releases the whole chain at once, about 5 items each.
async fn retired_chain(store: &dyn Storage, n: usize) {
    store
        .create(&link(0), StreamConfig::json(), Payload::Body("[0]".into()))
        .await
        .expect("create");
    for i in 1..=n {
        store
            .fork(&link(i), Fork::of(link(i - 1)))
            .await
            .expect("fork");
        store
            .append(&link(i), eddy_streams::Append::body(format!("[{i}]")))
            .await
            .expect("append");
    }
    for i in 0..n {
        store.delete(&link(i)).await.expect("retire");
    }
    let read = store
        .read(&link(n), eddy_streams::ReadFrom::Beginning, usize::MAX)
        .await
        .expect("the last link reads the whole chain");
    assert_eq!(read.messages.len(), n + 1);
}

async fn a_deep_chain_is_released_in_steps(table: Arc<dyn Table>, n: usize) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = common::clocked_store(&table, &clock);
    retired_chain(&store, n).await;
    store.delete(&link(n)).await.expect("delete the last link");
    for i in 0..=n {
        assert_eq!(
            store.head(&link(i)).await.expect_err("removed").code(),
            "stream/gone",
            "link {i}"
        );
    }
    assert_eq!(
        common::items(&*table, "ds|l").await,
        0,
        "every directory entry is gone"
    );
    store.backend().purge_pending().await.expect("purge");
    assert_eq!(common::items(&*table, "ds|g").await, 0, "all purged");
}

/// Regression (issue 33): a chain of more than about 25 retired sources
/// released together was refused with `storage/internal`.
#[test]
fn a_deep_chain_of_retired_sources_is_released_in_steps_embedded() {
    common::runtime().block_on(a_deep_chain_is_released_in_steps(common::embedded(), 40));
}

#[cfg(feature = "aws")]
#[test]
fn a_deep_chain_of_retired_sources_is_released_in_steps_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            a_deep_chain_is_released_in_steps(table, 40).await;
        }
    });
}

/// Once armed, fails the second transaction that removes a directory
/// entry (the purge of data items removes none).
struct FailSecondRemoval {
    armed: AtomicBool,
    removals: AtomicUsize,
}

#[async_trait::async_trait]
impl common::Hooks for FailSecondRemoval {
    async fn transact_write_items(
        &self,
        table: &dyn Table,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), TableError> {
        let removal = items.iter().any(|item| {
            matches!(item, eddy_dynamo::TransactWriteItem::Delete(delete)
                if matches!(delete.key.get("pk"), Some(eddy_dynamo::AttributeValue::S(pk)) if pk == "ds|l"))
        });
        if removal
            && self.armed.load(Ordering::SeqCst)
            && self.removals.fetch_add(1, Ordering::SeqCst) == 1
        {
            return Err(TableError::Unavailable {
                message: "injected".into(),
                source: None,
            });
        }
        table.transact_write_items(items).await
    }
}

/// A release whose later steps fail still answers the delete; the
/// sources left are dead with their fork counts exact, and the sweep's
/// walk over the directory removes them.
#[test]
fn released_sources_a_failed_step_left_are_swept() {
    common::runtime().block_on(async {
        let hooks = FailSecondRemoval {
            armed: AtomicBool::new(false),
            removals: AtomicUsize::new(0),
        };
        let hooked = common::Hooked::new(common::embedded(), hooks);
        let table: Arc<dyn Table> = hooked.clone();
        let clock = Arc::new(ManualClock::starting_now());
        let store = common::clocked_store(&table, &clock);
        retired_chain(&store, 40).await;
        // The call's own transaction commits, its first later step fails.
        hooked.hooks.armed.store(true, Ordering::SeqCst);
        store
            .delete(&link(40))
            .await
            .expect("the delete is answered");
        let left = common::items(&*table, "ds|l").await;
        assert!(left > 0, "the failed step left sources");
        clock.advance(eddy_streams::SWEEP_GRACE + Duration::from_secs(10));
        while store.sweep(64).await.expect("sweep") > 0 {}
        assert_eq!(common::items(&*table, "ds|l").await, 0, "all swept");
        // Past the grace, their tombstones are dropped too.
        for i in 0..=40 {
            assert_eq!(
                store.head(&link(i)).await.expect_err("removed").code(),
                "stream/not-found",
                "link {i}"
            );
        }
    });
}
