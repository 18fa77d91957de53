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
