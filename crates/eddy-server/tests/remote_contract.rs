//! The `Storage` contract on [`RemoteStorage`]: the very cases every
//! backend of `eddy-streams` runs, here against an in-process `eddy serve`
//! over real HTTP, once on a memory store and once on SQLite.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use eddy_server::{RemoteStorage, Server, ServerConfig};
use eddy_streams::{ManualClock, MemoryStorage, SqliteOptions, SqliteStorage, Storage};

#[path = "../../eddy-streams/tests/contract/cases.rs"]
// The sweep cases are not run here (see every_sweeping_case).
#[allow(dead_code, unused_macros, unused_imports)]
mod cases;

type Test = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `case` through a remote client against a fresh server on each
/// backend; the server's store reads the time from the clock the case gets.
fn over_http(name: &str, case: impl Fn(Arc<dyn Storage>, Arc<ManualClock>) -> Test) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::starting_now());
        let sqlite = SqliteOptions {
            clock: clock.clone(),
            max_producers_per_stream: cases::MAX_PRODUCERS,
            limits: cases::LIMITS,
            ..SqliteOptions::default()
        };
        let backends: Vec<(&str, Arc<dyn Storage>)> = vec![
            (
                "memory",
                Arc::new(
                    MemoryStorage::new()
                        .with_clock(clock.clone())
                        .with_limits(cases::LIMITS)
                        .with_max_producers_per_stream(cases::MAX_PRODUCERS),
                ),
            ),
            (
                "sqlite",
                Arc::new(SqliteStorage::open_with(dir.path(), sqlite).expect("open sqlite")),
            ),
        ];
        for (backend, store) in backends {
            eprintln!("contract case `{name}` over HTTP on {backend}");
            let config = ServerConfig {
                long_poll_timeout: std::time::Duration::from_millis(300),
                // One byte over the store's limit reaches the store and
                // fails there, like on the other backends.
                max_body_bytes: eddy_streams::DEFAULT_MAX_APPEND_BYTES + 1024,
                ..ServerConfig::default()
            };
            let server = Server::bind(([127, 0, 0, 1], 0).into(), store, config)
                .await
                .expect("bind")
                .spawn();
            let remote = RemoteStorage::new(&server.url()).expect("client");
            case(Arc::new(remote), clock.clone()).await;
            server.stop().await.expect("stop");
        }
    });
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                over_http(stringify!($name), |store, _| Box::pin(cases::$name(store)));
            }
        )*
    };
}

macro_rules! clocked_contract {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                over_http(stringify!($name), |store, clock| Box::pin(cases::$name(store, clock)));
            }
        )*
    };
}

cases::every_case!(contract);
cases::every_clocked_case!(clocked_contract);
