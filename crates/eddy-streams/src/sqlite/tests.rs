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

/// Jobs of one group commit together, each under its own savepoint: a job
/// that fails in the middle of a group takes back only its own writes.
/// The appends before it and after it stay, in memory and in the file.
#[tokio::test]
async fn a_job_failing_inside_a_group_keeps_the_appends_around_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(SqliteStorage::open(dir.path()).expect("open"));
    let path = StreamPath::new("grouped").expect("path");
    store
        .create(&path, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("create");

    // A caller's transaction holds the writer while three appends queue up
    // behind it; the writer then takes them as one group.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (entered, writer_held) = tokio::sync::oneshot::channel::<()>();
    let holding = tokio::spawn({
        let store = std::sync::Arc::clone(&store);
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
    let append = |body: &'static str, expected: Option<crate::Offset>| {
        let (store, path) = (std::sync::Arc::clone(&store), path.clone());
        tokio::spawn(async move {
            let mut append = Append::body(body).with_content_type("text/plain");
            append.expected_tail = expected;
            store.append(&path, append).await
        })
    };
    let first = append("a", None);
    let failing = append("b", Some(crate::Offset::at(99)));
    let last = append("c", None);
    // The test runs on one thread: a job that holds its queue room has
    // been sent.
    while store.queue.available_permits() > free - 3 {
        tokio::task::yield_now().await;
    }
    release.send(()).expect("release the writer");
    holding
        .await
        .expect("join")
        .expect("the transaction commits");

    first.await.expect("join").expect("the first append stays");
    let err = failing
        .await
        .expect("join")
        .expect_err("a wrong expected offset");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let last = last.await.expect("join").expect("the last append stays");
    assert_eq!(last.next_offset, crate::Offset::at(2));
    assert_eq!(messages(&store, &path).await, ["a", "c"]);

    drop(store);
    let store = SqliteStorage::open(dir.path()).expect("reopen");
    assert_eq!(
        store.head(&path).await.expect("head").tail,
        crate::Offset::at(2)
    );
    store
        .append(&path, Append::body("d").with_content_type("text/plain"))
        .await
        .expect("append after reopening");
    assert_eq!(messages(&store, &path).await, ["a", "c", "d"]);
}
