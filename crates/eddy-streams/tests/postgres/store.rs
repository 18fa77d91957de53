//! Several stores on one database, the listener, migrations and host
//! transactions.

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::sqlx::{self, Row};
use eddy_streams::{
    Append, Offset, Payload, PgOptions, PgStorage, ReadFrom, Storage, StreamConfig, StreamPath,
    SystemClock, Wait,
};

use super::{run, Schema};

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("valid path")
}

/// A store on `schema` whose waits re-read only every `recheck`.
async fn open_with_recheck(schema: &Schema, recheck: Duration) -> PgStorage {
    let options = PgOptions {
        recheck,
        ..schema.options()
    };
    PgStorage::open(options).await.expect("open")
}

/// A wake-up that only a notification can explain: the reader re-reads on
/// its own once a minute, and the test gives it thirty seconds.
const NO_RECHECK: Duration = Duration::from_secs(60);
const PATIENCE: Duration = Duration::from_secs(30);

#[test]
fn stores_on_one_database_serve_one_set_of_streams_and_wake_each_other() {
    let Some(schema) = Schema::fresh("stores_share_streams") else {
        return;
    };
    run(async move {
        let writer = open_with_recheck(&schema, NO_RECHECK).await;
        let reader = Arc::new(open_with_recheck(&schema, NO_RECHECK).await);
        let p = path("shared/live");
        writer
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let mut feed = reader.committed();
        let waiting = {
            let reader = Arc::clone(&reader);
            let p = p.clone();
            tokio::spawn(async move { reader.wait(&p, Offset::ZERO, PATIENCE).await })
        };
        writer
            .append(&p, Append::body("[1,2]"))
            .await
            .expect("append");
        let waited = waiting.await.expect("join").expect("wait");
        assert!(
            matches!(&waited, Wait::Changed(info) if info.tail.position() == 2),
            "{waited:?}"
        );
        // The create's notification may come first.
        let heard = tokio::time::timeout(PATIENCE, async {
            loop {
                let commit = feed.recv().await.expect("the other store's commits");
                if commit.tail.position() == 2 {
                    return commit.path;
                }
            }
        })
        .await
        .expect("the append is heard in time");
        assert_eq!(heard, "shared/live");
        let chunk = reader
            .read(&p, ReadFrom::Beginning, 1024)
            .await
            .expect("read");
        assert_eq!(chunk.messages, ["1", "2"]);
        drop((writer, reader));
        schema.drop().await;
    });
}

/// A change that sent no notification (as one sent while the listener
/// reconnects) still reaches a waiting reader, by its bounded re-check.
#[test]
fn a_lost_notification_is_repaired_by_the_recheck() {
    let Some(schema) = Schema::fresh("lost_notification") else {
        return;
    };
    run(async move {
        let store = Arc::new(open_with_recheck(&schema, Duration::from_millis(100)).await);
        let p = path("quiet");
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let waiting = {
            let store = Arc::clone(&store);
            let p = p.clone();
            tokio::spawn(async move { store.wait(&p, Offset::ZERO, PATIENCE).await })
        };
        // An append written behind the store's back: no NOTIFY.
        schema
            .execute(&format!(
                "INSERT INTO \"{0}\".messages (stream_id, seq, data)
                     SELECT id, 0, '1'::bytea FROM \"{0}\".streams WHERE path = 'quiet';
                 UPDATE \"{0}\".streams SET count = 1, bytes = 1 WHERE path = 'quiet';",
                schema.name
            ))
            .await;
        let waited = waiting.await.expect("join").expect("wait");
        assert!(
            matches!(&waited, Wait::Changed(info) if info.tail.position() == 1),
            "{waited:?}"
        );
        drop(store);
        schema.drop().await;
    });
}

/// The listener's connection is killed; it reconnects, listens again, and
/// wakes readers of later commits.
#[test]
fn the_listener_reconnects_after_its_connection_dies() {
    let Some(schema) = Schema::fresh("listener_reconnects") else {
        return;
    };
    run(async move {
        let writer = open_with_recheck(&schema, NO_RECHECK).await;
        let reader = Arc::new(open_with_recheck(&schema, NO_RECHECK).await);
        let p = path("after-reconnect");
        writer
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let pool = sqlx::PgPool::connect(&schema.url).await.expect("connect");
        let listening = format!("LISTEN \"{}.changes\"%", schema.name);
        let listeners = || {
            sqlx::query("SELECT pid FROM pg_stat_activity WHERE query LIKE $1")
                .bind(listening.clone())
                .fetch_all(&pool)
        };
        let before: Vec<i32> = listeners()
            .await
            .expect("listeners")
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(before.len(), 2, "one listener per store");
        for pid in &before {
            sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(pid)
                .execute(&pool)
                .await
                .expect("terminate");
        }
        // Wait for both listeners to be back (an explicit signal: the
        // server's own list of listening sessions).
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let now: Vec<i32> = listeners()
                .await
                .expect("listeners")
                .iter()
                .map(|row| row.get(0))
                .collect();
            if now.len() == 2 && now.iter().all(|pid| !before.contains(pid)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the listeners did not come back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let waiting = {
            let reader = Arc::clone(&reader);
            let p = p.clone();
            tokio::spawn(async move { reader.wait(&p, Offset::ZERO, PATIENCE).await })
        };
        writer.append(&p, Append::body("1")).await.expect("append");
        let waited = waiting.await.expect("join").expect("wait");
        assert!(matches!(waited, Wait::Changed(_)), "{waited:?}");
        pool.close().await;
        drop((writer, reader));
        schema.drop().await;
    });
}

#[test]
fn a_schema_written_by_a_newer_build_is_refused() {
    let Some(schema) = Schema::fresh("newer_schema") else {
        return;
    };
    run(async move {
        drop(schema.open(Arc::new(SystemClock)).await);
        schema
            .execute(&format!(
                "INSERT INTO \"{}\"._sqlx_migrations
                     (version, description, success, checksum, execution_time)
                 VALUES (999, 'from the future', true, '\\x00', 0)",
                schema.name
            ))
            .await;
        let refused = PgStorage::open(schema.options()).await.err();
        let message = refused.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("newer"), "{message}");
        schema.drop().await;
    });
}

/// A schema of layout version 4 (before documents) is upgraded: the
/// documents table is made, and documents can be written.
#[test]
fn a_schema_without_documents_is_upgraded() {
    let Some(schema) = Schema::fresh("documents_upgrade") else {
        return;
    };
    run(async move {
        drop(schema.open(Arc::new(SystemClock)).await);
        schema
            .execute(&format!(
                "DROP TABLE \"{0}\".documents;
                 DELETE FROM \"{0}\"._sqlx_migrations WHERE version = 5",
                schema.name
            ))
            .await;
        let store = schema.open(Arc::new(SystemClock)).await;
        let documents = store.documents().expect("documents");
        let made = documents.put("a", None, "{}".into()).await.expect("put");
        assert!(made.is_some());
        drop(store);
        schema.drop().await;
    });
}

/// A schema of layout version 5 (producers without their last write)
/// is upgraded: its producers are kept and counted, stamped with the
/// upgrade's time, so a retry is still deduplicated and the stream's cap
/// sees them.
#[test]
fn a_schema_before_producer_expiry_keeps_its_producers() {
    use eddy_streams::{PgOptions, ProducerPosition, StreamConfig, StreamError, StreamPath};

    let Some(schema) = Schema::fresh("producer_expiry_upgrade") else {
        return;
    };
    run(async move {
        let path = StreamPath::new("kept").expect("path");
        let write = |id: &str| Append::body("1").with_producer(ProducerPosition::new(id, 0, 0));
        let store = schema.open(Arc::new(SystemClock)).await;
        store
            .create(&path, StreamConfig::json(), eddy_streams::Payload::empty())
            .await
            .expect("create");
        store.append(&path, write("w")).await.expect("write");
        drop(store);
        schema
            .execute(&format!(
                "DROP INDEX \"{0}\".producers_by_last_write;
                 ALTER TABLE \"{0}\".producers DROP COLUMN last_ms;
                 ALTER TABLE \"{0}\".streams DROP COLUMN producer_count;
                 DELETE FROM \"{0}\"._sqlx_migrations WHERE version = 6",
                schema.name
            ))
            .await;
        let options = PgOptions {
            max_producers_per_stream: 1,
            ..schema.options()
        };
        let store = PgStorage::open(options).await.expect("open and upgrade");
        let retry = store.append(&path, write("w")).await.expect("retry");
        assert!(retry.duplicate, "the producer is kept and fresh");
        let refused = store.append(&path, write("other")).await;
        assert!(
            matches!(refused, Err(StreamError::TooManyProducers { .. })),
            "the upgrade counted it: {refused:?}"
        );
        drop(store);
        schema.drop().await;
    });
}

#[test]
fn opening_twice_at_once_migrates_once() {
    let Some(schema) = Schema::fresh("concurrent_open") else {
        return;
    };
    run(async move {
        let opens = (0..4).map(|_| PgStorage::open(schema.options()));
        let stores = futures::future::join_all(opens).await;
        assert!(stores.iter().all(Result::is_ok), "{stores:?}");
        drop(stores);
        schema.drop().await;
    });
}

/// Racing creates of one path: the losers' transactions fail on the unique
/// path, run again, and find the winner's stream.
#[test]
fn racing_creates_of_one_path_agree() {
    let Some(schema) = Schema::fresh("racing_creates") else {
        return;
    };
    run(async move {
        let stores = [
            Arc::new(schema.open(Arc::new(SystemClock)).await),
            Arc::new(schema.open(Arc::new(SystemClock)).await),
        ];
        for round in 0..20 {
            let p = path(&format!("race/{round}"));
            let creates = (0..6).map(|i| {
                let store = Arc::clone(&stores[i % 2]);
                let p = p.clone();
                tokio::spawn(async move {
                    store
                        .create(&p, StreamConfig::json(), Payload::empty())
                        .await
                })
            });
            let outcomes = futures::future::join_all(creates).await;
            let created = outcomes
                .into_iter()
                .map(|joined| joined.expect("join").expect("create").created)
                .filter(|created| *created)
                .count();
            assert_eq!(created, 1, "round {round}");
        }
        drop(stores);
        schema.drop().await;
    });
}

/// An open write transaction on one stream holds no lock that an append
/// to another stream needs.
#[test]
fn writers_of_different_streams_do_not_wait_for_each_other() {
    let Some(schema) = Schema::fresh("no_global_lock") else {
        return;
    };
    run(async move {
        let store = schema.open(Arc::new(SystemClock)).await;
        let (a, b) = (path("lock/a"), path("lock/b"));
        for p in [&a, &b] {
            store
                .create(p, StreamConfig::json(), Payload::empty())
                .await
                .expect("create");
        }
        let mut holding = store.begin().await.expect("begin");
        holding
            .append(&a, Append::body("1"))
            .await
            .expect("append a");
        let other = tokio::time::timeout(PATIENCE, store.append(&b, Append::body("2")))
            .await
            .expect("an append to b does not wait for a's transaction");
        other.expect("append b");
        holding.commit().await.expect("commit");
        assert_eq!(store.head(&a).await.expect("head").tail.position(), 1);
        drop(store);
        schema.drop().await;
    });
}

/// A host's transaction: the application's rows and the appends commit
/// together, or neither is there.
#[test]
fn application_sql_and_appends_commit_or_roll_back_together() {
    let Some(schema) = Schema::fresh("host_transaction") else {
        return;
    };
    run(async move {
        let store = schema.open(Arc::new(SystemClock)).await;
        let totals = format!("\"{}\".order_totals", schema.name);
        schema
            .execute(&format!(
                "CREATE TABLE {totals} (id TEXT PRIMARY KEY, total BIGINT NOT NULL)"
            ))
            .await;
        let out = path("totals");
        store
            .create(&out, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let insert = format!("INSERT INTO {totals} (id, total) VALUES ($1, $2)");
        let rows = || async {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {totals}"
            )))
            .fetch_one(store.pool())
            .await
            .expect("count")
        };
        // A unit: one row and one output.
        let unit = || async {
            let mut tx = store.begin().await.expect("begin");
            sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
                .bind("o-1")
                .bind(42_i64)
                .execute(&mut **tx.sql())
                .await
                .expect("insert");
            tx.append(&out, Append::body(r#"{"id":"o-1"}"#))
                .await
                .expect("append");
            assert_eq!(
                tx.head(&out).await.expect("head").tail.position(),
                1,
                "the transaction reads its own append"
            );
            tx
        };

        unit().await.rollback().await.expect("rollback");
        assert_eq!(rows().await, 0);
        assert_eq!(store.head(&out).await.expect("head").tail.position(), 0);

        let mut feed = store.committed();
        let tx = unit().await;
        assert!(
            feed.try_recv().is_err(),
            "nobody hears of it before the commit"
        );
        tx.commit().await.expect("commit");
        assert_eq!(rows().await, 1);
        assert_eq!(store.head(&out).await.expect("head").tail.position(), 1);
        let heard = feed.try_recv().expect("heard at the commit");
        assert_eq!(heard.tail.position(), 1);
        drop(store);
        schema.drop().await;
    });
}

/// Regression: a read cancelled while its transaction was beginning (a
/// reader that hung up) left its pooled connection inside a read-only
/// transaction — sqlx 0.9's `begin` is not cancel-safe on PostgreSQL — so
/// the next append on that connection failed with "cannot execute SELECT
/// FOR UPDATE in a read-only transaction". Reads are cancelled at every
/// point of a sweep, on a pool of one connection, and each is followed by
/// an append that must succeed.
#[test]
fn a_cancelled_read_leaves_no_transaction_behind() {
    let Some(schema) = Schema::fresh("cancelled_read") else {
        return;
    };
    run(async move {
        let options = PgOptions {
            max_connections: 1,
            ..schema.options()
        };
        let store = Arc::new(PgStorage::open(options).await.expect("open"));
        let p = path("cancel/reads");
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let mut appended = 0;
        for step in 0..400u32 {
            // Abort the read after a spin of a few microseconds: timers are
            // too coarse to land inside one round trip.
            let after = Duration::from_micros(u64::from(step % 200) * 2);
            let reading = {
                let (store, p) = (Arc::clone(&store), p.clone());
                tokio::spawn(async move { store.read(&p, ReadFrom::Beginning, 1024).await })
            };
            let started = std::time::Instant::now();
            while started.elapsed() < after {
                std::hint::spin_loop();
            }
            reading.abort();
            let _ = reading.await;
            store
                .append(&p, Append::body("[1]"))
                .await
                .unwrap_or_else(|e| panic!("an append after a read aborted at {after:?}: {e}"));
            appended += 1;
        }
        let chunk = store
            .read(&p, ReadFrom::Beginning, 1 << 20)
            .await
            .expect("read");
        assert_eq!(chunk.messages.len(), appended);
        drop(store);
        schema.drop().await;
    });
}
