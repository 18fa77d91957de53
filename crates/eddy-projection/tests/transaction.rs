//! `Commit::transaction`: the handler's SQL and the checkpoint commit
//! together on PostgreSQL (feature `postgres`, the database at
//! `DATABASE_URL`): the order-rows example, a failure between the SQL and
//! the checkpoint, a lost race run again, a worker killed mid-transaction,
//! a second worker in another process, declared outputs in the same
//! transaction.

#[cfg(feature = "postgres")]
mod postgres {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use eddy_projection::{
        AttachOptions, Commit, Declare, FollowOptions, PgHost, PgTx, RunOptions, Status,
        TransactionProjection,
    };
    use eddy_streams::sqlx::{self, Executor};
    use eddy_streams::{
        JsonStream, MarkOwner, PgOptions, PgStorage, ReadFrom, Storage, StreamError,
    };
    use futures::StreamExt;
    use serde::{Deserialize, Serialize};

    use crate::support::{child, fresh_schema, postgres_url};

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Order {
        order_id: String,
        amount: i64,
    }

    fn orders() -> JsonStream<Order> {
        JsonStream::new("Shop/Orders", "orders").expect("stream")
    }

    async fn open(url: &str, schema: &str) -> Arc<PgStorage> {
        let store = PgStorage::open(PgOptions::new(url).with_schema(schema))
            .await
            .expect("open postgres");
        // The application migrates its own table, beside the store's.
        store
            .pool()
            .execute(sqlx::AssertSqlSafe(format!(
                "CREATE TABLE IF NOT EXISTS \"{schema}\".order_totals \
                 (order_id text NOT NULL, total bigint NOT NULL)"
            )))
            .await
            .expect("migrate order_totals");
        Arc::new(store)
    }

    async fn append(store: &PgStorage, items: &[(&str, i64)]) {
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
    async fn rows(store: &PgStorage) -> Vec<(String, i64)> {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT order_id, total FROM \"{}\".order_totals ORDER BY order_id, total",
            store.schema()
        )))
        .fetch_all(store.pool())
        .await
        .expect("select")
    }

    fn owned(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
        rows.iter().map(|(id, t)| ((*id).to_owned(), *t)).collect()
    }

    /// The spec's order-rows projection: `process` over each order,
    /// inserting into the application's `order_totals` table in the unit's
    /// transaction.
    fn order_rows(schema: &str) -> TransactionProjection<(), PgTx> {
        order_rows_as("order-rows", schema, false)
    }

    /// Order rows under the id `id`; with `output`, each order is also
    /// written to the declared output `totals`.
    fn order_rows_as(id: &str, schema: &str, output: bool) -> TransactionProjection<(), PgTx> {
        let insert =
            format!("INSERT INTO \"{schema}\".order_totals (order_id, total) VALUES ($1, $2)");
        let declare = Declare::<()>::new(id);
        let input = declare.input("orders", &orders());
        let output = output.then(|| declare.output("totals", &totals()));
        declare
            .process_transaction(Commit::transaction(), async move |tx: &mut PgTx, work| {
                insert_each(tx, &insert, work.batch.items(input)).await?;
                if let Some(output) = output {
                    work.emits.extend(output, work.batch.items(input));
                }
                Ok(())
            })
            .expect("declare")
    }

    /// Runs `insert` with each order's id and amount in `tx`.
    async fn insert_each(tx: &mut PgTx, insert: &str, orders: &[Order]) -> sqlx::Result<()> {
        for order in orders {
            sqlx::query(sqlx::AssertSqlSafe(insert.to_owned()))
                .bind(&order.order_id)
                .bind(order.amount)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    fn on_postgres<F, Fut>(name: &str, case: F)
    where
        F: FnOnce(String, Arc<PgStorage>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let Some(url) = postgres_url(name) else {
            return;
        };
        eprintln!("`{name}` on postgres");
        // A schema of its own for each test (and for its child process).
        let schema = fresh_schema("tx");
        crate::support::runtime().block_on(async {
            let store = open(&url, &schema).await;
            orders().create(store.as_ref(), &()).await.expect("create");
            case(url.clone(), Arc::clone(&store)).await;
            store.close().await;
            crate::support::drop_pg_schema(&url, &schema).await;
        });
    }

    /// The order-rows example: each order becomes one row, and a second
    /// run adds only the new orders.
    #[test]
    fn order_rows_example() {
        on_postgres("order_rows_example", |_, store| async move {
            let host = PgHost::open(Arc::clone(&store));
            let bound = order_rows(store.schema()).at(()).expect("bind");
            append(&store, &[("a", 3), ("b", 4)]).await;
            let progress = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!((progress.units, progress.items), (1, 2));
            assert_eq!(progress.status, Status::CaughtUp);
            append(&store, &[("c", 5)]).await;
            let progress = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!((progress.units, progress.items), (1, 1));
            assert_eq!(rows(&store).await, owned(&[("a", 3), ("b", 4), ("c", 5)]));
            let again = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!(again.units, 0, "nothing left to do");
            assert_eq!(rows(&store).await.len(), 3);
        });
    }

    /// The items of the `totals` output (none before it exists).
    async fn totals_items(store: &PgStorage) -> Vec<(String, i64)> {
        match totals().read(store, &(), ReadFrom::Beginning).await {
            Ok(chunk) => chunk
                .items
                .into_iter()
                .map(|o| (o.order_id, o.amount))
                .collect(),
            Err(StreamError::NotFound { .. }) => Vec::new(),
            Err(e) => panic!("read the output: {e}"),
        }
    }

    /// A failure after the handler's SQL and its items for the declared
    /// output, before the checkpoint (the database refuses the
    /// checkpoint's row), rolls back all three: no row, no output item, no
    /// checkpoint; the next run writes each row and each item once.
    #[test]
    fn a_failure_between_the_sql_and_the_checkpoint_leaves_neither() {
        let name = "a_failure_between_the_sql_and_the_checkpoint_leaves_neither";
        on_postgres(name, |_, store| async move {
            let host = PgHost::open(Arc::clone(&store));
            let projection = order_rows_as("order-rows-out", store.schema(), true);
            let bound = projection.at(()).expect("bind");
            append(&store, &[("a", 1), ("b", 2)]).await;
            let schema = store.schema().to_owned();
            let refuse = format!(
                "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'injected checkpoint failure'; END $$; \
                 CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON \
                 \"{schema}\".projection_checkpoints FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse()"
            );
            store
                .pool()
                .execute(sqlx::AssertSqlSafe(refuse))
                .await
                .expect("inject the fault");
            let failed = host
                .run(&bound, RunOptions::default())
                .await
                .expect_err("the checkpoint is refused");
            assert!(
                failed.to_string().contains("cannot save the checkpoint"),
                "{failed}"
            );
            assert_eq!(rows(&store).await, Vec::new(), "the rows rolled back");
            assert_eq!(totals_items(&store).await, Vec::new(), "no output item");
            let read = host
                .host()
                .checkpoints()
                .load(bound.bound().checkpoint_key())
                .await;
            assert_eq!(read.expect("load").checkpoint, None, "no checkpoint");
            store
                .pool()
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP TRIGGER refuse ON \"{schema}\".projection_checkpoints"
                )))
                .await
                .expect("remove the fault");
            host.run(&bound, RunOptions::default()).await.expect("run");
            append(&store, &[("c", 3)]).await;
            host.run(&bound, RunOptions::default()).await.expect("run");
            let again = host.run(&bound, RunOptions::default()).await.expect("run");
            assert_eq!(again.units, 0, "nothing left to do");
            let expected = owned(&[("a", 1), ("b", 2), ("c", 3)]);
            assert_eq!(rows(&store).await, expected);
            assert_eq!(totals_items(&store).await, expected, "each item once");
        });
    }

    fn totals() -> JsonStream<Order> {
        JsonStream::new("Shop/Totals", "totals").expect("stream")
    }

    /// A serialization failure runs the unit again on inputs read again:
    /// `prepare` runs again, the unit key stays while the ranges do and
    /// changes when new input extends them; only the last attempt's rows
    /// remain.
    #[test]
    fn a_lost_race_runs_again_on_inputs_read_again() {
        let name = "a_lost_race_runs_again_on_inputs_read_again";
        on_postgres(name, |_, store| async move {
            let host = PgHost::open(Arc::clone(&store));
            append(&store, &[("a", 1)]).await;
            let schema = store.schema().to_owned();
            let seen: Arc<Mutex<Vec<(String, usize, usize)>>> = Arc::default();
            let prepared = Arc::new(AtomicU32::new(0));
            let declare = Declare::<()>::new("racy-rows");
            let input = declare.input("orders", &orders());
            let (seen_in, store_in, prepared_in) =
                (Arc::clone(&seen), Arc::clone(&store), Arc::clone(&prepared));
            let projection = declare
                .process_prepared(
                    Commit::transaction(),
                    async move |batch, _unit| {
                        let count = prepared_in.fetch_add(1, Ordering::SeqCst);
                        Ok((count as usize, batch.items(input).len()))
                    },
                    async move |tx: &mut PgTx, work| {
                        let attempt = {
                            let mut seen = seen_in.lock().expect("lock");
                            seen.push((
                                work.unit.key.clone(),
                                work.batch.items(input).len(),
                                work.prepared.1,
                            ));
                            seen.len()
                        };
                        for order in work.batch.items(input) {
                            sqlx::query(sqlx::AssertSqlSafe(format!(
                                "INSERT INTO \"{schema}\".order_totals VALUES ($1, $2)"
                            )))
                            .bind(&order.order_id)
                            .bind(attempt as i64)
                            .execute(&mut **tx)
                            .await?;
                        }
                        if attempt == 2 {
                            // New input arrives while the unit runs.
                            append(&store_in, &[("b", 2)]).await;
                        }
                        if attempt <= 2 {
                            sqlx::query(
                                "DO $$ BEGIN RAISE EXCEPTION 'lost' \
                                 USING ERRCODE = 'serialization_failure'; END $$",
                            )
                            .execute(&mut **tx)
                            .await?;
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
            assert_eq!(prepared.load(Ordering::SeqCst), 3);
            assert_eq!(rows(&store).await, owned(&[("a", 3), ("b", 3)]));
        });
    }

    /// What a child worker process does, chosen by `EDDY_TX_CHILD` (its
    /// role) and `EDDY_TX_MODE` (its runner).
    const CHILD: &str = "EDDY_TX_CHILD";
    const MODE: &str = "EDDY_TX_MODE";

    /// The runners a child worker uses.
    const MODES: [&str; 3] = ["run", "follow", "attach"];

    /// Runs the child worker of the process tests; does nothing when run
    /// as a plain test. Its handler writes its rows and says so; `hang`
    /// then stops there, `wait` waits until told to go on. Its mode: `run`,
    /// the first element of `follow`, or a durable `attach` to which it
    /// appends `("c", 3)` itself. It prints `child: committed` or
    /// `child: <code> <error>`.
    #[test]
    #[ignore = "the child process of the process tests"]
    fn child_worker() {
        let Ok(role) = std::env::var(CHILD) else {
            return;
        };
        let mode = std::env::var(MODE).unwrap_or_else(|_| "run".into());
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let schema = std::env::var("EDDY_TX_SCHEMA").expect("schema");
        let signal = PathBuf::from(std::env::var("EDDY_TX_SIGNAL").expect("signal"));
        crate::support::runtime().block_on(async {
            let store = open(&url, &schema).await;
            let host = PgHost::open(Arc::clone(&store));
            let insert = format!("INSERT INTO \"{schema}\".order_totals VALUES ($1, $2)");
            let declare = Declare::<()>::new("order-rows");
            let input = declare.input("orders", &orders());
            let hold = role.clone();
            let signal_in = signal.clone();
            let projection = declare
                .process_transaction(Commit::transaction(), async move |tx: &mut PgTx, work| {
                    insert_each(tx, &insert, work.batch.items(input)).await?;
                    // The rows are written, the checkpoint is not.
                    std::fs::write(&signal_in, "in transaction")?;
                    if hold == "hang" {
                        std::future::pending::<()>().await;
                    }
                    wait_for(&signal_in.with_extension("go")).await;
                    Ok(())
                })
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

    /// Waits for the file another process writes as its signal; a child
    /// that died before writing it fails the test instead of hanging it.
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

    fn spawn_child(
        role: &str,
        mode: &str,
        url: &str,
        schema: &str,
        signal: &Path,
    ) -> std::process::Child {
        Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "transaction::postgres::child_worker",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, role)
            .env(MODE, mode)
            .env("DATABASE_URL", url)
            .env("EDDY_TX_SCHEMA", schema)
            .env("EDDY_TX_SIGNAL", signal)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the child worker")
    }

    /// The orders a child in `mode` leaves to its binding: `a` and `b`,
    /// and `c` that an attached child appends itself.
    fn expected_rows(mode: &str) -> Vec<(String, i64)> {
        let mut expected = owned(&[("a", 1), ("b", 2)]);
        if mode == "attach" {
            expected.push(("c".into(), 3));
        }
        expected
    }

    /// Runs the binding on `store` until its rows are `expected`: a run,
    /// or for an attached worker, a durable attachment (whose start runs
    /// the binding from its mark, with no new commit).
    async fn finish(store: &Arc<PgStorage>, mode: &str, expected: &[(String, i64)]) {
        let host = PgHost::open(Arc::clone(store));
        let projection = order_rows(store.schema());
        if mode == "attach" {
            let options = AttachOptions::default().with_durable();
            let attached = host.attach(&projection, options).expect("attach");
            child::until_idle(&attached).await;
        } else {
            let bound = projection.at(()).expect("bind");
            host.run(&bound, RunOptions::default()).await.expect("run");
        }
        assert_eq!(rows(store).await, expected);
    }

    /// Killing the worker process in the middle of a unit's transaction
    /// (rows written, checkpoint not) leaves the database as it was; the
    /// next worker writes each row once. For `run`, `follow` and a durable
    /// `attach`, whose mark brings the binding back at restart.
    #[test]
    fn a_worker_killed_mid_transaction_leaves_the_database_consistent() {
        for mode in MODES {
            let name =
                format!("a_worker_killed_mid_transaction_leaves_the_database_consistent ({mode})");
            on_postgres(&name, |url, store| async move {
                append(&store, &[("a", 1), ("b", 2)]).await;
                let dir = tempfile::tempdir().expect("tempdir");
                let signal = dir.path().join("signal");
                let mut child = spawn_child("hang", mode, &url, store.schema(), &signal);
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
    /// `checkpoint/conflict`, and its rows roll back: no row twice. The
    /// child runs, follows or is attached.
    #[test]
    fn a_second_worker_in_another_process_is_refused() {
        for mode in MODES {
            let name = format!("a_second_worker_in_another_process_is_refused ({mode})");
            on_postgres(&name, |url, store| async move {
                append(&store, &[("a", 1), ("b", 2)]).await;
                let dir = tempfile::tempdir().expect("tempdir");
                let signal = dir.path().join("signal");
                let child = spawn_child("wait", mode, &url, store.schema(), &signal);
                // The child holds its transaction open, rows written.
                wait_for(&signal).await;
                let host = PgHost::open(Arc::clone(&store));
                let bound = order_rows(store.schema()).at(()).expect("bind");
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
    /// process) keeps the binding's durable mark when the run ends; the
    /// next start runs the binding again and clears it.
    #[test]
    fn a_commit_during_an_attached_run_keeps_the_mark() {
        let name = "a_commit_during_an_attached_run_keeps_the_mark";
        on_postgres(name, |url, store| async move {
            append(&store, &[("a", 1), ("b", 2)]).await;
            let marks = store.wake_marks().expect("marks");
            let owner = MarkOwner {
                projection: "order-rows".into(),
                version: 1,
            };
            let bound = order_rows(store.schema()).at(()).expect("bind");
            let key = bound.bound().checkpoint_key().params.clone();
            let binding = key.clone();
            let _marker = marks.register(
                owner.clone(),
                Arc::new(move |path: &str| (path == "orders").then(|| binding.clone())),
            );
            let dir = tempfile::tempdir().expect("tempdir");
            let signal = dir.path().join("signal");
            let child = spawn_child("wait", "attach", &url, store.schema(), &signal);
            wait_for(&signal).await;
            append(&store, &[("d", 4)]).await;
            std::fs::write(signal.with_extension("go"), "go").expect("release the child");
            let output = child.wait_with_output().expect("child");
            let said = String::from_utf8_lossy(&output.stdout);
            assert!(said.contains("child: committed"), "{said}");
            // The child may have heard of the commit in time to run the
            // binding again before it stopped: then it wrote `d` and could
            // clear the mark. Otherwise the mark must still be there, so
            // that the next start runs the binding for `d`.
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

    /// One binding keeps its checkpoint in one home of a PostgreSQL store:
    /// `Host::new`'s checkpoint streams or `PgHost`'s table, whichever ran
    /// it first; the other refuses it with `checkpoint/elsewhere`.
    #[test]
    fn a_binding_has_one_checkpoint_home_per_store() {
        on_postgres(
            "a_binding_has_one_checkpoint_home_per_store",
            |_, store| async move {
                append(&store, &[("a", 1)]).await;
                let streams = eddy_projection::Host::new(store.clone());
                let table = PgHost::open(Arc::clone(&store));
                let counted_as = |id: &str| {
                    let declare = Declare::<()>::new(id);
                    let input = declare.input("orders", &orders());
                    declare
                        .fold(0u64)
                        .on(input, |n, _, _| n + 1)
                        .build()
                        .expect("declare")
                };
                let in_streams = counted_as("in-streams").at(()).expect("bind");
                streams
                    .run(&in_streams, RunOptions::default())
                    .await
                    .expect("run");
                let refused = table
                    .run(
                        &order_rows_as("in-streams", store.schema(), false)
                            .at(())
                            .expect("bind"),
                        RunOptions::default(),
                    )
                    .await
                    .expect_err("its checkpoint lives in streams");
                assert_eq!(refused.code(), "checkpoint/elsewhere", "{refused}");
                assert_eq!(rows(&store).await, Vec::new(), "nothing written");

                let in_table = order_rows_as("in-table", store.schema(), false)
                    .at(())
                    .expect("bind");
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
            },
        );
    }

    /// `follow` on a transaction projection: the first element after the
    /// first cycle, one per cycle that commits, the last once the input is
    /// closed.
    #[test]
    fn a_transaction_projection_follows_live() {
        on_postgres(
            "a_transaction_projection_follows_live",
            |_, store| async move {
                append(&store, &[("a", 1), ("b", 2)]).await;
                let host = PgHost::open(Arc::clone(&store));
                let bound = order_rows(store.schema()).at(()).expect("bind");
                let mut follow = host.follow(&bound, FollowOptions::default());
                let first = follow.next().await.expect("first").expect("cycle");
                assert_eq!(
                    (first.units, first.items, first.status),
                    (1, 2, Status::CaughtUp)
                );
                append(&store, &[("c", 3)]).await;
                let woken = follow.next().await.expect("woken").expect("cycle");
                assert_eq!((woken.units, woken.items), (1, 1));
                let input = bound.bound().input_paths()[0].clone();
                store
                    .append(&input, eddy_streams::Append::close_only())
                    .await
                    .expect("close");
                let closed = follow.next().await.expect("closed").expect("cycle");
                assert_eq!(closed.status, Status::Closed);
                assert!(follow.next().await.is_none(), "the stream ends");
                assert_eq!(rows(&store).await, owned(&[("a", 1), ("b", 2), ("c", 3)]));
            },
        );
    }
}
