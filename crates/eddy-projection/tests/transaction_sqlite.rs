//! `Commit::transaction` on SQLite: the handler's SQL (a
//! `rusqlite::Transaction`) and the checkpoint commit together: a failure
//! between the SQL and the checkpoint, a worker killed mid-transaction, a
//! second worker in another process, declared outputs written in the same
//! transaction (and refused on another owner), a panicking handler. (The
//! order-rows example is `examples::order_rows_runs`.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use eddy_projection::{
    AttachOptions, Commit, Declare, FollowOptions, RunOptions, SqliteHost, SqliteTx, Status,
    TransactionProjection,
};
use eddy_streams::rusqlite::Transaction;
use eddy_streams::{Append, JsonStream, MarkOwner, ReadFrom, SqliteStorage, Storage, StreamError};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::support::child;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount: i64,
}

fn orders() -> JsonStream<Order> {
    JsonStream::new("Shop/Orders", "orders").expect("stream")
}

/// Runs `sql` in a transaction of its own on `store`'s writer.
async fn execute(store: &SqliteStorage, sql: &str) {
    let sql = sql.to_owned();
    store
        .transaction(move |tx| {
            tx.sql().execute_batch(&sql)?;
            Ok::<_, StreamError>(())
        })
        .await
        .expect("execute");
}

/// The store in `dir`, with the application's `order_totals` table.
async fn open(dir: &Path) -> Arc<SqliteStorage> {
    let store = Arc::new(SqliteStorage::open(dir).expect("open"));
    execute(
        &store,
        "CREATE TABLE IF NOT EXISTS order_totals (order_id TEXT NOT NULL, total INTEGER NOT NULL)",
    )
    .await;
    orders().create(store.as_ref(), &()).await.expect("create");
    store
}

async fn append(store: &SqliteStorage, items: &[(&str, i64)]) {
    let items: Vec<Order> = items
        .iter()
        .map(|(id, amount)| Order {
            order_id: (*id).into(),
            amount: *amount,
        })
        .collect();
    orders().append(store, &(), &items).await.expect("append");
}

/// The rows of `order_totals`, sorted.
async fn rows(store: &SqliteStorage) -> Vec<(String, i64)> {
    store
        .transaction(|tx| {
            let mut stmt = tx
                .sql()
                .prepare("SELECT order_id, total FROM order_totals ORDER BY order_id, total")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok::<_, StreamError>(rows.collect::<Result<_, _>>()?)
        })
        .await
        .expect("select")
}

fn owned(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
    rows.iter().map(|(id, t)| ((*id).to_owned(), *t)).collect()
}

fn insert(tx: &Transaction<'_>, order: &Order) -> Result<(), eddy_streams::rusqlite::Error> {
    tx.execute(
        "INSERT INTO order_totals (order_id, total) VALUES (?1, ?2)",
        (&order.order_id, order.amount),
    )
    .map(drop)
}

/// The spec's order-rows projection on SQLite.
fn order_rows() -> TransactionProjection<(), SqliteTx> {
    order_rows_as("order-rows", false)
}

/// Order rows under the id `id`; with `output`, each order is also
/// written to the declared output `totals`.
fn order_rows_as(id: &str, output: bool) -> TransactionProjection<(), SqliteTx> {
    let declare = Declare::<()>::new(id);
    let input = declare.input("orders", &orders());
    let output = output.then(|| declare.output("totals", &totals()));
    declare
        .process_sqlite(Commit::transaction(), move |tx: &Transaction<'_>, work| {
            for order in work.batch.items(input) {
                insert(tx, order)?;
                if let Some(output) = output {
                    work.emits.push(output, order);
                }
            }
            Ok(())
        })
        .expect("declare")
}

/// A failure after the handler's SQL and its items for the declared
/// output, before the checkpoint (a trigger refuses the checkpoint's row),
/// rolls back all three: no row, no output item, no checkpoint; the next
/// run writes each row and each item once.
#[test]
fn a_failure_between_the_sql_and_the_checkpoint_leaves_neither() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        let host = SqliteHost::new(Arc::clone(&store));
        let bound = order_rows_as("order-rows-out", true).at(()).expect("bind");
        append(&store, &[("a", 1), ("b", 2)]).await;
        execute(
            &store,
            "CREATE TRIGGER refuse BEFORE INSERT ON projection_checkpoints \
             BEGIN SELECT RAISE(ABORT, 'injected checkpoint failure'); END;",
        )
        .await;
        let failed = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("the checkpoint is refused");
        let mut chain = failed.to_string();
        let mut source = std::error::Error::source(&failed);
        while let Some(cause) = source {
            chain.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        assert!(chain.contains("injected checkpoint failure"), "{chain}");
        assert_eq!(rows(&store).await, Vec::new(), "the rows rolled back");
        assert_eq!(totals_items(&store).await, Vec::new(), "no output item");
        let read = host
            .host()
            .checkpoints()
            .load(bound.bound().checkpoint_key())
            .await;
        assert_eq!(read.expect("load").checkpoint, None, "no checkpoint");
        execute(&store, "DROP TRIGGER refuse").await;
        let progress = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!((progress.units, progress.items), (1, 2));
        append(&store, &[("c", 3)]).await;
        host.run(&bound, RunOptions::default()).await.expect("run");
        let again = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!(again.units, 0, "nothing left to do");
        let expected = owned(&[("a", 1), ("b", 2), ("c", 3)]);
        assert_eq!(rows(&store).await, expected);
        let items: Vec<(String, i64)> = totals_items(&store)
            .await
            .into_iter()
            .map(|o| (o.order_id, o.amount))
            .collect();
        assert_eq!(items, expected, "each item once");
    });
}

fn totals() -> JsonStream<Order> {
    JsonStream::new("Shop/Totals", "totals").expect("stream")
}

/// The items of the `totals` output (none when it does not exist yet).
async fn totals_items(store: &SqliteStorage) -> Vec<Order> {
    match totals().read(store, &(), ReadFrom::Beginning).await {
        Ok(chunk) => chunk.items,
        Err(StreamError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("read the output: {e}"),
    }
}

/// An output declared on another owner cannot join the host's
/// transaction: binding the projection refuses it.
#[test]
fn a_foreign_output_is_refused_when_the_projection_is_bound() {
    let declare = Declare::<()>::new("order-rows-foreign");
    let input = declare.input("orders", &orders());
    let output = declare.foreign_output("totals", &totals());
    let projection = declare
        .process_sqlite(Commit::transaction(), move |_tx: &Transaction<'_>, work| {
            work.emits.extend(output, work.batch.items(input));
            Ok(())
        })
        .expect("declare");
    let refused = projection.at(()).expect_err("a foreign output is refused");
    assert_eq!(refused.code(), "pin/invalid-output");
    assert!(refused.to_string().contains("another owner"), "{refused}");
}

/// A handler that panics on the store's writer thread fails its unit with
/// `handler/failed` and rolls it back; the writer goes on, and the next
/// run commits.
#[test]
fn a_panicking_handler_fails_its_unit_and_the_writer_goes_on() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        let host = SqliteHost::new(Arc::clone(&store));
        append(&store, &[("a", 1)]).await;
        let panic = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let panic_in = Arc::clone(&panic);
        let declare = Declare::<()>::new("panicky-rows");
        let input = declare.input("orders", &orders());
        let projection = declare
            .process_sqlite(Commit::transaction(), move |tx: &Transaction<'_>, work| {
                for order in work.batch.items(input) {
                    insert(tx, order)?;
                }
                if panic_in.load(std::sync::atomic::Ordering::SeqCst) {
                    panic!("the handler panics after its inserts");
                }
                Ok(())
            })
            .expect("declare");
        let bound = projection.at(()).expect("bind");
        let failed = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("the panic fails the unit");
        assert_eq!(failed.code(), "handler/failed");
        assert!(failed.to_string().contains("panicked"), "{failed}");
        assert_eq!(rows(&store).await, Vec::new(), "the inserts rolled back");
        // The writer thread is alive: plain appends and the next run commit.
        append(&store, &[("b", 2)]).await;
        panic.store(false, std::sync::atomic::Ordering::SeqCst);
        let progress = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!(progress.items, 2);
        assert_eq!(rows(&store).await, owned(&[("a", 1), ("b", 2)]));
    });
}

/// A handler's failure rolls back the SQL it ran; `prepare` runs outside
/// the transaction and its result reaches the handler.
#[test]
fn a_failing_handler_rolls_back_its_sql_and_prepare_feeds_it() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        let host = SqliteHost::new(Arc::clone(&store));
        append(&store, &[("a", 1), ("b", 2)]).await;
        let declare = Declare::<()>::new("scaled-rows");
        let input = declare.input("orders", &orders());
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let fail_in = Arc::clone(&fail);
        let projection = declare
            .process_sqlite_prepared(
                Commit::transaction(),
                async |batch, _unit| Ok(10 * batch.len() as i64),
                move |tx: &Transaction<'_>, work| {
                    for order in work.batch.items(input) {
                        let scaled = Order {
                            amount: order.amount * work.prepared,
                            ..order.clone()
                        };
                        insert(tx, &scaled)?;
                    }
                    if fail_in.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err("the handler fails after its inserts".into());
                    }
                    Ok(())
                },
            )
            .expect("declare");
        let bound = projection.at(()).expect("bind");
        let failed = host.run(&bound, RunOptions::default()).await;
        assert_eq!(failed.expect_err("fails").code(), "handler/failed");
        assert_eq!(rows(&store).await, Vec::new(), "the inserts rolled back");
        fail.store(false, std::sync::atomic::Ordering::SeqCst);
        host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!(rows(&store).await, owned(&[("a", 20), ("b", 40)]));
    });
}

/// `follow` on a transaction projection: the first element after the
/// first cycle, one per cycle that commits, the last once the input is
/// closed; each unit's rows in its transaction.
#[test]
fn a_transaction_projection_follows_live() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        append(&store, &[("a", 1), ("b", 2)]).await;
        let host = SqliteHost::new(Arc::clone(&store));
        let bound = order_rows().at(()).expect("bind");
        let mut follow = host.follow(&bound, FollowOptions::default());
        let first = follow.next().await.expect("first").expect("cycle");
        assert_eq!(
            (first.units, first.items, first.status),
            (1, 2, Status::CaughtUp)
        );
        append(&store, &[("c", 3)]).await;
        let woken = follow.next().await.expect("woken").expect("cycle");
        assert_eq!((woken.units, woken.items), (1, 1));
        assert_eq!(rows(&store).await, owned(&[("a", 1), ("b", 2), ("c", 3)]));
        let input = bound.bound().input_paths()[0].clone();
        store
            .append(&input, Append::close_only())
            .await
            .expect("close");
        let closed = follow.next().await.expect("closed").expect("cycle");
        assert_eq!(closed.status, Status::Closed);
        assert!(follow.next().await.is_none(), "the stream ends");
    });
}

/// What a child worker process does, chosen by `EDDY_TX_SQLITE_CHILD`
/// (its role) and `EDDY_TX_MODE` (its runner).
const CHILD: &str = "EDDY_TX_SQLITE_CHILD";
const MODE: &str = "EDDY_TX_MODE";

/// The runners a child worker uses.
const MODES: [&str; 3] = ["run", "follow", "attach"];

/// Runs the child worker of the process tests; does nothing when run as a
/// plain test. Its role: `hang` stops inside the unit's transaction, rows
/// written, checkpoint not; `wait` stops in `prepare` (outside the
/// transaction, its checkpoint token read) until told to go on. Its mode:
/// `run`, the first element of `follow`, or a durable `attach` to which
/// it appends `("c", 3)` itself (its commit marks the binding and wakes
/// it). It prints `child: committed` or `child: <code> <error>`.
#[test]
#[ignore = "the child process of the process tests"]
fn child_worker() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    let mode = std::env::var(MODE).unwrap_or_else(|_| "run".into());
    let dir = PathBuf::from(std::env::var("EDDY_TX_DIR").expect("dir"));
    let signal = PathBuf::from(std::env::var("EDDY_TX_SIGNAL").expect("signal"));
    crate::support::runtime().block_on(async {
        let store = Arc::new(SqliteStorage::open(&dir).expect("open"));
        let host = SqliteHost::new(Arc::clone(&store));
        let declare = Declare::<()>::new("order-rows");
        let input = declare.input("orders", &orders());
        let (hang, wait) = (role == "hang", role == "wait");
        let (signal_in, signal_tx) = (signal.clone(), signal.clone());
        let projection = declare
            .process_sqlite_prepared(
                Commit::transaction(),
                async move |_, _| {
                    if wait {
                        std::fs::write(&signal_in, "prepared")?;
                        wait_for(&signal_in.with_extension("go")).await;
                    }
                    Ok(())
                },
                move |tx: &Transaction<'_>, work| {
                    for order in work.batch.items(input) {
                        insert(tx, order)?;
                    }
                    if hang {
                        // The rows are written, the checkpoint is not.
                        std::fs::write(&signal_tx, "in transaction")?;
                        loop {
                            std::thread::park();
                        }
                    }
                    Ok(())
                },
            )
            .expect("declare");
        let bound = projection.at(()).expect("bind");
        let line = match mode.as_str() {
            "follow" => child::first_of(host.follow(&bound, FollowOptions::default())).await,
            "attach" => {
                let options = AttachOptions::default().with_durable();
                let attached = host.attach(&projection, options).expect("attach");
                child::attached_after(&attached, append(&store, &[("c", 3)])).await
            }
            _ => {
                let run = host.run(&bound, RunOptions::default()).await;
                child::said(run.as_ref().map(drop))
            }
        };
        println!("{line}");
    });
}

/// Waits for the file another process writes as its signal; a child that
/// died before writing it fails the test instead of hanging it.
async fn wait_for(path: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no signal {} within two minutes",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn spawn_child(role: &str, mode: &str, dir: &Path, signal: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "transaction_sqlite::child_worker",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, role)
        .env(MODE, mode)
        .env("EDDY_TX_DIR", dir)
        .env("EDDY_TX_SIGNAL", signal)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child worker")
}

/// The orders a child in `mode` leaves to its binding: `a` and `b`, and
/// `c` that an attached child appends itself.
fn expected_rows(mode: &str) -> Vec<(String, i64)> {
    let mut expected = owned(&[("a", 1), ("b", 2)]);
    if mode == "attach" {
        expected.push(("c".into(), 3));
    }
    expected
}

/// Runs the binding on `store` until its rows are `expected`: a run, or
/// for an attached worker, a durable attachment (whose start runs the
/// binding from its mark, with no new commit).
async fn finish(store: &Arc<SqliteStorage>, mode: &str, expected: &[(String, i64)]) {
    let host = SqliteHost::new(Arc::clone(store));
    if mode == "attach" {
        let options = AttachOptions::default().with_durable();
        let attached = host.attach(&order_rows(), options).expect("attach");
        child::until_idle(&attached).await;
    } else {
        host.run(&order_rows().at(()).expect("bind"), RunOptions::default())
            .await
            .expect("run");
    }
    assert_eq!(rows(store).await, expected);
}

/// Killing the worker process in the middle of a unit's transaction
/// (rows written, checkpoint not) leaves the database as it was; the next
/// worker writes each row once. For `run`, `follow` and a durable
/// `attach`, whose mark brings the binding back at restart.
#[test]
fn a_worker_killed_mid_transaction_leaves_the_database_consistent() {
    for mode in MODES {
        eprintln!("mode {mode}");
        crate::support::runtime().block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let data = dir.path().join("data");
            let store = open(&data).await;
            append(&store, &[("a", 1), ("b", 2)]).await;
            let signal = dir.path().join("signal");
            let mut child = spawn_child("hang", mode, &data, &signal);
            wait_for(&signal).await;
            child.kill().expect("SIGKILL the worker");
            child.wait().expect("reap");
            assert_eq!(rows(&store).await, Vec::new(), "nothing committed");
            finish(&store, mode, &expected_rows(mode)).await;
        });
    }
}

/// Two workers on one binding in two processes: the one that commits
/// second is refused by the checkpoint's compare-and-set with
/// `checkpoint/conflict`, and its rows roll back: no row twice. The child
/// runs, follows or is attached.
#[test]
fn a_second_worker_in_another_process_is_refused() {
    for mode in MODES {
        eprintln!("mode {mode}");
        crate::support::runtime().block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let data = dir.path().join("data");
            let store = open(&data).await;
            append(&store, &[("a", 1), ("b", 2)]).await;
            let signal = dir.path().join("signal");
            let child = spawn_child("wait", mode, &data, &signal);
            // The child has read its checkpoint token and its inputs.
            wait_for(&signal).await;
            let host = SqliteHost::new(Arc::clone(&store));
            let bound = order_rows().at(()).expect("bind");
            host.run(&bound, RunOptions::default()).await.expect("run");
            std::fs::write(signal.with_extension("go"), "go").expect("release the child");
            let output = child.wait_with_output().expect("child");
            let said = String::from_utf8_lossy(&output.stdout);
            assert!(
                said.contains("child: checkpoint/conflict"),
                "the child was refused: {said}"
            );
            assert_eq!(rows(&store).await, expected_rows(mode));
            let again = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!(again.units, 0);
        });
    }
}

/// A commit made while an attached binding runs (here by another
/// process) keeps the binding's durable mark when the run ends, since the
/// run cannot tell whether it saw that commit: the next start runs the
/// binding again, and only a run that saw every marked commit clears it.
#[test]
fn a_commit_during_an_attached_run_keeps_the_mark() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let store = open(&data).await;
        append(&store, &[("a", 1), ("b", 2)]).await;
        let marks = store.wake_marks().expect("marks");
        let owner = MarkOwner {
            projection: "order-rows".into(),
            version: 1,
        };
        let key = order_rows()
            .at(())
            .expect("bind")
            .bound()
            .checkpoint_key()
            .params
            .clone();
        let binding = key.clone();
        let _marker = marks.register(
            owner.clone(),
            Arc::new(move |path: &str| (path == "orders").then(|| binding.clone())),
        );
        let signal = dir.path().join("signal");
        let child = spawn_child("wait", "attach", &data, &signal);
        wait_for(&signal).await;
        append(&store, &[("d", 4)]).await;
        std::fs::write(signal.with_extension("go"), "go").expect("release the child");
        let output = child.wait_with_output().expect("child");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(said.contains("child: committed"), "{said}");
        // The child may have heard of the commit in time to run the
        // binding again before it stopped: then it wrote `d` and could
        // clear the mark. Otherwise the mark must still be there, so that
        // the next start runs the binding for `d`.
        let kept = marks.get(&owner, &key).await.expect("get");
        let mut expected = expected_rows("attach");
        expected.push(("d".into(), 4));
        assert!(
            kept.is_some() || rows(&store).await.contains(&("d".into(), 4)),
            "the mark outlives the run that overlapped a commit, unless the commit ran"
        );
        // A kept mark brings the binding back at the next start; without
        // one there is nothing left to run, which a run confirms.
        let next_start = if kept.is_some() { "attach" } else { "run" };
        finish(&store, next_start, &expected).await;
        assert_eq!(marks.get(&owner, &key).await.expect("get"), None, "cleared");
    });
}

/// A plain `fold` that counts the orders, under `id`: a binding of the
/// same key as the transaction projection `id`, kept by `Host::new` in
/// checkpoint streams.
fn counted_as(id: &str) -> eddy_projection::Projection<(), u64> {
    let declare = Declare::<()>::new(id);
    let input = declare.input("orders", &orders());
    declare
        .fold(0u64)
        .on(input, |n, _, _| n + 1)
        .build()
        .expect("declare")
}

/// Issue 26: one binding could keep a checkpoint in both homes of one
/// SQLite store, the checkpoint streams of `Host::new` and the table of
/// `SqliteHost`, each starting from scratch: whichever runs second is
/// refused with `checkpoint/elsewhere`, naming where it lives.
#[test]
fn a_binding_has_one_checkpoint_home_per_store() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        append(&store, &[("a", 1)]).await;
        let streams = eddy_projection::Host::new(store.clone());
        let table = SqliteHost::new(Arc::clone(&store));

        let in_streams = counted_as("in-streams").at(()).expect("bind");
        streams
            .run(&in_streams, RunOptions::default())
            .await
            .expect("run");
        let refused = table
            .run(
                &order_rows_as("in-streams", false).at(()).expect("bind"),
                RunOptions::default(),
            )
            .await
            .expect_err("its checkpoint lives in streams");
        assert_eq!(refused.code(), "checkpoint/elsewhere", "{refused}");
        assert_eq!(rows(&store).await, Vec::new(), "nothing written");

        let in_table = order_rows_as("in-table", false).at(()).expect("bind");
        table
            .run(&in_table, RunOptions::default())
            .await
            .expect("run");
        let refused = streams
            .run(
                &counted_as("in-table").at(()).expect("bind"),
                RunOptions::default(),
            )
            .await
            .expect_err("its checkpoint lives in the table");
        assert_eq!(refused.code(), "checkpoint/elsewhere", "{refused}");
        assert!(refused.to_string().contains("table"), "{refused}");
    });
}

/// A database busy because another connection holds its write lock (a
/// real `SQLITE_BUSY`, met by the handler's own second connection) runs
/// the unit again on inputs read again: `prepare` runs again, the unit
/// key stays while the ranges do and changes when new input extends them;
/// only the last attempt's rows remain.
#[test]
fn a_busy_database_runs_the_unit_again_on_inputs_read_again() {
    crate::support::runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).await;
        let host = SqliteHost::new(Arc::clone(&store));
        append(&store, &[("a", 1)]).await;
        let file = store.file().to_owned();
        let seen: Arc<std::sync::Mutex<Vec<(String, usize, usize)>>> = Arc::default();
        let prepared = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let declare = Declare::<()>::new("busy-rows");
        let input = declare.input("orders", &orders());
        let (seen_in, store_in, prepared_in) =
            (Arc::clone(&seen), Arc::clone(&store), Arc::clone(&prepared));
        let projection = declare
            .process_sqlite_prepared(
                Commit::transaction(),
                async move |batch, _unit| {
                    let count = prepared_in.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if count == 1 {
                        // New input arrives while the unit is retried.
                        append(&store_in, &[("b", 2)]).await;
                    }
                    Ok(batch.items(input).len())
                },
                move |tx: &Transaction<'_>, work| {
                    let attempt = {
                        let mut seen = seen_in.lock().expect("lock");
                        seen.push((
                            work.unit.key.clone(),
                            work.batch.items(input).len(),
                            *work.prepared,
                        ));
                        seen.len()
                    };
                    for order in work.batch.items(input) {
                        let row = Order {
                            amount: attempt as i64,
                            ..order.clone()
                        };
                        insert(tx, &row)?;
                    }
                    if attempt <= 2 {
                        // Another connection cannot take the write lock
                        // this transaction holds: SQLite answers busy.
                        let other = eddy_streams::rusqlite::Connection::open(&file)?;
                        other.busy_timeout(Duration::ZERO)?;
                        other.execute_batch("BEGIN IMMEDIATE")?;
                    }
                    Ok(())
                },
            )
            .expect("declare");
        let bound = projection.at(()).expect("bind");
        let progress = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!((progress.units, progress.items), (1, 2));
        let seen = seen.lock().expect("lock").clone();
        assert_eq!(seen.len(), 3, "three attempts: {seen:?}");
        assert_eq!(seen[0].0, seen[1].0, "unchanged ranges keep the key");
        assert_ne!(seen[1].0, seen[2].0, "extended ranges change the key");
        assert_eq!(
            seen.iter().map(|s| (s.1, s.2)).collect::<Vec<_>>(),
            vec![(1, 1), (1, 1), (2, 2)],
            "prepare saw each attempt's batch"
        );
        assert_eq!(rows(&store).await, owned(&[("a", 3), ("b", 3)]));
    });
}
