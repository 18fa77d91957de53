//! SQLite failures that only a hook into the connection can cause.

use std::sync::atomic::Ordering;

use super::{SqliteOptions, SqliteStorage};
use crate::{Append, ErrorKind, Payload, ReadFrom, Storage, StreamConfig, StreamPath};

async fn messages(store: &SqliteStorage, path: &StreamPath) -> Vec<String> {
    let chunk = store.read(path, ReadFrom::Beginning, 1 << 20).await;
    let chunk = chunk.expect("reads still work");
    chunk
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
}

/// After a failed `COMMIT` (as a failed fsync makes it fail) the store
/// refuses every write with an internal error, even once commits would
/// succeed again, until it is reopened; what was committed before stays.
#[tokio::test]
async fn a_failed_commit_poisons_the_store_until_reopened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = SqliteOptions::default();
    let fail = std::sync::Arc::clone(&options.fail_commits);
    let store = SqliteStorage::open_with(dir.path(), options).expect("open");
    let path = StreamPath::new("poison").expect("path");
    store
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    store
        .append(&path, Append::body("1"))
        .await
        .expect("append");

    fail.store(true, Ordering::SeqCst);
    let failed = store.append(&path, Append::body("2")).await;
    let err = failed.expect_err("the commit fails");
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(!err.is_retryable());
    assert!(
        std::error::Error::source(&err).is_some(),
        "the commit's own error is kept as the cause"
    );

    fail.store(false, Ordering::SeqCst);
    let refused = store.append(&path, Append::body("3")).await;
    assert_eq!(refused.err().map(|e| e.kind()), Some(ErrorKind::Internal));
    let other = StreamPath::new("other").expect("path");
    let refused = store
        .create(&other, StreamConfig::json(), Payload::empty())
        .await;
    assert_eq!(refused.err().map(|e| e.code()), Some("storage/internal"));
    assert_eq!(messages(&store, &path).await, ["1"]);
    drop(store);

    let store = SqliteStorage::open(dir.path()).expect("reopen");
    store
        .append(&path, Append::body("4"))
        .await
        .expect("append after reopening");
    assert_eq!(messages(&store, &path).await, ["1", "4"]);
}

/// Reads of a stream with a sliding TTL move its expiry at once, and the
/// debounced touch they leave is stored when the store closes: after a
/// reopen the stream still lives past the expiry its creation set.
#[tokio::test]
async fn pending_ttl_touches_are_stored_when_the_store_closes() {
    use std::time::Duration;

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = std::sync::Arc::new(crate::ManualClock::starting_now());
    let options = || SqliteOptions {
        clock: clock.clone(),
        ..SqliteOptions::default()
    };
    let path = StreamPath::new("sliding").expect("path");
    let store = SqliteStorage::open_with(dir.path(), options()).expect("open");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(10));
    store
        .create(&path, config, Payload::empty())
        .await
        .expect("create");
    for _ in 0..3 {
        clock.advance(Duration::from_secs(6));
        store
            .read(&path, ReadFrom::Beginning, 1024)
            .await
            .expect("a read slides the ttl");
    }
    drop(store);

    clock.advance(Duration::from_secs(6));
    let store = SqliteStorage::open_with(dir.path(), options()).expect("reopen");
    store
        .head(&path)
        .await
        .expect("alive 24 s after its creation: the last read was 6 s ago");
    clock.advance(Duration::from_secs(5));
    let gone = store.head(&path).await.err().map(|e| e.code());
    assert_eq!(
        gone,
        Some("stream/not-found"),
        "10 s after the last read it expired"
    );
}

/// Runs `appends` to `path` as one group commit: a caller's transaction
/// holds the writer while they queue up behind it.
async fn as_one_group(
    store: &std::sync::Arc<SqliteStorage>,
    path: &StreamPath,
    appends: Vec<Append>,
) -> Vec<Result<crate::Appended, crate::StreamError>> {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (entered, writer_held) = tokio::sync::oneshot::channel::<()>();
    let holding = tokio::spawn({
        let store = std::sync::Arc::clone(store);
        async move {
            store
                .transaction(move |_| {
                    let _ = entered.send(());
                    let _ = held.recv();
                    Ok::<_, crate::StreamError>(())
                })
                .await
        }
    });
    writer_held.await.expect("the writer runs the transaction");
    let free = store.queue.available_permits();
    let count = appends.len();
    let calls: Vec<_> = appends
        .into_iter()
        .map(|append| {
            let (store, path) = (std::sync::Arc::clone(store), path.clone());
            tokio::spawn(async move { store.append(&path, append).await })
        })
        .collect();
    // The test runs on one thread: a job that holds its queue room has
    // been sent.
    while store.queue.available_permits() > free - count {
        tokio::task::yield_now().await;
    }
    release.send(()).expect("release the writer");
    holding
        .await
        .expect("join")
        .expect("the transaction commits");
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.expect("join"));
    }
    results
}

fn text(body: &'static str) -> Append {
    Append::body(body).with_content_type("text/plain")
}

async fn text_stream(name: &str) -> (tempfile::TempDir, std::sync::Arc<SqliteStorage>, StreamPath) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(SqliteStorage::open(dir.path()).expect("open"));
    let path = StreamPath::new(name).expect("path");
    store
        .create(&path, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("create");
    (dir, store, path)
}

/// Jobs of one group commit together: an append refused by its checks
/// has written nothing, and the appends before it and after it stay, in
/// memory and in the file.
#[tokio::test]
async fn an_append_refused_inside_a_group_keeps_the_appends_around_it() {
    let (dir, store, path) = text_stream("grouped").await;
    let mut refused = text("b");
    refused.expected_tail = Some(crate::Offset::new(0, 99));
    let results = as_one_group(&store, &path, vec![text("a"), refused, text("c")]).await;
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let kind = results[1].as_ref().err().map(|e| e.kind());
    assert_eq!(kind, Some(ErrorKind::Conflict));
    let last = results[2].as_ref().expect("the last append stays");
    assert_eq!(last.next_offset.position(), 2);
    assert_eq!(messages(&store, &path).await, ["a", "c"]);

    drop(store);
    let store = SqliteStorage::open(dir.path()).expect("reopen");
    assert_eq!(
        store.head(&path).await.expect("head").tail,
        last.next_offset
    );
    store
        .append(&path, text("d"))
        .await
        .expect("append after reopening");
    assert_eq!(messages(&store, &path).await, ["a", "c", "d"]);
}

/// Appends run without a savepoint of their own: one whose write fails
/// (here a trigger refuses its message) fails its whole group, every
/// append of it is refused as retryable, and none is written.
#[tokio::test]
async fn an_append_whose_write_fails_fails_its_group_and_nothing_of_it_is_written() {
    let (dir, store, path) = text_stream("refusing").await;
    store
        .transaction(|tx| {
            tx.sql()
                .execute_batch(
                    "CREATE TRIGGER refuse_b BEFORE INSERT ON messages WHEN NEW.data = X'62'
                     BEGIN SELECT RAISE(ABORT, 'no b'); END;",
                )
                .map_err(crate::StreamError::from)
        })
        .await
        .expect("a trigger");
    let results = as_one_group(&store, &path, vec![text("a"), text("b"), text("c")]).await;
    for result in &results {
        let kind = result.as_ref().err().map(|e| e.kind());
        assert_eq!(kind, Some(ErrorKind::Unavailable), "{result:?}");
    }
    assert!(messages(&store, &path).await.is_empty());

    store.append(&path, text("a")).await.expect("a retry alone");
    drop(store);
    let store = SqliteStorage::open(dir.path()).expect("reopen");
    assert_eq!(messages(&store, &path).await, ["a"]);
    assert_eq!(store.head(&path).await.expect("head").tail.position(), 1);
}
