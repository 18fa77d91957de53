//! PostgreSQL: the contract suite's harness for it, and what only it has
//! (several stores, or processes, on one database; its migrations; its
//! transactions with SQL of the caller's own).
//!
//! Every case runs on a schema of its own in the database at
//! `DATABASE_URL` (`scripts/test.sh` starts a throwaway cluster and sets
//! it) and drops the schema afterwards. Without `DATABASE_URL` the cases
//! say they were skipped, unless `EDDY_REQUIRE_POSTGRES` is set (the test
//! script sets it), which makes a missing database a failure.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use eddy_streams::sqlx::{self, Connection, Executor};
use eddy_streams::{Clock, PgOptions, PgStorage};

mod group;
mod processes;
mod proxy;
mod round_trips;
mod store;
mod touches;

/// The database the PostgreSQL cases use, if one is given.
pub fn database_url() -> Option<String> {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A schema of its own for one case.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    /// A schema name not used by any other case or test process, or `None`
    /// (with a note) when no database is given.
    pub fn fresh(case: &str) -> Option<Schema> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let Some(url) = database_url() else {
            // The test script requires a database: a skip there is a failure.
            let required = std::env::var_os("EDDY_REQUIRE_POSTGRES").is_some();
            assert!(!required, "`{case}`: DATABASE_URL is not set");
            eprintln!("`{case}` on postgres: skipped, DATABASE_URL is not set");
            return None;
        };
        eprintln!("`{case}` on postgres");
        let name = format!(
            "t_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Some(Schema { url, name })
    }

    /// The options of a store on this schema.
    pub fn options(&self) -> PgOptions {
        PgOptions::new(&self.url).with_schema(&self.name)
    }

    /// Opens a store on this schema reading time from `clock`.
    pub async fn open(&self, clock: Arc<dyn Clock>) -> PgStorage {
        let options = PgOptions {
            clock,
            ..self.options()
        };
        PgStorage::open(options)
            .await
            .expect("open the PostgreSQL store")
    }

    /// Runs SQL on the database, outside any store.
    pub async fn execute(&self, sql: &str) {
        let pool = sqlx::PgPool::connect(&self.url).await.expect("connect");
        pool.execute(sqlx::AssertSqlSafe(sql.to_owned()))
            .await
            .expect("execute");
        pool.close().await;
    }

    /// Removes the schema with everything in it.
    pub async fn drop(self) {
        self.execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
            .await;
    }
}

/// Runs `case` on a fresh multi-threaded runtime.
pub fn run<F: std::future::Future<Output = ()>>(case: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(case);
}

/// Every stream row of a schema, locked by a session of its own: a group
/// commit waits for it, and the appends that come meanwhile queue for the
/// next group.
pub struct RowLock {
    holder: sqlx::PgConnection,
    watcher: sqlx::PgConnection,
    /// How the schema's tables appear in a statement's text.
    tables: String,
}

impl RowLock {
    /// Locks every stream row of `schema` until [`release`](Self::release).
    pub async fn hold(schema: &Schema) -> RowLock {
        let mut holder = sqlx::PgConnection::connect(&schema.url)
            .await
            .expect("connect");
        holder.execute("BEGIN").await.expect("begin");
        holder
            .execute(sqlx::AssertSqlSafe(format!(
                "SELECT id FROM \"{}\".streams FOR UPDATE",
                schema.name
            )))
            .await
            .expect("lock");
        let watcher = sqlx::PgConnection::connect(&schema.url)
            .await
            .expect("connect");
        RowLock {
            holder,
            watcher,
            tables: format!("%\"{}\".%", schema.name),
        }
    }

    /// Polls `call` until a statement on the schema waits for a lock: a
    /// signal from the server's own view of its sessions, not a sleep.
    /// Panics if `call` finishes first.
    pub async fn until_waited_on<F>(&mut self, call: &mut std::pin::Pin<&mut F>)
    where
        F: std::future::Future,
        F::Output: std::fmt::Debug,
    {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            tokio::select! {
                done = call.as_mut() => panic!("the call did not wait for the lock: {done:?}"),
                () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
            }
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
            )
            .bind(&self.tables)
            .fetch_one(&mut self.watcher)
            .await
            .expect("activity");
            if waiting > 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no statement waits for the lock"
            );
        }
    }

    /// Ends the locking session's transaction.
    pub async fn release(mut self) {
        self.holder.execute("ROLLBACK").await.expect("release");
    }
}
