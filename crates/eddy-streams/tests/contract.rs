//! The `Storage` contract: every backend runs every case here.
//!
//! A backend joins the suite with one line in [`backends`]; each case is an
//! `async fn(Arc<dyn Storage>)` so no case can depend on a backend's type.
//! The case bodies live in `contract/cases.rs` so that other crates' harnesses
//! (the remote HTTP client) run the very same cases.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use eddy_streams::{MemoryStorage, SqliteStorage, Storage};

mod cases;

type Case = fn(Arc<dyn Storage>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `case` on a fresh store of every backend, printing which ran.
pub fn on_every_backend(name: &str, case: Case) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (backend, store, _dir) in backends() {
        eprintln!("contract case `{name}` on {backend}");
        runtime.block_on(case(store));
    }
}

fn backends() -> Vec<(&'static str, Arc<dyn Storage>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStorage::open(dir.path()).expect("open sqlite");
    vec![
        ("memory", Arc::new(MemoryStorage::new()), None),
        ("sqlite", Arc::new(sqlite), Some(dir)),
    ]
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_every_backend(stringify!($name), |store| Box::pin(cases::$name(store)));
            }
        )*
    };
}

cases::every_case!(contract);
