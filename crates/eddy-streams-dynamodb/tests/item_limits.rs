//! Regression (issue 33): a stream's forks were listed in its path item,
//! so enough forks with long paths grew the item past DynamoDB's 400 KB
//! limit, after which every write to the source failed. Each fork is now
//! an item of its own (a fork reference in its source's partition of
//! forks) and the path item keeps only their count; a path item that
//! still lists forks itself (a table written before) is read as before
//! and moves them out at its next write.

use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Item, Table};
use eddy_streams::{Append, Fork, Payload, ReadFrom, Storage, StreamConfig, StreamPath};

use crate::common;

fn store(table: &Arc<dyn Table>) -> Arc<dyn Storage> {
    Arc::new(
        eddy_streams_dynamodb::open(Arc::clone(table), eddy_streams_dynamodb::options())
            .expect("open"),
    )
}

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

/// The `n`th fork's path: about 1 000 bytes.
fn fork_path(n: usize) -> StreamPath {
    path(&format!("big/{n:04}/{}", "f".repeat(990)))
}

/// The source's path item.
async fn path_item(table: &Arc<dyn Table>, p: &str) -> Item {
    table
        .get_item(common::key(&format!("ds|s|{p}"), "-"))
        .await
        .expect("get")
        .expect("the path item")
}

fn stream_id(item: &Item) -> String {
    match item.get("id") {
        Some(AttributeValue::S(id)) => id.clone(),
        other => panic!("no stream id: {other:?}"),
    }
}

/// `forks` forks of one source with long paths; then the source still
/// takes appends, and deletes behave as the engine says.
async fn many_forks_leave_the_source_writable(table: Arc<dyn Table>, forks: usize) {
    let store = store(&table);
    let source = path("big/source");
    store
        .create(&source, StreamConfig::json(), Payload::Body("[1,2]".into()))
        .await
        .expect("create");
    for n in 0..forks {
        store
            .fork(&fork_path(n), Fork::of(source.clone()))
            .await
            .unwrap_or_else(|e| panic!("fork {n}: {e}"));
    }
    let item = path_item(&table, "big/source").await;
    assert!(
        eddy_dynamo::item_size(&item) < 4096,
        "the source's item stays small"
    );
    store
        .append(&source, Append::body("[3]"))
        .await
        .expect("the source takes appends");
    let chunk = store
        .read(&fork_path(7), ReadFrom::Beginning, 1 << 20)
        .await
        .expect("a fork reads its inherited prefix");
    assert_eq!(chunk.messages.len(), 2);
    // Deleting the source while forks read it only retires it.
    store.delete(&source).await.expect("delete the source");
    let err = store.head(&source).await.expect_err("retired");
    assert_eq!(err.code(), "stream/soft-deleted");
    // The last fork to go releases it.
    for n in 0..forks {
        store
            .delete(&fork_path(n))
            .await
            .unwrap_or_else(|e| panic!("delete fork {n}: {e}"));
    }
    let err = store.head(&source).await.expect_err("gone");
    assert_eq!(err.code(), "stream/gone");
    let id = stream_id(&item);
    let backend = Arc::clone(&table);
    eddy_streams_dynamodb::open(backend, eddy_streams_dynamodb::options())
        .expect("open")
        .backend()
        .purge_pending()
        .await
        .expect("purge");
    assert_eq!(
        common::items(&*table, &format!("ds|f|{id}")).await,
        0,
        "no fork references left"
    );
}

#[test]
fn a_thousand_forks_with_long_paths_leave_the_source_writable() {
    common::runtime().block_on(many_forks_leave_the_source_writable(
        common::embedded(),
        1000,
    ));
}

/// On moto, fewer (moto answers one request at a time).
#[cfg(feature = "aws")]
#[test]
fn many_forks_with_long_paths_leave_the_source_writable_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            many_forks_leave_the_source_writable(table, 120).await;
        }
    });
}

/// A path item that lists its forks itself (`fk`, as tables written
/// before fork references have them) is read as before, and its next
/// write moves them into fork references.
#[test]
fn forks_listed_in_the_path_item_are_read_and_moved_out_at_the_next_write() {
    common::runtime().block_on(async {
        let table = common::embedded();
        let store = store(&table);
        let source = path("old/source");
        store
            .create(&source, StreamConfig::json(), Payload::Body("[1]".into()))
            .await
            .expect("create");
        let forks: Vec<StreamPath> = (0..3).map(|n| path(&format!("old/fork{n}"))).collect();
        for fork in &forks {
            store
                .fork(fork, Fork::of(source.clone()))
                .await
                .expect("fork");
        }
        // Rewrite the source's item as an older version wrote it: the
        // forks in `fk`, no references, no count.
        let mut item = path_item(&table, "old/source").await;
        let id = stream_id(&item);
        for fork in &forks {
            table
                .delete_item(eddy_dynamo::Delete::new(common::key(
                    &format!("ds|f|{id}"),
                    fork.as_str(),
                )))
                .await
                .expect("delete a reference");
        }
        item.remove("nf");
        let listed = forks.iter().map(|f| f.to_string()).collect();
        item.insert("fk".into(), AttributeValue::Ss(listed));
        table
            .put_item(eddy_dynamo::Put::new(item))
            .await
            .expect("put the old form");

        // Read as before: the source has live forks, so a delete retires it.
        store.delete(&forks[0]).await.expect("delete a fork");
        let item = path_item(&table, "old/source").await;
        assert!(
            !item.contains_key("fk"),
            "moved out at that write: {item:?}"
        );
        assert_eq!(item.get("nf"), Some(&AttributeValue::N("2".into())));
        assert_eq!(common::items(&*table, &format!("ds|f|{id}")).await, 2);
        store.delete(&source).await.expect("delete the source");
        assert_eq!(
            store.head(&source).await.expect_err("retired").code(),
            "stream/soft-deleted"
        );
        for fork in &forks[1..] {
            store.delete(fork).await.expect("delete a fork");
        }
        assert_eq!(
            store.head(&source).await.expect_err("gone").code(),
            "stream/gone"
        );
    });
}
