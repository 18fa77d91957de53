//! Contract cases of stream incarnations: a stream created at a path is a
//! stream of its own, so no offset of an earlier stream at the path ever
//! reads the later one's data.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_streams::{
    Append, ErrorKind, Fork, ManualClock, Offset, Payload, ReadFrom, Storage, StreamConfig,
    StreamError, Wait,
};

use super::{json_stream, path, read_all};

/// The error code of a read from `from`, or `ok`.
async fn read_code(store: &dyn Storage, p: &eddy_streams::StreamPath, from: Offset) -> String {
    match store.read(p, ReadFrom::Offset(from), 1 << 20).await {
        Ok(_) => "ok".into(),
        Err(e) => e.code().into(),
    }
}

/// Deleted and created again: the new stream has another incarnation,
/// the old stream's offsets are refused as stale (never read against the
/// new data), and an append expecting an old tail is refused.
pub async fn a_recreated_stream_refuses_the_old_streams_offsets(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "again").await;
    let old_tail = store
        .append(&p, Append::body("[1,2,3]"))
        .await
        .expect("append")
        .next_offset;
    store.delete(&p).await.expect("delete");
    let created = store
        .create(
            &p,
            StreamConfig::json(),
            Payload::Body(Bytes::from("[4,5,6,7]")),
        )
        .await
        .expect("create again");
    let new_tail = created.info.tail;
    assert_ne!(new_tail.incarnation(), old_tail.incarnation());
    assert_ne!(new_tail.to_string(), old_tail.to_string());
    for old in [
        old_tail.with_position(0),
        old_tail.with_position(1),
        old_tail,
    ] {
        let err = store.read(&p, ReadFrom::Offset(old), 1 << 20).await.err();
        assert_eq!(
            err.as_ref().map(StreamError::code),
            Some("offset/stale"),
            "{old}"
        );
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Gone));
    }
    assert_eq!(read_all(&*store, &p).await, ["4", "5", "6", "7"]);
    let from_zero = store
        .read(&p, ReadFrom::Offset(Offset::ZERO), 1 << 20)
        .await
        .expect("the zero offset is the beginning of any stream");
    assert_eq!(from_zero.start, new_tail.with_position(0));
    assert_eq!(from_zero.messages.len(), 4);

    let stale_tail = old_tail.with_position(new_tail.position());
    let refused = store
        .append(&p, Append::body("8").expecting_tail(stale_tail))
        .await
        .err();
    assert_eq!(refused.map(|e| e.code()), Some("append/offset-mismatch"));
    let waited = store
        .wait(&p, old_tail, Duration::from_secs(5))
        .await
        .expect("wait");
    assert!(
        matches!(waited, Wait::Changed(_)),
        "a waiter on the old stream's tail is sent to read again"
    );
    assert_eq!(read_all(&*store, &p).await, ["4", "5", "6", "7"]);
}

/// A fork has its own incarnation, and also takes its source's offsets up
/// to the branch point, where they name the same data; its source's later
/// offsets are not the fork's.
pub async fn a_fork_takes_its_sources_offsets_up_to_the_branch(store: Arc<dyn Storage>) {
    let src = json_stream(&*store, "lineage/src").await;
    let src_tail = store
        .append(&src, Append::body("[1,2,3,4]"))
        .await
        .expect("append")
        .next_offset;
    let fork = path("lineage/fork");
    let created = store
        .fork(&fork, Fork::of(src.clone()).at(src_tail.with_position(2)))
        .await
        .expect("fork");
    let fork_tail = created.info.tail;
    assert_ne!(fork_tail.incarnation(), src_tail.incarnation());
    assert_eq!(fork_tail.position(), 2);
    store
        .append(&fork, Append::body("\"f\""))
        .await
        .expect("append to the fork");
    let from_source = store
        .read(&fork, ReadFrom::Offset(src_tail.with_position(1)), 1 << 20)
        .await
        .expect("a source offset before the branch");
    assert_eq!(from_source.messages, ["2", "\"f\""]);
    assert_eq!(from_source.start, fork_tail.with_position(1));
    assert_eq!(
        read_code(&*store, &fork, src_tail.with_position(3)).await,
        "offset/stale",
        "the source's offsets past the branch are not the fork's"
    );
    assert_eq!(read_code(&*store, &fork, Offset::ZERO).await, "ok");
}

/// A fork at an offset of a stream that was replaced since is refused.
pub async fn a_fork_at_a_replaced_streams_offset_is_refused(store: Arc<dyn Storage>) {
    let src = json_stream(&*store, "replaced/src").await;
    let old = store
        .append(&src, Append::body("[1,2]"))
        .await
        .expect("append")
        .next_offset;
    store.delete(&src).await.expect("delete");
    store
        .create(
            &src,
            StreamConfig::json(),
            Payload::Body(Bytes::from("[3,4,5]")),
        )
        .await
        .expect("create again");
    let refused = store
        .fork(&path("replaced/fork"), Fork::of(src.clone()).at(old))
        .await
        .err();
    assert_eq!(refused.map(|e| e.code()), Some("offset/stale"));
}

/// An expired stream created again, even at the very time its
/// predecessor was created on another clock, is a new incarnation.
pub async fn an_expired_stream_created_again_is_a_new_incarnation(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let p = path("expiring");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(1));
    let first = store
        .create(&p, config.clone(), Payload::Body(Bytes::from("[1]")))
        .await
        .expect("create")
        .info
        .tail;
    clock.advance(Duration::from_secs(2));
    let second = store
        .create(&p, config, Payload::Body(Bytes::from("[2]")))
        .await
        .expect("create again")
        .info
        .tail;
    assert!(second.incarnation() > first.incarnation());
    assert_eq!(read_code(&*store, &p, first).await, "offset/stale");
}
