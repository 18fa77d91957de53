//! Regression (issue 33): a path item past DynamoDB's 400 KB item limit
//! failed every write with a storage error (500). Forks of a stream are
//! kept in its path item, so enough forks with long paths grew it past the
//! limit. A write that would make an item too large is now refused as too
//! large (413) before anything is sent, and the stream keeps serving.

use std::sync::Arc;

use eddy_streams::{Fork, Payload, ReadFrom, Storage, StreamConfig, StreamError, StreamPath};

use crate::common;

#[tokio::test]
async fn a_write_that_would_make_an_item_too_large_is_refused_as_too_large() {
    let store = eddy_streams_dynamodb::open(common::embedded(), eddy_streams_dynamodb::options())
        .expect("open");
    let store: Arc<dyn Storage> = Arc::new(store);
    let source = StreamPath::new("big/source").expect("path");
    store
        .create(
            &source,
            StreamConfig::json(),
            Payload::Body(r#"[1,2]"#.into()),
        )
        .await
        .expect("create");
    // Each fork adds its path (1 000 bytes here) to the source's item.
    let mut refused = None;
    for n in 0..1000 {
        let fork = StreamPath::new(format!("big/{n:04}/{}", "f".repeat(990))).expect("path");
        match store.fork(&fork, Fork::of(source.clone())).await {
            Ok(_) => {}
            Err(err) => {
                refused = Some((n, fork, err));
                break;
            }
        }
    }
    let (n, fork, err) = refused.expect("some fork is refused before 1 000");
    assert!(n > 300, "refused after {n} forks: {err}");
    assert!(
        matches!(err, StreamError::TooLarge { .. }),
        "refused as too large, not {err:?}"
    );
    assert_eq!(err.code(), "append/too-large");
    // Nothing of the refused fork was written, and the source still reads.
    assert!(store.head(&fork).await.is_err());
    let chunk = store
        .read(&source, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("the source still reads");
    assert_eq!(chunk.messages.len(), 2);
}
