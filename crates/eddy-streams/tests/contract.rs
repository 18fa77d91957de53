//! The `Storage` contract: every backend runs every case here.
//!
//! A backend joins the suite with one line in [`backends`]; each case is an
//! `async fn(Arc<dyn Storage>)` (or, for expiry, also given the store's
//! [`ManualClock`]) so no case can depend on a backend's type.
//! The case bodies live in `contract/cases.rs` so that other crates' harnesses
//! (the remote HTTP client) run the very same cases.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use eddy_streams::{ManualClock, MemoryStorage, SqliteOptions, SqliteStorage, Storage};

mod cases;
mod snapshots;

type Test = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `case` on a fresh store of every backend, printing which ran; each
/// store reads the time from the clock the case gets.
pub fn on_every_backend(name: &str, case: impl Fn(Arc<dyn Storage>, Arc<ManualClock>) -> Test) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (backend, make) in backends() {
        eprintln!("contract case `{name}` on {backend}");
        let clock = Arc::new(ManualClock::starting_now());
        let dir = tempfile::tempdir().expect("tempdir");
        let store = make(dir.path(), Arc::clone(&clock));
        runtime.block_on(case(store, clock));
    }
}

type MakeStore = fn(&std::path::Path, Arc<ManualClock>) -> Arc<dyn Storage>;

fn backends() -> Vec<(&'static str, MakeStore)> {
    vec![
        ("memory", |_, clock| {
            let store = MemoryStorage::new()
                .with_clock(clock)
                .with_limits(cases::LIMITS);
            Arc::new(store.with_max_producers_per_stream(cases::MAX_PRODUCERS))
        }),
        ("sqlite", |dir, clock| {
            let options = SqliteOptions {
                clock,
                max_producers_per_stream: cases::MAX_PRODUCERS,
                limits: cases::LIMITS,
                ..SqliteOptions::default()
            };
            Arc::new(SqliteStorage::open_with(dir, options).expect("open sqlite"))
        }),
    ]
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_every_backend(stringify!($name), |store, _| Box::pin(cases::$name(store)));
            }
        )*
    };
}

macro_rules! snapshot_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_every_backend(stringify!($name), |store, _| Box::pin(snapshots::$name(store)));
            }
        )*
    };
}

macro_rules! clocked_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_every_backend(stringify!($name), |store, clock| Box::pin(cases::$name(store, clock)));
            }
        )*
    };
}

cases::every_case!(contract);
cases::every_clocked_case!(clocked_contract);
cases::every_sweeping_case!(clocked_contract);
cases::every_producer_sweeping_case!(clocked_contract);
cases::every_retention_case!(clocked_contract);
cases::every_compaction_case!(clocked_contract);
snapshots::every_snapshot_case!(snapshot_contract);

/// Two SQLite stores on one file, as two processes would open it, share
/// their documents.
#[test]
fn documents_are_shared_by_two_sqlite_stores_on_one_file() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let open =
        || -> Arc<dyn Storage> { Arc::new(SqliteStorage::open(dir.path()).expect("open sqlite")) };
    let (a, b) = (open(), open());
    runtime.block_on(cases::documents_are_shared_by_stores_on_one_database(a, b));
}

/// Every case again on PostgreSQL, each on a schema of its own.
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use eddy_streams::{ManualClock, PgOptions, PgStorage, Storage};

    use super::{cases, snapshots, Test};
    use crate::postgres::{run, Schema};

    fn on_postgres(name: &str, case: impl FnOnce(Arc<dyn Storage>, Arc<ManualClock>) -> Test) {
        let Some(schema) = Schema::fresh(name) else {
            return;
        };
        run(async move {
            let clock = Arc::new(ManualClock::starting_now());
            let options = PgOptions {
                clock: clock.clone(),
                max_producers_per_stream: cases::MAX_PRODUCERS,
                limits: cases::LIMITS,
                ..schema.options()
            };
            let store = PgStorage::open(options)
                .await
                .expect("open the PostgreSQL store");
            case(Arc::new(store), clock).await;
            schema.drop().await;
        });
    }

    macro_rules! pg_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_postgres(stringify!($name), |store, _| Box::pin(cases::$name(store)));
                }
            )*
        };
    }

    macro_rules! pg_clocked_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_postgres(stringify!($name), |store, clock| Box::pin(cases::$name(store, clock)));
                }
            )*
        };
    }

    macro_rules! pg_snapshot_contract {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_postgres(stringify!($name), |store, _| Box::pin(snapshots::$name(store)));
                }
            )*
        };
    }

    cases::every_case!(pg_contract);
    cases::every_clocked_case!(pg_clocked_contract);
    cases::every_sweeping_case!(pg_clocked_contract);
    cases::every_producer_sweeping_case!(pg_clocked_contract);
    cases::every_retention_case!(pg_clocked_contract);
    cases::every_compaction_case!(pg_clocked_contract);
    snapshots::every_snapshot_case!(pg_snapshot_contract);

    /// Two stores on one schema, as two processes would open it, share
    /// their documents.
    #[test]
    fn documents_are_shared_by_two_stores_on_one_schema() {
        let Some(schema) = Schema::fresh("shared_documents") else {
            return;
        };
        run(async move {
            let a = PgStorage::open(schema.options()).await.expect("open a");
            let b = PgStorage::open(schema.options()).await.expect("open b");
            cases::documents_are_shared_by_stores_on_one_database(Arc::new(a), Arc::new(b)).await;
            schema.drop().await;
        });
    }
}
