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
