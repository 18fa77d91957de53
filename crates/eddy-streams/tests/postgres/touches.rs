//! Sliding-TTL touches: a read moves its stream's expiry at once, and the
//! store writes the touches of many reads as one statement per flush.
//!
//! UPDATEs of the streams table are counted by triggers of the test's own
//! (one per statement, one per row), and another trigger notifies each
//! stored access: the statements the store really sends, without a mock,
//! and a signal for the background flush instead of polling for it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eddy_streams::sqlx::postgres::PgListener;
use eddy_streams::sqlx::{self, AssertSqlSafe, PgPool, Row};
use eddy_streams::{
    Clock, ManualClock, Payload, PgStorage, ReadFrom, Storage, StreamConfig, StreamPath,
};

use super::{run, Schema};

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("valid path")
}

/// Adds the triggers that count the UPDATE statements on the schema's
/// `streams` table, and the rows they change.
async fn count_updates(schema: &Schema) {
    let s = &schema.name;
    schema
        .execute(&format!(
            r#"
            CREATE TABLE "{s}".update_counts (statements bigint NOT NULL, rows bigint NOT NULL);
            INSERT INTO "{s}".update_counts VALUES (0, 0);
            CREATE FUNCTION "{s}".count_statement() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN UPDATE "{s}".update_counts SET statements = statements + 1; RETURN NULL; END
            $$;
            CREATE FUNCTION "{s}".count_row() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN UPDATE "{s}".update_counts SET rows = rows + 1; RETURN NULL; END
            $$;
            CREATE TRIGGER count_statements AFTER UPDATE ON "{s}".streams
                FOR EACH STATEMENT EXECUTE FUNCTION "{s}".count_statement();
            CREATE TRIGGER count_rows AFTER UPDATE ON "{s}".streams
                FOR EACH ROW EXECUTE FUNCTION "{s}".count_row();
            "#
        ))
        .await;
}

/// The UPDATE statements and updated rows counted so far.
async fn updates(pool: &PgPool, schema: &Schema) -> (i64, i64) {
    let row = sqlx::query(AssertSqlSafe(format!(
        r#"SELECT statements, rows FROM "{}".update_counts"#,
        schema.name
    )))
    .fetch_one(pool)
    .await
    .expect("read the update counts");
    (row.get(0), row.get(1))
}

/// The stored last access of the stream at `path`.
async fn stored_access(pool: &PgPool, schema: &Schema, path: &StreamPath) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!(
        r#"SELECT accessed_ms FROM "{}".streams WHERE path = $1"#,
        schema.name
    )))
    .bind(path.as_str())
    .fetch_one(pool)
    .await
    .expect("read the stored access")
}

/// The accesses the store writes to the schema's `streams` table, as a
/// trigger of the test's own reports them (`NOTIFY`, sent at commit).
struct StoredAccesses {
    listener: PgListener,
    seen: HashSet<String>,
}

impl StoredAccesses {
    /// Starts listening; only accesses stored from now on are reported.
    async fn listen(schema: &Schema) -> Self {
        let s = &schema.name;
        let channel = format!("stored_{s}");
        schema
            .execute(&format!(
                r#"
                CREATE OR REPLACE FUNCTION "{s}".notify_stored() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN PERFORM pg_notify('{channel}', NEW.path || ' ' || NEW.accessed_ms); RETURN NULL; END
                $$;
                CREATE OR REPLACE TRIGGER notify_stored AFTER UPDATE ON "{s}".streams
                    FOR EACH ROW EXECUTE FUNCTION "{s}".notify_stored();
                "#
            ))
            .await;
        let mut listener = PgListener::connect(&schema.url).await.expect("connect");
        listener.listen(&channel).await.expect("listen");
        StoredAccesses {
            listener,
            seen: HashSet::new(),
        }
    }

    /// Waits (at most 5 s) until the store has stored `at_ms` as the last
    /// access of `path`.
    async fn wait(&mut self, path: &StreamPath, at_ms: i64) {
        let wanted = format!("{path} {at_ms}");
        let arrived = tokio::time::timeout(Duration::from_secs(5), async {
            while !self.seen.contains(&wanted) {
                let stored = self.listener.recv().await.expect("a notification");
                self.seen.insert(stored.payload().to_owned());
            }
        })
        .await;
        assert!(
            arrived.is_ok(),
            "`{path}`: the touch of {at_ms} was not stored"
        );
    }
}

/// A store on `schema` that reads the time from a manual clock, with JSON
/// streams at `paths` whose TTL of 10 s slides with reads.
async fn open_sliding(schema: &Schema, paths: &[&StreamPath]) -> (Arc<ManualClock>, PgStorage) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = schema.open(clock.clone()).await;
    let config = StreamConfig::json().with_ttl(Duration::from_secs(10));
    for p in paths {
        store
            .create(p, config.clone(), Payload::empty())
            .await
            .expect("create");
    }
    (clock, store)
}

/// Reads each of `paths` once, which slides its TTL.
async fn read_each(store: &PgStorage, paths: &[&StreamPath]) {
    for p in paths {
        store
            .read(p, ReadFrom::Beginning, 1024)
            .await
            .expect("a stream read within its TTL is alive");
    }
}

/// Regression: every read of a stream with a sliding TTL stored its touch
/// with an UPDATE of its own (issue 12: touches are debounced, as SQLite's
/// are). Hundreds of reads of two streams now cost at most one UPDATE
/// statement (of both rows) per flush interval; the reads still slide the
/// TTL at once, and the flushed touches reach the database, where another
/// store sees them.
#[test]
fn sliding_ttl_reads_are_stored_debounced() {
    let Some(schema) = Schema::fresh("debounced_touches") else {
        return;
    };
    run(async move {
        let paths = [path("ttl/a"), path("ttl/b")];
        let (clock, store) = open_sliding(&schema, &[&paths[0], &paths[1]]).await;
        count_updates(&schema).await;
        let mut stored = StoredAccesses::listen(&schema).await;

        const ROUNDS: u32 = 200;
        let before = updates(store.pool(), &schema).await;
        let started = Instant::now();
        for _ in 0..ROUNDS {
            // 200 s of store time under a 10 s TTL: only sliding keeps the
            // streams, and only if each read sees the one before it.
            clock.advance(Duration::from_secs(1));
            read_each(&store, &[&paths[0], &paths[1]]).await;
        }
        let elapsed = started.elapsed();
        let after = updates(store.pool(), &schema).await;
        let (statements, rows) = (after.0 - before.0, after.1 - before.1);
        eprintln!(
            "{} reads in {elapsed:?}: {statements} UPDATE statements of {rows} rows",
            2 * ROUNDS
        );
        // One flush a second at most, and one more under way at the end.
        let flushes = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX) + 2;
        assert!(
            statements <= flushes && rows <= 2 * flushes,
            "{} reads in {elapsed:?} made {statements} UPDATE statements of {rows} rows",
            2 * ROUNDS
        );

        let last_read = clock.now_ms();
        for p in &paths {
            stored.wait(p, last_read).await;
        }
        let flushed = updates(store.pool(), &schema).await;
        let (statements, rows) = (flushed.0 - before.0, flushed.1 - before.1);
        assert!(
            rows > statements,
            "a flush stores the touches of both streams in one statement: \
             {statements} statements of {rows} rows"
        );

        let other = schema.open(clock.clone()).await;
        clock.advance(Duration::from_secs(9));
        other
            .head(&paths[0])
            .await
            .expect("another store sees the stored touch: read 9 s ago");
        clock.advance(Duration::from_secs(2));
        let expired = store.head(&paths[1]).await.err().map(|e| e.code());
        assert_eq!(
            expired,
            Some("stream/not-found"),
            "11 s after its last read the stream expired"
        );
        other.close().await;
        store.close().await;
        schema.drop().await;
    });
}

/// The touch a read leaves is stored when the store closes, and when it
/// is dropped, before its flush interval is over: no touch is lost to an
/// orderly stop.
#[test]
fn pending_touches_are_stored_when_the_store_closes_or_drops() {
    let Some(schema) = Schema::fresh("touches_at_close") else {
        return;
    };
    run(async move {
        let p = path("ttl/closing");
        let (clock, store) = open_sliding(&schema, &[&p]).await;
        let pool = PgPool::connect(&schema.url).await.expect("connect");

        clock.advance(Duration::from_secs(6));
        read_each(&store, &[&p]).await;
        store.close().await;
        assert_eq!(
            stored_access(&pool, &schema, &p).await,
            clock.now_ms(),
            "stored by close"
        );

        let store = schema.open(clock.clone()).await;
        let mut stored = StoredAccesses::listen(&schema).await;
        clock.advance(Duration::from_secs(6));
        read_each(&store, &[&p]).await;
        drop(store);
        stored.wait(&p, clock.now_ms()).await;
        pool.close().await;
        schema.drop().await;
    });
}

/// Regression: the flush of TTL touches locked the rows of all its streams
/// in one UPDATE and waited for each, so a transaction that held one of
/// them (a writer, a projection host's `Commit::transaction`) stalled the
/// background flush; had it then waited for a row the flush had already
/// locked, PostgreSQL would have broken the deadlock after
/// `deadlock_timeout`, perhaps by aborting the caller's transaction. The
/// flush now skips the rows another transaction holds: it never waits,
/// stores the other touches, and keeps the skipped ones for the next flush.
#[test]
fn a_flush_skips_the_stream_rows_another_transaction_holds() {
    let Some(schema) = Schema::fresh("touches_skip_locked") else {
        return;
    };
    run(async move {
        let (free, held) = (path("ttl/free"), path("ttl/held"));
        let (clock, store) = open_sliding(&schema, &[&free, &held]).await;
        let created = clock.now_ms();
        let pool = PgPool::connect(&schema.url).await.expect("connect");
        let lock_row = format!(
            r#"SELECT id FROM "{}".streams WHERE path = $1 FOR UPDATE"#,
            schema.name
        );

        let mut stored = StoredAccesses::listen(&schema).await;

        // Another session's transaction holds `held`'s row, as a host's
        // transaction that appended to it would, from before the reads,
        // so no flush can store `held`'s touch first.
        let mut other = pool.begin().await.expect("begin");
        let other_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *other)
            .await
            .expect("the other session's pid");
        sqlx::query(AssertSqlSafe(lock_row.clone()))
            .bind(held.as_str())
            .fetch_one(&mut *other)
            .await
            .expect("lock the held stream's row");
        clock.advance(Duration::from_secs(3));
        read_each(&store, &[&free, &held]).await;
        let read_at = clock.now_ms();

        // The store's flusher runs every second. A flush that waited for
        // the held row would store nothing (one statement) until the other
        // transaction ends.
        stored.wait(&free, read_at).await;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
        )
        .bind(other_pid)
        .fetch_one(&pool)
        .await
        .expect("the sessions waiting for the other transaction");
        assert_eq!(waiting, 0, "no flush waits for the held row");
        assert_eq!(
            stored_access(&pool, &schema, &held).await,
            created,
            "the held stream's touch is not stored under the other's lock"
        );

        // The other transaction now takes the free stream's row too: the
        // flush holds none, so it neither waits nor deadlocks.
        tokio::time::timeout(
            Duration::from_millis(500),
            sqlx::query(AssertSqlSafe(lock_row))
                .bind(free.as_str())
                .fetch_one(&mut *other),
        )
        .await
        .expect("the other transaction does not wait for a flush")
        .expect("the other transaction is not aborted");
        other.commit().await.expect("the other transaction commits");

        // The skipped touch stayed pending: the next flush (closing's)
        // stores it, promptly.
        tokio::time::timeout(Duration::from_millis(500), store.close())
            .await
            .expect("closing's flush returns promptly");
        assert_eq!(
            stored_access(&pool, &schema, &held).await,
            read_at,
            "the held stream's touch is stored once the other transaction committed"
        );
        pool.close().await;
        schema.drop().await;
    });
}
