//! Contract cases of the backup primitives, `Storage::snapshot` and
//! `Storage::restore` (stores that cannot take snapshots, such as the
//! remote client, do not run them).

use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{
    Append, Payload, ProducerPosition, ReadFrom, Storage, StreamConfig, StreamError, StreamPath,
    StreamSnapshot,
};

use super::cases::{json_stream, read_all};

/// Calls `$run!(case, case, ...)` with every snapshot case.
macro_rules! every_snapshot_case {
    ($run:ident) => {
        $run!(
            snapshot_and_restore_keep_offsets_producers_and_close,
            restore_refuses_existing_streams_and_misplaced_chunks,
            a_restored_stream_keeps_its_retention_policy,
        );
    };
}
pub(crate) use every_snapshot_case;

async fn messages(store: &dyn Storage, path: &StreamPath) -> Vec<Bytes> {
    store
        .read(path, ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read")
        .messages
}

/// Restores `snapshot` at `to`, in chunks of `chunk` messages, from `from`.
async fn restore_at(
    store: &dyn Storage,
    snapshot: &StreamSnapshot,
    to: &StreamPath,
    from: &[Bytes],
    chunk: usize,
) {
    let snapshot = StreamSnapshot {
        path: to.clone(),
        ..snapshot.clone()
    };
    let mut first = 0;
    let mut chunks: Vec<&[Bytes]> = from.chunks(chunk).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for part in chunks {
        store
            .restore(&snapshot, first, part.to_vec())
            .await
            .expect("restore");
        first += part.len() as u64;
    }
}

pub async fn snapshot_and_restore_keep_offsets_producers_and_close(store: Arc<dyn Storage>) {
    let open = json_stream(&*store, "open").await;
    for seq in 0..3 {
        let append = Append::body(format!(r#"{{"n":{seq}}}"#))
            .with_producer(ProducerPosition::new("w", 1, seq));
        store.append(&open, append).await.expect("append");
    }
    let mut seq = Append::body(r#"[{"n":3},{"n":4}]"#);
    seq.stream_seq = Some("b".into());
    store.append(&open, seq).await.expect("append with seq");
    let closed = StreamPath::new("closed").expect("path");
    store
        .create(
            &closed,
            StreamConfig::bytes("text/plain"),
            Bytes::from("a").into(),
        )
        .await
        .expect("create");
    let mut closing = Append::body("z").with_producer(ProducerPosition::new("c", 0, 0));
    closing.close = true;
    store.append(&closed, closing.clone()).await.expect("close");

    let snapshot = store.snapshot(&open).await.expect("snapshot");
    assert_eq!((snapshot.count, snapshot.closed), (5, false));
    let positions: Vec<_> = snapshot.producers.iter().map(|p| &p.position).collect();
    assert_eq!(positions, [&ProducerPosition::new("w", 1, 2)]);
    assert_eq!(snapshot.last_stream_seq.as_deref(), Some("b"));
    let written = messages(&*store, &open).await;

    let copy = StreamPath::new("restored/open").expect("path");
    restore_at(&*store, &snapshot, &copy, &written, 2).await;
    assert_eq!(
        read_all(&*store, &copy).await,
        read_all(&*store, &open).await
    );
    let head = store.head(&copy).await.expect("head");
    assert_eq!((head.tail.position(), head.bytes), (5, snapshot.bytes));
    let retry = Append::body(r#"{"n":2}"#).with_producer(ProducerPosition::new("w", 1, 2));
    let retried = store.append(&copy, retry).await.expect("retry");
    assert!(retried.duplicate, "the restored producer deduplicates");
    assert_eq!(retried.next_offset.position(), 5);
    let mut stale = Append::body("{}");
    stale.stream_seq = Some("a".into());
    assert!(matches!(
        store.append(&copy, stale).await,
        Err(StreamError::StreamSeqConflict { .. })
    ));
    assert_eq!(
        store.snapshot(&copy).await.expect("snapshot").producers,
        snapshot.producers
    );

    let snapshot = store.snapshot(&closed).await.expect("snapshot");
    assert!(snapshot.closed);
    let copy = StreamPath::new("restored/closed").expect("path");
    restore_at(
        &*store,
        &snapshot,
        &copy,
        &messages(&*store, &closed).await,
        10,
    )
    .await;
    let head = store.head(&copy).await.expect("head");
    assert!(head.closed);
    assert_eq!(head.config.content_type, "text/plain");
    let again = store.append(&copy, closing).await.expect("closing retry");
    assert!(
        again.duplicate && again.closed,
        "the closing append is acknowledged again"
    );
}

pub async fn restore_refuses_existing_streams_and_misplaced_chunks(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "source").await;
    store
        .append(&p, Append::body(r#"[1,2,3]"#))
        .await
        .expect("append");
    let snapshot = store.snapshot(&p).await.expect("snapshot");
    let all = messages(&*store, &p).await;
    assert!(matches!(
        store.restore(&snapshot, 0, all.clone()).await,
        Err(StreamError::ConfigConflict { .. })
    ));
    let unknown = StreamPath::new("nowhere").expect("path");
    assert!(matches!(
        store.snapshot(&unknown).await,
        Err(StreamError::NotFound { .. })
    ));

    let copy = StreamSnapshot {
        path: StreamPath::new("copy").expect("path"),
        ..snapshot.clone()
    };
    assert!(
        store
            .restore(&copy, 0, vec![Bytes::from("9"); 4])
            .await
            .is_err(),
        "more messages than the snapshot holds"
    );
    assert!(
        store
            .restore(&copy, 0, vec![Bytes::from("99"); 3])
            .await
            .is_err(),
        "other bytes than the snapshot's"
    );
    assert!(
        matches!(
            store.head(&copy.path).await,
            Err(StreamError::NotFound { .. })
        ),
        "a refused restore writes nothing"
    );
    store
        .restore(&copy, 0, all[..1].to_vec())
        .await
        .expect("first chunk");
    assert!(matches!(
        store.restore(&copy, 2, all[2..].to_vec()).await,
        Err(StreamError::OffsetMismatch { .. })
    ));
    store
        .restore(&copy, 1, all[1..].to_vec())
        .await
        .expect("the rest");
    assert_eq!(
        read_all(&*store, &copy.path).await,
        read_all(&*store, &p).await
    );
}

/// A snapshot carries the stream's retention policy, its restore keeps
/// it and the sweep applies it; a stream that dropped messages cannot be
/// backed up (a snapshot promises every message from 0).
pub async fn a_restored_stream_keeps_its_retention_policy(store: Arc<dyn Storage>) {
    let source = StreamPath::new("retained").expect("path");
    let policy = "messages=3".parse().expect("policy");
    let config = StreamConfig::bytes("text/plain").with_retention(policy);
    store
        .create(&source, config, Payload::empty())
        .await
        .expect("create");
    for n in 0..5 {
        store
            .append(&source, Append::body(n.to_string()))
            .await
            .expect("append");
    }
    let snapshot = store.snapshot(&source).await.expect("snapshot");
    assert_eq!(snapshot.config.retention, policy);
    let restored = StreamPath::new("restored").expect("path");
    let all = messages(&*store, &source).await;
    restore_at(&*store, &snapshot, &restored, &all, 2).await;
    let info = store.head(&restored).await.expect("head");
    assert_eq!(info.config.retention, policy);
    while store.sweep(64).await.expect("sweep") > 0 {}
    assert_eq!(read_all(&*store, &restored).await, ["2", "3", "4"]);
    let refused = store.snapshot(&source).await.expect_err("dropped");
    assert!(refused.to_string().contains("retention"), "{refused}");
}
