//! The change-feed follower and its durable checkpoint.

use eddy_dynamo::{BatchProjection, ChangeFeed, EmbeddedTable, Follower};

use crate::common::{line, orders, placed, schema, summary_of, summary_projection, TestTable};

fn sqlite(dir: &tempfile::TempDir) -> TestTable {
    EmbeddedTable::open_sqlite(dir.path().join("shop.db"), schema())
        .unwrap()
        .into()
}

#[tokio::test]
async fn follows_the_feed_and_resumes_from_its_checkpoint_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let t = sqlite(&dir);
        let stream = orders(&t);
        let id = stream.id([("orderId", "o-1")]).unwrap();
        stream
            .append(&id, &[placed("ann"), line(1, 10)], 0)
            .await
            .unwrap();
        let p = summary_projection(&t, false);
        let follower = Follower::new(t.clone(), "summaries").batch_size(1);
        // Two events, and the two row writes they cause (read back and ignored).
        assert_eq!(
            follower
                .catch_up(&[&p as &dyn BatchProjection])
                .await
                .unwrap(),
            4
        );
        assert_eq!(
            follower.checkpoint().await.unwrap().map(|p| p.to_string()),
            Some(r#"{"feed":"embedded","after":4}"#.to_owned())
        );
        assert!(
            t.read_changes(None, 100)
                .await
                .unwrap()
                .into_records()
                .is_empty(),
            "what the only follower passed is trimmed"
        );
        stream.append(&id, &[line(1, 5)], 2).await.unwrap();
    }
    let t = sqlite(&dir);
    let p = summary_projection(&t, false);
    let follower = Follower::new(t.clone(), "summaries");
    let result = follower
        .poll_once(&[&p as &dyn BatchProjection])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        result.records, 1,
        "only the event appended after the checkpoint"
    );
    let row = summary_of(&t, "o-1").await;
    assert_eq!(row.total_cents, 15);
}

#[tokio::test]
async fn a_failed_record_holds_the_checkpoint_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = sqlite(&dir);
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    stream
        .append(&id, &[line(1, 10), placed("ann")], 0)
        .await
        .unwrap(); // line before placement fails
    let p = summary_projection(&t, false);
    let follower = Follower::new(t.clone(), "summaries");
    let result = follower
        .poll_once(&[&p as &dyn BatchProjection])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.first_failure(), Some(0));
    assert_eq!(
        follower.checkpoint().await.unwrap(),
        None,
        "nothing before the failure to move past"
    );
    let again = follower
        .poll_once(&[&p as &dyn BatchProjection])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.failures[0].code, "EvolveFailed");

    // run() stops on shutdown.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tx.send(()).unwrap();
    follower
        .run(
            &[&p as &dyn BatchProjection],
            std::time::Duration::from_millis(5),
            async {
                let _ = rx.await;
            },
        )
        .await;
}
