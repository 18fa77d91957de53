//! Retention gives space back: on SQLite the dropped rows' pages go to the
//! file's free list and later appends reuse them (the file stops
//! growing); on PostgreSQL the rows are deleted and, after a `VACUUM`,
//! later appends reuse their space (the table stops growing). Each test
//! prints its figures.

use eddy_streams::{Append, Payload, Retention, Storage, StreamConfig, StreamPath};

/// Messages per append, and appends per fill.
const BATCH: usize = 100;
const BATCHES: usize = 50;

/// One append of [`BATCH`] JSON strings of about 1 KB.
fn batch(round: usize) -> Append {
    let text = "x".repeat(1000);
    let messages: Vec<String> = (0..BATCH)
        .map(|n| format!("\"{round}-{n}-{text}\""))
        .collect();
    Append::body(format!("[{}]", messages.join(",")))
}

/// Appends [`BATCHES`] batches, then sweeps until nothing is due.
async fn fill_and_sweep(store: &dyn Storage, path: &StreamPath, round: usize) {
    for n in 0..BATCHES {
        store
            .append(path, batch(round * BATCHES + n))
            .await
            .expect("append");
    }
    while store.sweep(64).await.expect("sweep") > 0 {}
}

fn kept_policy() -> Retention {
    Retention::NONE.with_messages(BATCH as u64)
}

async fn create(store: &dyn Storage, path: &StreamPath) {
    let config = StreamConfig::json().with_retention(kept_policy());
    store
        .create(path, config, Payload::empty())
        .await
        .expect("create");
}

/// The SQLite file's pages: in use and free.
fn pages(dir: &std::path::Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(dir.join(eddy_streams::DATABASE_FILE)).expect("open");
    let count = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("page_count");
    let free = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .expect("freelist_count");
    (count, free)
}

#[test]
fn sqlite_reuses_the_pages_retention_frees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = eddy_streams::SqliteStorage::open(dir.path()).expect("open");
        let path = StreamPath::new("space/sqlite").expect("path");
        create(&store, &path).await;
        let (empty, _) = pages(dir.path());
        fill_and_sweep(&store, &path, 0).await;
        let (after_first, free_first) = pages(dir.path());
        let info = store.head(&path).await.expect("head");
        assert_eq!(info.earliest.position(), (BATCH * (BATCHES - 1)) as u64);
        for round in 1..4 {
            fill_and_sweep(&store, &path, round).await;
        }
        let (after_four, free_four) = pages(dir.path());
        eprintln!(
            "sqlite pages (4 KiB): empty {empty}; after 5 MB appended and all but 100 KB \
             dropped: {after_first} ({free_first} free); after 20 MB appended in all: \
             {after_four} ({free_four} free)"
        );
        assert!(
            free_first * 2 > after_first,
            "the dropped rows' pages are free: {free_first} of {after_first}"
        );
        // Without retention the file would hold 20 MB (about 5000 pages);
        // with it, later fills reuse the freed pages.
        assert!(
            after_four < after_first + after_first / 5,
            "the file kept growing: {after_first} -> {after_four} pages"
        );
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_reuses_the_space_retention_frees_after_vacuum() {
    use sqlx::Row;

    use crate::postgres::{run, Schema};
    let Some(schema) = Schema::fresh("retention_space") else {
        return;
    };
    run(async move {
        let store = eddy_streams::PgStorage::open(schema.options())
            .await
            .expect("open");
        let pool = sqlx::PgPool::connect(&schema.url).await.expect("connect");
        let table = format!("\"{}\".messages", schema.name);
        // The size after a VACUUM that removed every dead row. Another
        // session's open transaction on the shared server (other tests)
        // holds dead rows back, so VACUUM runs again until none is left.
        let size = |pool: sqlx::PgPool, table: String| async move {
            let vacuum = format!("VACUUM {table}");
            let dead = format!(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = '{table}'::regclass"
            );
            for _ in 0..600 {
                sqlx::query(sqlx::AssertSqlSafe(vacuum.clone()))
                    .execute(&pool)
                    .await
                    .expect("vacuum");
                let left: i64 = sqlx::query(sqlx::AssertSqlSafe(dead.clone()))
                    .fetch_one(&pool)
                    .await
                    .expect("dead rows")
                    .get(0);
                if left == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let sql = format!("SELECT pg_total_relation_size('{table}')::bigint");
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .expect("size")
                .get::<i64, _>(0)
        };
        let path = StreamPath::new("space/postgres").expect("path");
        create(&store, &path).await;
        fill_and_sweep(&store, &path, 0).await;
        let after_first = size(pool.clone(), table.clone()).await;
        let rows: i64 = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&pool)
            .await
            .expect("count")
            .get(0);
        assert_eq!(rows, BATCH as i64, "the dropped rows are deleted");
        for round in 1..4 {
            fill_and_sweep(&store, &path, round).await;
            size(pool.clone(), table.clone()).await;
        }
        let after_four = size(pool.clone(), table.clone()).await;
        let full = format!("VACUUM FULL {table}");
        sqlx::query(sqlx::AssertSqlSafe(full))
            .execute(&pool)
            .await
            .expect("vacuum full");
        let compacted = size(pool.clone(), table.clone()).await;
        eprintln!(
            "postgres messages table with indexes: after 5 MB appended and all but 100 KB \
             dropped, then VACUUM: {after_first} bytes; after 20 MB appended in all, with a \
             VACUUM after each 5 MB: {after_four} bytes; after VACUUM FULL: {compacted} bytes"
        );
        assert!(
            after_four < after_first + after_first / 2,
            "the table kept growing: {after_first} -> {after_four} bytes"
        );
        assert!(compacted * 4 < after_first, "{compacted} vs {after_first}");
        pool.close().await;
        schema.drop().await;
    });
}
