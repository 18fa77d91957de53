//! Checkpoints: the `CheckpointStore` contract on memory, SQLite, the
//! remote client and (feature `postgres`) PostgreSQL, on the SQL hosts'
//! checkpoint tables, and what
//! `StreamCheckpoints` adds (bounded slots, every fault around a slot
//! change, a checkpoint that vanished).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use eddy_projection::{
    CheckpointStore, Host, RunOptions, SqliteCheckpoints, Status, StreamCheckpoints, Token,
};
use eddy_streams::{MemoryStorage, SqliteStorage, Storage};

use crate::run::seed;
use crate::support::{Faulty, Op, When};

#[path = "contract/checkpoints.rs"]
mod contract;

type StoreCase = fn(Arc<dyn CheckpointStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
type Run = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `case` on a fresh memory store, a fresh SQLite store and a remote
/// client of a fresh in-process `eddy serve` (over SQLite).
fn on_every_storage(name: &str, case: impl Fn(Arc<dyn Storage>) -> Run) {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        eprintln!("`{name}` on memory");
        case(Arc::new(MemoryStorage::new())).await;
        eprintln!("`{name}` on sqlite");
        let local = SqliteStorage::open(dir.path().join("local")).expect("open");
        case(Arc::new(local)).await;
        eprintln!("`{name}` on the remote client");
        let (remote, server) = crate::support::remote(&dir.path().join("served")).await;
        case(remote).await;
        server.stop().await.expect("stop");
    });
}

/// Runs a contract case on `StreamCheckpoints` over every storage, with
/// the default slots and with slots of two records (a slot change every
/// other save).
fn on_every_checkpoint_store(name: &str, case: StoreCase) {
    for records in [eddy_projection::SLOT_RECORDS, 2] {
        eprintln!("slots of {records} records");
        on_every_storage(name, |storage| {
            case(Arc::new(
                StreamCheckpoints::new(storage).with_slot_limits(records, 1 << 20),
            ))
        });
    }
}

crate::checkpoint_contract!(on_every_checkpoint_store);

/// The contract on `SqliteCheckpoints`, the table a `SqliteHost` saves in
/// its transactions.
fn on_sqlite_table(name: &str, case: StoreCase) {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        eprintln!("`{name}` on the SQLite checkpoint table");
        let store = Arc::new(SqliteStorage::open(dir.path()).expect("open"));
        case(Arc::new(SqliteCheckpoints::new(store))).await;
    });
}

mod sqlite_table {
    use super::contract;
    crate::checkpoint_contract!(super::on_sqlite_table);
}

/// The streams and records a binding's checkpoint occupies.
async fn footprint(storage: &dyn Storage, base: &str) -> (usize, u64, u64) {
    let streams = storage.list(&format!("{base}/")).await.expect("list");
    let records = streams.iter().map(|s| s.tail.position()).sum();
    let bytes = streams.iter().map(|s| s.bytes).sum();
    (streams.len(), records, bytes)
}

mod cases {
    use super::*;

    /// A thousand saves leave at most two slots of the configured size.
    pub async fn checkpoint_storage_stays_bounded(storage: Arc<dyn Storage>) {
        let store = StreamCheckpoints::new(storage.clone()).with_slot_limits(16, 1 << 20);
        let key = contract::key("bounded");
        let mut token = Token::NONE;
        let mut record_bytes = 0;
        for n in 1..=1_000 {
            token = store
                .save(&key, token, &contract::checkpoint(n))
                .await
                .expect("save");
            if n % 50 == 0 {
                let (streams, records, bytes) =
                    footprint(storage.as_ref(), key.path.as_str()).await;
                record_bytes = record_bytes.max(bytes / records.max(1));
                assert!(streams <= 2, "{streams} slot streams after {n} saves");
                assert!(records <= 2 * 16, "{records} records after {n} saves");
                assert!(
                    bytes <= 2 * 16 * (record_bytes + 8),
                    "{bytes} bytes after {n} saves"
                );
            }
        }
        let loaded = store.load(&key).await.expect("load");
        assert_eq!(loaded.checkpoint, Some(contract::checkpoint(1_000)));
    }

    /// A checkpoint deleted behind the engine's back is not silently
    /// rebuilt (which would write every output again under a new
    /// generation): runs fail with `checkpoint/vanished` until the binding
    /// is forgotten on purpose.
    pub async fn a_deleted_checkpoint_vanishes_loudly(storage: Arc<dyn Storage>) {
        seed(storage.as_ref(), 0..3).await;
        let host = Host::new(storage.clone());
        let bound = crate::run::total_fold().at(()).expect("bind");
        host.run(&bound, RunOptions::default().with_unit_size(1))
            .await
            .expect("run");
        let base = format!("{}/", bound.checkpoint_path());
        for stream in storage.list(&base).await.expect("list") {
            let path = eddy_streams::StreamPath::new(stream.path).expect("path");
            storage.delete(&path).await.expect("delete");
        }
        for _ in 0..2 {
            let err = host
                .run(&bound, RunOptions::default())
                .await
                .expect_err("vanished");
            assert_eq!(err.code(), "checkpoint/vanished", "{err}");
        }
        assert_eq!(
            host.read(&bound).await.expect_err("vanished").code(),
            "checkpoint/vanished"
        );
        host.forget(&bound).await.expect("forget on purpose");
        let rebuilt = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!(
            (rebuilt.status, rebuilt.state),
            (Status::CaughtUp, Some(3.0))
        );
    }

    /// Every store call of a run of saves across several slot changes,
    /// failed before and after it reaches the store; the writer reloads
    /// and goes on. In the end the last checkpoint is there, each save
    /// counted once, and at most two slots remain.
    pub async fn every_fault_around_slot_changes_recovers(storage: Arc<dyn Storage>) {
        for fail_at in 0..40 {
            for when in [When::Before, When::After] {
                let faulty = Arc::new(Faulty::new(storage.clone()));
                let store = StreamCheckpoints::new(faulty.clone()).with_slot_limits(3, 1 << 20);
                let key = contract::key(&format!("faults-{fail_at}-{when:?}"));
                faulty.fail_nth(None, fail_at, when);
                let mut token = Token::NONE;
                let mut n = 1;
                let mut failures = 0;
                while n <= 10 {
                    match store.save(&key, token, &contract::checkpoint(n)).await {
                        Ok(next) => {
                            token = next;
                            n += 1;
                        }
                        Err(e) => {
                            assert_eq!(e.code(), "storage-failure", "{e}");
                            failures += 1;
                            assert!(failures < 5, "no progress at {fail_at} {when:?}");
                            // A restarted writer: reload and go on from
                            // what is stored.
                            let loaded = store.load(&key).await.expect("reload");
                            let stored = loaded.checkpoint.map_or(0, |c| c.units);
                            assert!(stored == n || stored + 1 == n, "{stored} for save {n}");
                            token = loaded.token;
                            n = stored + 1;
                        }
                    }
                }
                let direct = StreamCheckpoints::new(storage.clone());
                let loaded = direct.load(&key).await.expect("load");
                assert_eq!(loaded.checkpoint, Some(contract::checkpoint(10)));
                assert_eq!(loaded.token.version(), 10, "{fail_at} {when:?}");
                let (streams, _, _) = footprint(storage.as_ref(), key.path.as_str()).await;
                assert!(streams <= 2);
            }
        }
    }
}

/// A reader's load beside a writer whose saves change slot at every
/// save, interleaved by `op` on slot 1 of the reader: the writer moves the
/// checkpoint from slot 1 to slot 0 (deleting slot 1) just before the
/// reader heads (or reads) slot 1, after it found slot 0 empty. The load
/// must find the new slot.
async fn load_during_a_slot_change(storage: Arc<dyn Storage>, op: Op) {
    let key = contract::key(&format!("switching-{op:?}"));
    let writer = StreamCheckpoints::new(storage.clone()).with_slot_limits(2, 1 << 20);
    let mut token = Token::NONE;
    for n in 1..=2 {
        token = writer
            .save(&key, token, &contract::checkpoint(n))
            .await
            .expect("save");
    }
    let faulty = Arc::new(Faulty::new(storage.clone()));
    let slot1 = eddy_streams::StreamPath::new(format!("{}/1", key.path)).expect("path");
    let (moving, moved) = (key.clone(), writer.clone());
    faulty.before(
        op,
        &slot1,
        Box::pin(async move {
            moved
                .save(&moving, token, &contract::checkpoint(3))
                .await
                .expect("save");
        }),
    );
    let reader = StreamCheckpoints::new(faulty).with_slot_limits(2, 1 << 20);
    let loaded = reader.load(&key).await.expect("a load beside a writer");
    assert_eq!(loaded.checkpoint, Some(contract::checkpoint(3)));
}

/// Issue 26: a load that found slot 0 gone and then slot 1 deleted by the
/// writer's slot change failed with `checkpoint/vanished` (`read`,
/// `current`, `decide` and the console beside a running writer).
#[test]
fn a_load_during_a_slot_change_finds_the_new_slot() {
    for op in [Op::Head, Op::Read] {
        on_every_storage(
            "a_load_during_a_slot_change_finds_the_new_slot",
            |storage| Box::pin(load_during_a_slot_change(storage, op)),
        );
    }
}

macro_rules! on_storages {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                on_every_storage(stringify!($name), |storage| Box::pin(cases::$name(storage)));
            }
        )*
    };
}

on_storages!(
    checkpoint_storage_stays_bounded,
    a_deleted_checkpoint_vanishes_loudly,
    every_fault_around_slot_changes_recovers,
);

/// `eddy serve` reserves the prefix the checkpoints live under.
#[test]
fn checkpoints_live_under_the_prefix_eddy_serve_reserves() {
    assert_eq!(
        eddy_projection::RESERVED_PREFIX,
        eddy_server::RESERVED_STREAM_PREFIX
    );
    assert!(eddy_projection::CHECKPOINT_PREFIX.starts_with(eddy_projection::RESERVED_PREFIX));
}

/// The same cases on PostgreSQL (the database at `DATABASE_URL`), each on a
/// schema of its own.
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use eddy_projection::{PgCheckpoints, StreamCheckpoints};
    use eddy_streams::{PgOptions, PgStorage};

    use super::{cases, contract, Run, StoreCase};

    /// Runs `case` on a fresh PostgreSQL store; says so, or that it was
    /// skipped (a failure when `EDDY_REQUIRE_POSTGRES` is set).
    fn on_postgres(name: &str, case: impl FnOnce(Arc<PgStorage>) -> Run) {
        let Some(url) = crate::support::postgres_url(name) else {
            return;
        };
        eprintln!("`{name}` on postgres");
        let schema = crate::support::fresh_schema("projection");
        crate::support::runtime().block_on(async {
            let options = PgOptions::new(&url).with_schema(&schema);
            let store = PgStorage::open(options).await.expect("open postgres");
            case(Arc::new(store)).await;
            crate::support::drop_pg_schema(&url, &schema).await;
        });
    }

    fn on_checkpoint_store(name: &str, case: StoreCase) {
        for records in [eddy_projection::SLOT_RECORDS, 2] {
            eprintln!("slots of {records} records");
            on_postgres(name, |storage| {
                case(Arc::new(
                    StreamCheckpoints::new(storage).with_slot_limits(records, 1 << 20),
                ))
            });
        }
    }

    crate::checkpoint_contract!(on_checkpoint_store);

    /// The contract on `PgCheckpoints`, the table a `PgHost` saves in its
    /// transactions.
    fn on_checkpoint_table(name: &str, case: StoreCase) {
        on_postgres(name, |store| {
            Box::pin(async move {
                let table = PgCheckpoints::open(&store);
                case(Arc::new(table)).await;
            })
        });
    }

    mod table {
        use super::contract;
        crate::checkpoint_contract!(super::on_checkpoint_table);
    }

    macro_rules! on_postgres {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_postgres(stringify!($name), |storage| Box::pin(cases::$name(storage)));
                }
            )*
        };
    }

    on_postgres!(
        checkpoint_storage_stays_bounded,
        a_deleted_checkpoint_vanishes_loudly,
        every_fault_around_slot_changes_recovers,
    );
}
