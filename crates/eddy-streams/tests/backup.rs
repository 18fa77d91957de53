//! Backups: `export` then `import` between every pair of backends
//! (memory, SQLite, and PostgreSQL when `DATABASE_URL` is set with the
//! `postgres` feature) gives byte-identical messages at the same positions,
//! the same configuration and close, and producers that still deduplicate;
//! every restored stream is a new incarnation, so no offset of the original
//! names restored data.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eddy_streams::{
    export, import, Append, BackupError, MemoryStorage, Payload, ProducerPosition, ReadFrom,
    SqliteStorage, Storage, StreamConfig, StreamPath, BACKUP_FORMAT,
};

/// A store of one backend, with what keeps it alive.
struct Backend {
    name: &'static str,
    store: Arc<dyn Storage>,
    _dir: tempfile::TempDir,
    #[cfg(feature = "postgres")]
    schema: Option<crate::postgres::Schema>,
}

impl Backend {
    async fn open(name: &'static str) -> Option<Backend> {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Storage> = match name {
            "memory" => Arc::new(MemoryStorage::new()),
            "sqlite" => Arc::new(SqliteStorage::open(dir.path()).expect("open sqlite")),
            #[cfg(feature = "postgres")]
            "postgres" => {
                let schema = crate::postgres::Schema::fresh("backup round trip")?;
                let store = schema.open(Arc::new(eddy_streams::SystemClock)).await;
                return Some(Backend {
                    name,
                    store: Arc::new(store),
                    _dir: dir,
                    schema: Some(schema),
                });
            }
            _ => return None,
        };
        Some(Backend {
            name,
            store,
            _dir: dir,
            #[cfg(feature = "postgres")]
            schema: None,
        })
    }

    async fn close(self) {
        #[cfg(feature = "postgres")]
        if let Some(schema) = self.schema {
            schema.drop().await;
        }
    }
}

fn backends() -> Vec<&'static str> {
    let mut names = vec!["memory", "sqlite"];
    if cfg!(feature = "postgres") {
        names.push("postgres");
    }
    names
}

fn path(p: &str) -> StreamPath {
    StreamPath::new(p).expect("path")
}

fn by(id: &str, epoch: u64, seq: u64, body: impl Into<Bytes>) -> Append {
    Append::body(body.into()).with_producer(ProducerPosition::new(id, epoch, seq))
}

/// Streams of every kind: JSON with a producer and `Stream-Seq`, binary
/// (not UTF-8, with newlines), closed by a producer, with a TTL, empty,
/// and one larger than a restore chunk.
async fn fill(store: &dyn Storage) {
    let orders = path("orders/a");
    store
        .create(&orders, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    for seq in 0..4 {
        let body = format!(r#"{{"order":{seq}}}"#);
        store
            .append(&orders, by("w", 2, seq, body))
            .await
            .expect("append");
    }
    let mut with_seq = Append::body(r#"[{"order":"x"},[1,2]]"#);
    with_seq.stream_seq = Some("s1".into());
    store.append(&orders, with_seq).await.expect("append");

    let binary = path("bin/b");
    store
        .create(
            &binary,
            StreamConfig::bytes("application/octet-stream"),
            Payload::empty(),
        )
        .await
        .expect("create");
    for body in [&[0xff, 0, 0x80][..], b"line\nbreak"] {
        store
            .append(&binary, Append::body(Bytes::copy_from_slice(body)))
            .await
            .expect("append");
    }

    let closed = path("closed/c");
    store
        .create(
            &closed,
            StreamConfig::bytes("text/plain"),
            Bytes::from("x").into(),
        )
        .await
        .expect("create");
    let mut closing = by("c", 0, 0, "last");
    closing.close = true;
    store.append(&closed, closing).await.expect("close");

    let ttl = path("ttl/d");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(3600));
    store
        .create(&ttl, config, Bytes::from("[1]").into())
        .await
        .expect("create");
    store
        .create(&path("empty/e"), StreamConfig::json(), Payload::empty())
        .await
        .expect("create");

    let big = path("big/f");
    store
        .create(
            &big,
            StreamConfig::bytes("application/octet-stream"),
            Payload::empty(),
        )
        .await
        .expect("create");
    for i in 0..3u8 {
        store
            .append(&big, Append::body(vec![i; 700_000]))
            .await
            .expect("append");
    }

    // Compacted: positions 0 and 2 dropped (holes the backup keeps).
    let compacted = path("compacted/g");
    let config = StreamConfig::json().with_compaction(eddy_streams::Compaction::ON);
    store
        .create(&compacted, config, Payload::empty())
        .await
        .expect("create");
    for (key, value) in [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)] {
        let change = format!(
            r#"{{"type":"t","key":"{key}","value":{value},"headers":{{"operation":"upsert"}}}}"#
        );
        store
            .append(&compacted, Append::body(change))
            .await
            .expect("append");
    }
    assert_eq!(store.compact(&compacted).await, Ok(2));
}

/// Every message with its position.
async fn messages(store: &dyn Storage, p: &StreamPath) -> Vec<(u64, Bytes)> {
    let mut from = ReadFrom::Beginning;
    let mut all = Vec::new();
    loop {
        let chunk = store.read(p, from, 1 << 20).await.expect("read");
        for (index, message) in chunk.messages.iter().enumerate() {
            all.push((chunk.offset_of(index).position(), message.clone()));
        }
        if chunk.up_to_date {
            return all;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

/// Both stores hold the same streams: configuration, tail position, bytes,
/// close, producers, and the same messages at the same positions; each
/// restored stream has an incarnation of its own, and the original's
/// offsets are refused on it as stale.
async fn assert_same(from: &dyn Storage, to: &dyn Storage, what: &str) {
    let listed = from.list("").await.expect("list");
    let restored = to.list("").await.expect("list");
    let positions = |infos: &[eddy_streams::StreamInfo]| -> Vec<_> {
        infos
            .iter()
            .map(|i| {
                (
                    i.path.clone(),
                    i.config.clone(),
                    i.closed,
                    i.tail.position(),
                    i.bytes,
                )
            })
            .collect()
    };
    assert_eq!(
        positions(&listed),
        positions(&restored),
        "{what}: the listings differ"
    );
    for (info, copy) in listed.iter().zip(&restored) {
        let p = path(&info.path);
        assert_ne!(
            info.tail.incarnation(),
            copy.tail.incarnation(),
            "{what}: {p} is restored as a new incarnation"
        );
        let stale = to.read(&p, ReadFrom::Offset(info.tail), 1 << 20).await;
        assert_eq!(
            stale.err().map(|e| e.code()),
            Some("offset/stale"),
            "{what}: {p}"
        );
        let (a, b) = (from.snapshot(&p).await, to.snapshot(&p).await);
        let (mut a, b) = (a.expect("snapshot"), b.expect("snapshot"));
        a.incarnation = b.incarnation;
        assert_eq!(a, b, "{what}: {p}");
        assert_eq!(
            messages(from, &p).await,
            messages(to, &p).await,
            "{what}: {p}"
        );
    }
}

async fn export_to_vec(store: &dyn Storage) -> Vec<u8> {
    let mut out = Vec::new();
    export(store, "", &mut out, &mut ()).await.expect("export");
    out
}

#[test]
fn round_trips_between_every_pair_of_backends() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        for from in backends() {
            for to in backends() {
                let (Some(source), Some(target)) =
                    (Backend::open(from).await, Backend::open(to).await)
                else {
                    continue;
                };
                let what = format!("{} -> {}", source.name, target.name);
                eprintln!("backup round trip {what}");
                fill(&*source.store).await;
                let backup = export_to_vec(&*source.store).await;
                let summary = import(&*target.store, &mut backup.as_slice(), false, &mut ())
                    .await
                    .expect("import");
                assert_eq!((summary.streams, summary.messages), (7, 17), "{what}");
                assert_same(&*source.store, &*target.store, &what).await;

                let retried = target
                    .store
                    .append(&path("orders/a"), by("w", 2, 3, r#"{"order":3}"#))
                    .await
                    .expect("retry");
                assert!(retried.duplicate, "{what}: a retried append deduplicates");
                let mut closing = by("c", 0, 0, "last");
                closing.close = true;
                let again = target.store.append(&path("closed/c"), closing).await;
                assert!(again.expect("closing retry").duplicate, "{what}");

                let refused = import(&*target.store, &mut backup.as_slice(), false, &mut ()).await;
                assert!(
                    matches!(refused, Err(BackupError::Exists { .. })),
                    "{what}: existing streams are not overwritten: {refused:?}"
                );
                import(&*target.store, &mut backup.as_slice(), true, &mut ())
                    .await
                    .expect("import with overwrite");
                assert_same(&*source.store, &*target.store, &what).await;
                source.close().await;
                target.close().await;
            }
        }
    });
}

#[test]
fn damaged_and_foreign_backups_are_refused() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let source = MemoryStorage::new();
        fill(&source).await;
        let backup = export_to_vec(&source).await;
        let text = String::from_utf8(backup.clone()).expect("the export is text");
        assert!(text.starts_with(&format!(r#"{{"header":{{"format":"{BACKUP_FORMAT}","version":2}}}}"#)));
        // The compacted stream's holes, at 0 and 2.
        assert_eq!(text.matches(r#"{"skip":1}"#).count(), 2, "{text}");

        let cut = &backup[..backup.len() / 2];
        let cut = &cut[..cut.iter().rposition(|b| *b == b'\n').expect("a line") + 1];
        let target = MemoryStorage::new();
        let truncated = import(&target, &mut &cut[..], false, &mut ()).await;
        assert!(
            matches!(&truncated, Err(BackupError::Format { message, .. }) if message.contains("incomplete")),
            "{truncated:?}"
        );
        let newer = text.replacen("\"version\":2", "\"version\":3", 1);
        let refused = import(&MemoryStorage::new(), &mut newer.as_bytes(), false, &mut ()).await;
        assert!(matches!(refused, Err(BackupError::Format { line: 1, .. })), "{refused:?}");
        let foreign = import(&MemoryStorage::new(), &mut &b"{\"text\":\"x\"}\n"[..], false, &mut ()).await;
        assert!(matches!(foreign, Err(BackupError::Format { line: 1, .. })), "{foreign:?}");
    });
}

/// A backup keeps when each producer last wrote (`last_ms`); one written
/// before producers expired has none, and imports with the import's time:
/// its producers keep a whole expiry window from then.
#[test]
fn producers_keep_their_last_write_and_older_backups_take_the_import_time() {
    use eddy_streams::{Clock, ManualClock, DEFAULT_PRODUCER_EXPIRY};

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let clock = Arc::new(ManualClock::starting_now());
        let source = MemoryStorage::new().with_clock(clock.clone());
        let p = path("kept");
        source
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        source.append(&p, by("w", 0, 0, "1")).await.expect("write");
        let written_at = clock.now_ms();
        let backup = export_to_vec(&source).await;
        let text = String::from_utf8(backup.clone()).expect("utf-8");
        assert!(
            text.contains(&format!("\"last_ms\":{written_at}")),
            "{text}"
        );

        clock.advance(Duration::from_secs(3600));
        let target = MemoryStorage::new().with_clock(clock.clone());
        import(&target, &mut backup.as_slice(), false, &mut ())
            .await
            .expect("import");
        let kept = target.snapshot(&p).await.expect("snapshot").producers;
        assert_eq!(kept[0].last_ms, Some(written_at), "kept, not the import's");

        let older = text.replace(&format!(",\"last_ms\":{written_at}"), "");
        assert!(!older.contains("last_ms"));
        let target = MemoryStorage::new().with_clock(clock.clone());
        import(&target, &mut older.as_bytes(), false, &mut ())
            .await
            .expect("an older backup imports");
        let imported = target.snapshot(&p).await.expect("snapshot").producers;
        assert_eq!(imported[0].last_ms, Some(clock.now_ms()));
        clock.advance(DEFAULT_PRODUCER_EXPIRY - Duration::from_secs(60));
        let retry = target.append(&p, by("w", 0, 0, "1")).await.expect("retry");
        assert!(retry.duplicate, "a window from the import");
    });
}
