//! SQLite-specific behaviour: files written by older builds, caller transactions, and several openers of one directory.

use eddy_streams::{Append, Fork, ReadFrom, SqliteStorage, Storage, StreamPath};
use rusqlite::Connection;

/// The layout of schema version 2, as older builds wrote it.
const VERSION_2: &str = "
CREATE TABLE streams (
    id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL UNIQUE,
    content_type TEXT NOT NULL, ttl_secs INTEGER, expires_at_ms INTEGER,
    created_closed INTEGER NOT NULL, closed INTEGER NOT NULL, count INTEGER NOT NULL,
    bytes INTEGER NOT NULL, last_stream_seq TEXT, closed_by_id TEXT, closed_by_epoch INTEGER,
    closed_by_seq INTEGER, accessed_ms INTEGER NOT NULL,
    fork_source TEXT, fork_position INTEGER, fork_sub INTEGER,
    forks INTEGER NOT NULL DEFAULT 0, soft_deleted INTEGER NOT NULL DEFAULT 0);
CREATE TABLE messages (stream_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (stream_id, seq)) WITHOUT ROWID;
CREATE TABLE producers (stream_id INTEGER NOT NULL, producer TEXT NOT NULL,
    epoch INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (stream_id, producer)) WITHOUT ROWID;
CREATE TABLE tombstones (path TEXT PRIMARY KEY, deleted_ms INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO streams (id, path, content_type, created_closed, closed, count, bytes, accessed_ms, forks)
    VALUES (1, 'src', 'application/json', 0, 0, 2, 2, 0, 1);
INSERT INTO streams (id, path, content_type, created_closed, closed, count, bytes, accessed_ms,
    fork_source, fork_position, fork_sub) VALUES (2, 'fork', 'application/json', 0, 0, 1, 1, 0, 'src', 1, 0);
INSERT INTO messages VALUES (1, 0, x'31'), (1, 1, x'32'), (2, 0, x'31');
PRAGMA user_version = 2;
";

/// A version 2 file (fork counts) opens as the current version (forks
/// found by source, projection checkpoints, documents) with its streams
/// and fork links intact.
#[test]
fn a_version_2_database_is_upgraded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(eddy_streams::DATABASE_FILE);
    Connection::open(&file)
        .and_then(|conn| conn.execute_batch(VERSION_2))
        .expect("write a version 2 file");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = SqliteStorage::open(dir.path()).expect("open and upgrade");
        let (src, fork) = (
            StreamPath::new("src").expect("path"),
            StreamPath::new("fork").expect("path"),
        );
        store
            .append(&fork, Append::body("3"))
            .await
            .expect("append to the fork");
        let read = store
            .read(&fork, ReadFrom::Beginning, 1024)
            .await
            .expect("read");
        assert_eq!(read.messages, ["1", "3"]);
        store.delete(&src).await.expect("delete the source");
        assert_eq!(
            store.head(&src).await.err().map(|e| e.code()),
            Some("stream/soft-deleted"),
            "the fork still holds its source"
        );
        store.delete(&fork).await.expect("delete the fork");
        assert_eq!(
            store.head(&src).await.err().map(|e| e.code()),
            Some("stream/gone")
        );
        let refork = store.fork(&fork, Fork::of(src.clone())).await.err();
        assert_eq!(refork.map(|e| e.code()), Some("stream/gone"));
        let documents = store.documents().expect("documents");
        let version = documents
            .put("subscriptions/a", None, "{}".into())
            .await
            .expect("put a document in the upgraded file");
        assert!(version.is_some());
    });
    let conn = Connection::open(&file).expect("open");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("read the version");
    assert_eq!(version, 9);
    let checkpoints: i64 = conn
        .query_row("SELECT count(*) FROM projection_checkpoints", [], |r| {
            r.get(0)
        })
        .expect("the projection checkpoints table exists");
    assert_eq!(checkpoints, 0);
    let marks: i64 = conn
        .query_row("SELECT count(*) FROM wake_marks", [], |r| r.get(0))
        .expect("the wake marks table exists");
    assert_eq!(marks, 0);
}

/// A file written by a newer build (a higher `user_version`) is refused,
/// untouched.
#[test]
fn a_database_of_a_newer_build_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(eddy_streams::DATABASE_FILE);
    Connection::open(&file)
        .and_then(|conn| conn.execute_batch("PRAGMA user_version = 99;"))
        .expect("write a newer file");
    let refused = SqliteStorage::open(dir.path()).expect_err("a newer layout is refused");
    assert!(refused.to_string().contains("version 99"), "{refused}");
    let version: i64 = Connection::open(&file)
        .and_then(|conn| conn.query_row("PRAGMA user_version", [], |r| r.get(0)))
        .expect("read the version");
    assert_eq!(version, 99);
}

/// A caller's transaction (`SqliteStorage::transaction`): the
/// application's rows and the appends commit together when the closure
/// returns `Ok`, and neither stays when it returns `Err`; a refused append
/// inside it writes nothing and the transaction goes on; an append outside
/// it afterwards comes after what it wrote.
#[test]
fn application_sql_and_appends_commit_or_roll_back_together() {
    use eddy_streams::{Payload, StreamConfig, StreamError};
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = SqliteStorage::open(dir.path()).expect("open");
        let out = StreamPath::new("totals").expect("path");
        store
            .create(&out, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store
            .transaction(|tx| {
                tx.sql()
                    .execute_batch("CREATE TABLE order_totals (id TEXT PRIMARY KEY)")?;
                Ok::<_, StreamError>(())
            })
            .await
            .expect("migrate");
        let unit = |commit: bool| {
            let out = out.clone();
            store.transaction(move |tx| {
                tx.sql()
                    .execute("INSERT INTO order_totals (id) VALUES ('o-1')", [])?;
                tx.append(&out, Append::body(r#"{"id":"o-1"}"#))?;
                let refused = tx.append(&out, Append::body("not json"));
                assert!(refused.is_err(), "a bad append is refused");
                if commit {
                    Ok(())
                } else {
                    Err(StreamError::internal("the unit fails"))
                }
            })
        };
        let count = || {
            store.transaction(|tx| {
                Ok::<i64, StreamError>(tx.sql().query_row(
                    "SELECT count(*) FROM order_totals",
                    [],
                    |r| r.get(0),
                )?)
            })
        };
        unit(false).await.expect_err("rolled back");
        assert_eq!(count().await.expect("count"), 0);
        let read = store.read(&out, ReadFrom::Beginning, 1 << 20).await;
        assert!(read.expect("read").messages.is_empty(), "no output");
        unit(true).await.expect("committed");
        assert_eq!(count().await.expect("count"), 1);
        let read = store.read(&out, ReadFrom::Beginning, 1 << 20).await;
        assert_eq!(read.expect("read").messages, [r#"{"id":"o-1"}"#]);
        // An append outside comes after what the transaction wrote.
        store
            .append(&out, Append::body(r#"{"id":"o-2"}"#))
            .await
            .expect("append after the transaction");
        let read = store.read(&out, ReadFrom::Beginning, 1 << 20).await;
        assert_eq!(
            read.expect("read").messages,
            [r#"{"id":"o-1"}"#, r#"{"id":"o-2"}"#]
        );
    });
}

/// Two openers of one data directory (two processes, say `eddy serve` and
/// an `eddy streams append` beside it) each read what the other wrote: a
/// store's cache of recent messages never stands in for the stream's head
/// in the database.
///
/// Regression: a read that the cache could answer returned the stream as
/// this opener last wrote it, missing the other's appends, and a stream
/// the other deleted still answered. The writer's own copy of the records
/// must not miss the other's writes either.
#[tokio::test]
async fn each_opener_of_a_directory_reads_what_the_other_wrote() {
    async fn append(store: &SqliteStorage, path: &StreamPath, text: &'static str) {
        store
            .append(path, Append::body(text))
            .await
            .expect("append");
    }
    use eddy_streams::{Payload, StreamConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let (here, there) = (
        SqliteStorage::open(dir.path()).expect("open"),
        SqliteStorage::open(dir.path()).expect("open again"),
    );
    let path = StreamPath::new("shared/log").expect("path");
    let read_all = || async {
        let chunk = here.read(&path, ReadFrom::Beginning, 1 << 20).await?;
        let texts: Vec<String> = chunk
            .messages
            .iter()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect();
        Ok::<_, eddy_streams::StreamError>((texts, chunk.next_offset))
    };
    here.create(&path, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("create");
    append(&here, &path, "one").await;
    assert_eq!(read_all().await.expect("read").0, ["one"]);

    append(&there, &path, "two").await;
    let (texts, tail) = read_all().await.expect("read again");
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(tail, here.head(&path).await.expect("head").tail);
    assert_eq!(tail.position(), 2);

    // Each writer appends after what the other wrote.
    append(&here, &path, "three").await;
    append(&there, &path, "four").await;
    let (texts, _) = read_all().await.expect("read all four");
    assert_eq!(texts, ["one", "two", "three", "four"]);

    there.delete(&path).await.expect("delete there");
    assert!(read_all().await.is_err());
    assert!(here.head(&path).await.is_err());
}

/// Two openers of one directory (two processes) whose clocks read the same
/// time: a stream one of them deletes and the other creates again is
/// still a new incarnation, taken above the one the tombstone keeps.
#[tokio::test]
async fn a_path_created_again_by_another_opener_gets_a_later_incarnation() {
    use eddy_streams::{ManualClock, Payload, SqliteOptions, StreamConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let now = ManualClock::starting_now();
    let open = || {
        let clock = std::sync::Arc::new(ManualClock::at(eddy_streams::Clock::now_ms(&now)));
        let options = SqliteOptions {
            clock,
            ..SqliteOptions::default()
        };
        SqliteStorage::open_with(dir.path(), options).expect("open")
    };
    let (here, there) = (open(), open());
    let path = StreamPath::new("twice").expect("path");
    let first = here
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create")
        .info
        .tail;
    here.delete(&path).await.expect("delete");
    let second = there
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create again")
        .info
        .tail;
    assert!(
        second.incarnation() > first.incarnation(),
        "{second} after {first}"
    );
}

/// A layout 7 file (producers without their last write) opens as the
/// current layout: its producers are kept, counted as written at the upgrade, so each
/// keeps deduplicating for a whole expiry window from then.
#[test]
fn a_version_7_database_keeps_its_producers_from_the_upgrade_on() {
    use std::sync::Arc;
    use std::time::Duration;

    use eddy_streams::{
        ManualClock, ProducerPosition, SqliteOptions, StreamConfig, DEFAULT_PRODUCER_EXPIRY,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(eddy_streams::DATABASE_FILE);
    let clock = Arc::new(ManualClock::starting_now());
    let open = || {
        let options = SqliteOptions {
            clock: clock.clone(),
            ..SqliteOptions::default()
        };
        SqliteStorage::open_with(dir.path(), options).expect("open")
    };
    let path = StreamPath::new("kept").expect("path");
    let write = |seq| Append::body("1").with_producer(ProducerPosition::new("w", 0, seq));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = open();
        store
            .create(&path, StreamConfig::json(), eddy_streams::Payload::empty())
            .await
            .expect("create");
        store.append(&path, write(0)).await.expect("write");
    });
    // Back to layout 7, as a build before producer expiry wrote it.
    Connection::open(&file)
        .and_then(|conn| {
            conn.execute_batch(
                "DROP INDEX streams_by_retention_due;
                 ALTER TABLE streams DROP COLUMN retention;
                 ALTER TABLE streams DROP COLUMN retention_due_ms;
                 DROP INDEX producers_by_last_write;
                 ALTER TABLE producers DROP COLUMN last_ms;
                 ALTER TABLE streams DROP COLUMN producer_count;
                 PRAGMA user_version = 7;",
            )
        })
        .expect("write a version 7 file");
    clock.advance(DEFAULT_PRODUCER_EXPIRY * 2);
    runtime.block_on(async {
        let store = open();
        let counted: i64 = Connection::open(&file)
            .and_then(|conn| conn.query_row("SELECT producer_count FROM streams", [], |r| r.get(0)))
            .expect("read the count");
        assert_eq!(counted, 1, "the upgrade counts the stream's producers");
        clock.advance(DEFAULT_PRODUCER_EXPIRY - Duration::from_secs(60));
        let retry = store.append(&path, write(0)).await.expect("retry");
        assert!(retry.duplicate, "kept, and within a window of the upgrade");
        clock.advance(Duration::from_secs(120));
        let fresh = store.append(&path, write(0)).await.expect("fresh");
        assert!(!fresh.duplicate, "expired a window after the upgrade");
    });
    let conn = Connection::open(&file).expect("open");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("read the version");
    assert_eq!(version, 9);
}

/// With the default options (but no fsync per commit, to keep the test
/// short), 20 000 distinct producers append to one stream (the outbox
/// bridge makes each row its own producer; the cap was 10 000).
#[test]
fn twenty_thousand_producers_append_to_one_stream() {
    use eddy_streams::{MemoryStorage, Payload, ProducerPosition, StreamConfig};

    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let options = eddy_streams::SqliteOptions {
            durability: eddy_streams::Durability::Process,
            ..Default::default()
        };
        let sqlite = SqliteStorage::open_with(dir.path(), options).expect("open");
        let stores: [(&str, &dyn Storage); 2] =
            [("memory", &MemoryStorage::new()), ("sqlite", &sqlite)];
        for (name, store) in stores {
            let path = StreamPath::new("many").expect("path");
            store
                .create(&path, StreamConfig::json(), Payload::empty())
                .await
                .expect("create");
            for n in 0..20_000 {
                let append = Append::body("1").with_producer(ProducerPosition::new(
                    format!("row-{n}"),
                    0,
                    0,
                ));
                store.append(&path, append).await.unwrap_or_else(|e| {
                    panic!("{name}: producer {n}: {e}");
                });
            }
            let head = store.head(&path).await.expect("head");
            assert_eq!(head.tail.position(), 20_000, "{name}");
        }
    });
}

/// A stream over its producer cap (the cap was lowered) takes a new
/// producer in place of an expired one without growing, and refuses one
/// cleanly (`limit/producers`, nothing written) when none expired.
#[test]
fn a_stream_over_a_lowered_cap_takes_new_producers_only_in_place_of_expired_ones() {
    use std::sync::Arc;
    use std::time::Duration;

    use eddy_streams::{
        ManualClock, ProducerPosition, SqliteOptions, StreamConfig, StreamError,
        DEFAULT_PRODUCER_EXPIRY,
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::starting_now());
    let open = |cap| {
        let options = SqliteOptions {
            clock: clock.clone(),
            max_producers_per_stream: cap,
            ..SqliteOptions::default()
        };
        SqliteStorage::open_with(dir.path(), options).expect("open")
    };
    let path = StreamPath::new("lowered").expect("path");
    let by = |id: &str| Append::body("1").with_producer(ProducerPosition::new(id, 0, 0));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = open(4);
        store
            .create(&path, StreamConfig::json(), eddy_streams::Payload::empty())
            .await
            .expect("create");
        store.append(&path, by("old")).await.expect("write");
        clock.advance(DEFAULT_PRODUCER_EXPIRY / 2);
        for id in ["a", "b", "c"] {
            store.append(&path, by(id)).await.expect("write");
        }
        drop(store);
        clock.advance(DEFAULT_PRODUCER_EXPIRY / 2 + Duration::from_secs(60));
        let store = open(2);
        store
            .append(&path, by("new"))
            .await
            .expect("in place of the expired one");
        let refused = store.append(&path, by("newer")).await;
        assert!(
            matches!(refused, Err(StreamError::TooManyProducers { .. })),
            "{refused:?}"
        );
        let producers = store.snapshot(&path).await.expect("snapshot").producers;
        assert_eq!(producers.len(), 4, "the count did not grow");
    });
}

/// The messages of `path` from the beginning, read page by page (each
/// page at most `max_bytes`).
async fn all_messages(store: &SqliteStorage, path: &StreamPath, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut from = ReadFrom::Beginning;
    loop {
        let chunk = store.read(path, from, max_bytes).await.expect("read");
        messages.extend(chunk.messages.iter().map(|m| m.to_vec()));
        if chunk.up_to_date {
            return messages;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

/// Reads past the store's cache come from the read connections' mapping
/// of the file: messages written after a reader mapped it, and while the
/// file grows many times over, read back whole, by several readers at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_past_the_cache_see_every_message_as_the_file_grows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = eddy_streams::SqliteOptions {
        cache_bytes: 0,
        ..eddy_streams::SqliteOptions::default()
    };
    let store = std::sync::Arc::new(SqliteStorage::open_with(dir.path(), options).expect("open"));
    let message = |stream: u8, n: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|i| stream.wrapping_add((n * 31 + i) as u8))
            .collect()
    };
    let small = StreamPath::new("small").expect("path");
    let large = StreamPath::new("large").expect("path");
    for path in [&small, &large] {
        let config = eddy_streams::StreamConfig::bytes("application/octet-stream");
        store
            .create(path, config, eddy_streams::Payload::empty())
            .await
            .expect("create");
    }
    let mut small_written = Vec::new();
    let mut large_written = Vec::new();
    for round in 0..4 {
        for n in 0..50 {
            let m = message(1, round * 50 + n, 1024);
            store
                .append(&small, Append::body(m.clone()))
                .await
                .expect("append");
            small_written.push(m);
        }
        // Every read connection maps the file as it is now.
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (store, small) = (std::sync::Arc::clone(&store), small.clone());
                tokio::spawn(async move { all_messages(&store, &small, 64 * 1024).await })
            })
            .collect();
        for reader in readers {
            assert_eq!(reader.await.expect("reader"), small_written);
        }
        // Then the file grows by some 8 MiB.
        for n in 0..32 {
            let m = message(2, round * 32 + n, 256 * 1024);
            store
                .append(&large, Append::body(m.clone()))
                .await
                .expect("append");
            large_written.push(m);
        }
    }
    assert_eq!(all_messages(&store, &small, 64 * 1024).await, small_written);
    assert_eq!(all_messages(&store, &large, 1 << 20).await, large_written);
    let size = std::fs::metadata(store.file()).expect("file").len();
    assert!(size > 24 << 20, "the file grew to {size} bytes");
}
