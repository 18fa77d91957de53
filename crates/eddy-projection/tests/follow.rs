//! `follow`: emission rules, pacing, retries and failures.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{Declare, FollowOptions, Host, Retry, RunOptions, Status, Step};
use eddy_streams::{Append, Storage};
use futures::StreamExt;

use crate::run::{order_totals, seed, total_fold};
use crate::support::{order, orders, Faulty, Op, When};

const QUIET: Duration = Duration::from_millis(300);

fn fast() -> FollowOptions {
    FollowOptions::default()
        .with_repair_interval(std::time::Duration::from_millis(50))
        .with_retry(Retry::exponential(
            Duration::from_millis(1),
            Duration::from_millis(5),
        ))
}

mod cases {
    use super::*;

    pub async fn follow_emits_by_the_rules_and_ends_when_closed(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..0).await;
        let host = Host::new(store.clone());
        let mut follow = host.follow(&order_totals().at(()).expect("bind"), fast());
        let first = follow.next().await.expect("element").expect("ok");
        assert_eq!(
            (first.units, first.status),
            (0, Status::CaughtUp),
            "the first cycle always emits"
        );
        assert!(
            tokio::time::timeout(QUIET, follow.next()).await.is_err(),
            "a wake with no input emits nothing"
        );
        for i in 0..3 {
            orders()
                .append(store.as_ref(), &(), &[order(i, 1.0)])
                .await
                .expect("append");
        }
        let joined = follow.next().await.expect("element").expect("ok");
        assert_eq!(
            joined.items, 3,
            "a slow consumer gets one element for all new input"
        );
        store
            .append(&orders().path(&()).expect("path"), Append::close_only())
            .await
            .expect("close");
        let closed = follow.next().await.expect("element").expect("ok");
        assert_eq!(closed.status, Status::Closed);
        assert!(
            follow.next().await.is_none(),
            "it ends after every input closed"
        );
    }

    pub async fn follow_emits_after_each_limited_cycle(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let host = Host::new(store.clone());
        let mut follow = host.follow(
            &order_totals().at(()).expect("bind"),
            fast().with_limit(1).with_unit_size(1),
        );
        for expected in 1..=3u64 {
            let element = follow.next().await.expect("element").expect("ok");
            assert_eq!((element.units, element.status), (1, Status::Limited));
            assert_eq!(element.offsets["input"].position(), expected);
        }
        assert!(tokio::time::timeout(QUIET, follow.next()).await.is_err());
    }

    pub async fn bad_follow_options_fail_at_the_first_pull(store: Arc<dyn Storage>) {
        let host = Host::new(store.clone());
        let mut follow = host.follow(
            &order_totals().at(()).expect("bind"),
            FollowOptions::default().with_repair_interval(std::time::Duration::from_millis(0)),
        );
        let err = follow.next().await.expect("element").expect_err("invalid");
        assert_eq!(err.code(), "load/invalid-options");
        assert!(follow.next().await.is_none());
    }

    pub async fn follow_retries_storage_failures(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        faulty.fail_nth(Some(Op::Read), 0, When::Before);
        faulty.fail_nth(Some(Op::Read), 2, When::Before);
        let host = Host::new(faulty.clone());
        let mut follow = host.follow(&order_totals().at(()).expect("bind"), fast());
        let first = follow.next().await.expect("element").expect("retried");
        assert_eq!(first.offsets["input"].position(), 2);
    }

    pub async fn other_faults_fail_the_stream(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let declare = Declare::<()>::new("failing");
        let input = declare.input("orders", &orders());
        let failing = declare
            .fold(0.0)
            .on(input, |_, _, _| Step::<f64>::fail("boom"))
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let mut follow = host.follow(&failing.at(()).expect("bind"), fast());
        let err = follow.next().await.expect("element").expect_err("fails");
        assert_eq!(err.code(), "handler/failed");
        assert!(follow.next().await.is_none());
    }

    /// A follower holds its checkpoint token between cycles; another
    /// writer moving the checkpoint makes the follower's next save fail.
    pub async fn a_follower_detects_a_second_writer(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let host = Host::new(store.clone());
        let bound = order_totals().at(()).expect("bind");
        let mut follow = host.follow(&bound, fast());
        follow.next().await.expect("element").expect("ok");
        seed(store.as_ref(), 1..2).await;
        host.run(&bound, RunOptions::default())
            .await
            .expect("second writer");
        seed(store.as_ref(), 2..3).await;
        let err = follow.next().await.expect("element").expect_err("conflict");
        assert_eq!(err.code(), "checkpoint/conflict");
    }
    pub async fn a_bad_follow_limit_fails_at_the_first_pull(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let host = Host::new(store.clone());
        let mut follow = host.follow(&order_totals().at(()).expect("bind"), fast().with_limit(0));
        let err = follow.next().await.expect("element").expect_err("invalid");
        assert_eq!(err.code(), "load/invalid-options");
        assert!(follow.next().await.is_none());
        assert!(
            store
                .head(&crate::support::totals().path(&()).expect("path"))
                .await
                .is_err(),
            "nothing ran"
        );
    }

    /// Without `options.retry` the host's schedule applies; `options.retry`
    /// overrides it.
    pub async fn follow_uses_the_host_retry_unless_the_options_override_it(
        store: Arc<dyn Storage>,
    ) {
        seed(store.as_ref(), 0..2).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let never = Retry::exponential(Duration::from_millis(1), Duration::from_millis(1))
            .with_max_attempts(0);
        let host = Host::new(faulty.clone()).with_retry(never);
        let options =
            FollowOptions::default().with_repair_interval(std::time::Duration::from_millis(50));
        faulty.fail_nth(Some(Op::Read), 0, When::Before);
        let mut follow = host.follow(&order_totals().at(()).expect("bind"), options.clone());
        let err = follow.next().await.expect("element").expect_err("no retry");
        assert_eq!(err.code(), "storage-failure");

        faulty.fail_nth(Some(Op::Read), 0, When::Before);
        let mut follow = host.follow(
            &order_totals().at(()).expect("bind"),
            options.with_retry(Retry::exponential(
                Duration::from_millis(1),
                Duration::from_millis(5),
            )),
        );
        let first = follow.next().await.expect("element").expect("retried");
        assert_eq!(first.offsets["input"].position(), 2);
    }

    /// A gone input ends the follower after its final unit; that element
    /// holds the state and offsets the final unit committed.
    pub async fn follow_ends_after_the_final_gone_unit(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let host = Host::new(store.clone());
        let bound = total_fold().at(()).expect("bind");
        let mut follow = host.follow(&bound, fast());
        let first = follow.next().await.expect("element").expect("ok");
        assert_eq!(first.state, Some(1.0));
        store
            .delete(&orders().path(&()).expect("path"))
            .await
            .expect("delete");
        let last = follow.next().await.expect("element").expect("final");
        assert_eq!(
            (last.status, last.units, last.state),
            (Status::Forgotten, 1, Some(1.0))
        );
        assert_eq!(last.offsets["orders"].position(), 2);
        assert!(follow.next().await.is_none(), "it ends");
        assert_eq!(host.read(&bound).await.expect("read"), 0.0);
    }
    /// An output deleted while a follower runs fails the next unit with
    /// `pin/invalid-output`; it is not recreated.
    pub async fn an_output_deleted_under_a_follower_is_invalid(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let host = Host::new(store.clone());
        let mut follow = host.follow(&order_totals().at(()).expect("bind"), fast());
        follow.next().await.expect("element").expect("ok");
        let output = crate::support::totals().path(&()).expect("path");
        store.delete(&output).await.expect("delete");
        seed(store.as_ref(), 1..2).await;
        let err = follow.next().await.expect("element").expect_err("gone");
        assert_eq!(err.code(), "pin/invalid-output");
        assert!(follow.next().await.is_none());
        assert!(store.head(&output).await.is_err(), "not recreated");
    }
    /// Regression (issue 11, 1.1): a cycle that committed a unit and then
    /// hit a retried `storage-failure` reported only the retry pass; when
    /// the retry committed nothing, no element was emitted at all.
    pub async fn a_retried_cycle_reports_the_units_it_committed_before_the_failure(
        store: Arc<dyn Storage>,
    ) {
        seed(store.as_ref(), 0..1).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let mut follow = host.follow(
            &order_totals().at(()).expect("bind"),
            fast().with_unit_size(1),
        );
        let first = follow.next().await.expect("element").expect("ok");
        assert_eq!(first.units, 1);
        // The next cycle reads the new item (read 0) and commits it; the
        // read that looks for more (read 1) fails and the retry finds
        // nothing new.
        faulty.fail_nth(Some(Op::Read), 1, When::Before);
        seed(store.as_ref(), 1..2).await;
        let element = tokio::time::timeout(Duration::from_secs(10), follow.next())
            .await
            .expect("an element for the cycle that committed a unit")
            .expect("element")
            .expect("ok");
        assert_eq!((element.units, element.items), (1, 1));
        assert_eq!(element.offsets["input"].position(), 2);
        assert_eq!(element.pass.units, 0, "the last pass found nothing new");
    }

    /// Regression (issue 11, 1.4): a huge repair interval or retry cap
    /// panicked (`Instant + Duration::MAX`) instead of being refused.
    pub async fn out_of_range_durations_fail_at_the_first_pull(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let host = Host::new(store.clone());
        let huge = [
            FollowOptions {
                repair_interval: Duration::MAX,
                ..fast()
            },
            fast().with_retry(Retry::exponential(Duration::from_millis(1), Duration::MAX)),
            fast().with_retry(Retry::exponential(Duration::MAX, Duration::MAX).with_jitter()),
        ];
        for options in huge {
            let mut follow = host.follow(&order_totals().at(()).expect("bind"), options);
            let err = follow.next().await.expect("element").expect_err("refused");
            assert_eq!(err.code(), "load/invalid-options", "{err}");
            assert!(follow.next().await.is_none());
        }
    }
}

crate::on_backends!(
    follow_emits_by_the_rules_and_ends_when_closed,
    follow_emits_after_each_limited_cycle,
    bad_follow_options_fail_at_the_first_pull,
    follow_retries_storage_failures,
    other_faults_fail_the_stream,
    a_follower_detects_a_second_writer,
    a_bad_follow_limit_fails_at_the_first_pull,
    follow_uses_the_host_retry_unless_the_options_override_it,
    follow_ends_after_the_final_gone_unit,
    an_output_deleted_under_a_follower_is_invalid,
    a_retried_cycle_reports_the_units_it_committed_before_the_failure,
    out_of_range_durations_fail_at_the_first_pull,
);
