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

use eddy_streams::sqlx::{self, Executor};
use eddy_streams::{Clock, PgOptions, PgStorage};

mod processes;
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
