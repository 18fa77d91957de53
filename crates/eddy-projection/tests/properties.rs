//! Property tests: final rows do not depend on unit size; a producer
//! projection that fails at any step and is retried writes each output
//! item exactly once; and random storage faults at every call with random
//! process restarts still give one sequential fold, in bounded storage.

use std::collections::BTreeMap;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, Projection, RunOptions, Status, StreamCheckpoints};
use eddy_streams::{JsonStream, MemoryStorage, SqliteStorage, StateStream, Storage};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::run::order_totals;
use crate::support::{
    counts, order, orders, prefix_sums, read_all, running_sum, sums, totals, Faulty, Op, When,
};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Delta {
    key: String,
    by: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Row {
    key: String,
    value: i64,
}

type Totals = BTreeMap<String, i64>;

fn deltas() -> JsonStream<Delta> {
    JsonStream::new("Test/Deltas", "deltas").expect("route")
}

fn board() -> StateStream {
    StateStream::new("Test/Board", "board")
        .expect("route")
        .collection::<Row>("row", "key")
}

fn folded() -> Projection<(), Totals> {
    let declare = Declare::<()>::new("folded");
    let input = declare.input("deltas", &deltas());
    declare
        .fold(Totals::new())
        .on(input, |mut totals, entry, _| {
            *totals.entry(entry.item.key.clone()).or_insert(0) += entry.item.by;
            totals
        })
        .build()
        .expect("declare")
}

/// Coalesces each batch into one upsert per touched key.
fn batched() -> Projection<(), Totals> {
    let declare = Declare::<()>::new("batched");
    let input = declare.input("deltas", &deltas());
    let board_output = declare.state_output("board", &board());
    let rows = declare.collection::<Row>(board_output, "row");
    declare
        .map_accum_batch(
            Commit::producer(),
            Totals::new(),
            move |mut totals, batch, _, emits| {
                let mut touched = std::collections::BTreeSet::new();
                for delta in batch.items(input) {
                    *totals.entry(delta.key.clone()).or_insert(0) += delta.by;
                    touched.insert(delta.key.clone());
                }
                for key in touched {
                    let value = totals[&key];
                    emits.upsert(rows, Row { key, value });
                }
                totals
            },
        )
        .expect("declare")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn seed_deltas(store: &dyn Storage, items: &[(u8, i64)], chunk: usize) {
    deltas().create(store, &()).await.expect("create");
    for part in items.chunks(chunk.max(1)) {
        let part: Vec<Delta> = part
            .iter()
            .map(|(k, by)| Delta {
                key: format!("k{k}"),
                by: *by,
            })
            .collect();
        deltas().append(store, &(), &part).await.expect("append");
    }
}

/// One process life: a host on a store that fails the calls of `plan`.
fn life(store: &Arc<dyn Storage>, plan: &[(usize, usize, bool)]) -> Host {
    const OPS: [Option<Op>; 6] = [
        None,
        Some(Op::Create),
        Some(Op::Append),
        Some(Op::Read),
        Some(Op::Head),
        Some(Op::Delete),
    ];
    let faulty = Arc::new(Faulty::new(store.clone()));
    for &(op, nth, after) in plan {
        let when = if after { When::After } else { When::Before };
        faulty.fail_nth(OPS[op % OPS.len()], nth, when);
    }
    let checkpoints = StreamCheckpoints::new(faulty.clone()).with_slot_limits(3, 1 << 20);
    Host::new(faulty).with_checkpoints(Arc::new(checkpoints))
}

/// Runs `running_sum` over `count` numbers (in checkpoint slots of three
/// records, so that restarts land in slot changes too) through lives that each fail
/// the calls of their plan and stop at the first failure (a restart: a new
/// host, nothing kept in memory), with random unit sizes and limits, until
/// it catches up; then checks the outcome against one sequential fold.
async fn faults_and_restarts(
    store: Arc<dyn Storage>,
    count: u64,
    plans: &[Vec<(usize, usize, bool)>],
    sizes: &[(usize, usize)],
) {
    counts().create(store.as_ref(), &()).await.expect("create");
    let all: Vec<u64> = (1..=count).collect();
    counts()
        .append(store.as_ref(), &(), &all)
        .await
        .expect("append");
    let bound = running_sum().at(()).expect("bind");
    let mut caught_up = false;
    for round in 0..plans.len() + 200 {
        let host = life(&store, plans.get(round).map_or(&[][..], Vec::as_slice));
        let (unit, limit) = sizes[round % sizes.len()];
        match host
            .run(
                &bound,
                RunOptions::default().with_limit(limit).with_unit_size(unit),
            )
            .await
        {
            Ok(progress) if progress.status == Status::CaughtUp => {
                caught_up = true;
                break;
            }
            Ok(_) => {}
            Err(e) => assert_eq!(e.code(), "storage-failure", "{e}"),
        }
    }
    assert!(caught_up, "no progress");
    let host = life(&store, &[]);
    assert_eq!(
        host.read(&bound).await.expect("read"),
        count * (count + 1) / 2
    );
    assert_eq!(
        read_all(store.as_ref(), &sums(), &()).await,
        prefix_sums(&all)
    );
    let slots = store
        .list(&format!("{}/", bound.checkpoint_path()))
        .await
        .expect("list");
    assert!(slots.len() <= 2, "{} slot streams", slots.len());
    assert!(slots.iter().all(|s| s.tail.position() <= 3));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn faults_at_any_call_and_restarts_give_one_sequential_fold(
        count in 1u64..40,
        plans in prop::collection::vec(
            prop::collection::vec((0usize..6, 0usize..12, any::<bool>()), 0..4),
            0..12,
        ),
        sizes in prop::collection::vec((1usize..6, 1usize..4), 1..6),
        sqlite in prop::bool::weighted(0.2),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Storage> = if sqlite {
            Arc::new(SqliteStorage::open(dir.path()).expect("open"))
        } else {
            Arc::new(MemoryStorage::new())
        };
        runtime().block_on(faults_and_restarts(store, count, &plans, &sizes));
    }

    #[test]
    fn final_rows_do_not_depend_on_unit_size(
        items in prop::collection::vec((0u8..5, -100i64..100), 0..60),
        append_chunk in 1usize..8,
        fold_unit in 1usize..20,
        batch_unit in 1usize..20,
    ) {
        runtime().block_on(async {
            let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
            seed_deltas(store.as_ref(), &items, append_chunk).await;
            board().create(store.as_ref(), &()).await.expect("board");
            let host = Host::new(store.clone());
            let fold = host
                .run(&folded().at(()).expect("bind"), RunOptions::default().with_unit_size(fold_unit))
                .await
                .expect("fold");
            let batch = host
                .run(&batched().at(()).expect("bind"), RunOptions::default().with_unit_size(batch_unit))
                .await
                .expect("batch");
            assert_eq!(fold.state, batch.state);
            let rows = board().materialize(store.as_ref(), &()).await.expect("board");
            let rows: BTreeMap<String, Row> = rows.rows("row").expect("rows");
            let rows: Totals = rows.into_iter().map(|(k, r)| (k, r.value)).collect();
            assert_eq!(Some(rows), fold.state);
        });
    }

    #[test]
    fn a_failed_step_retried_writes_each_item_exactly_once(
        count in 1usize..12,
        unit in 1usize..5,
        fail_at in 0usize..40,
        after in any::<bool>(),
    ) {
        runtime().block_on(exactly_once_with_failure(
            Arc::new(MemoryStorage::new()), count, unit, fail_at, after,
        ));
    }
}

/// Seeds `count` orders, fails call `fail_at` of the run (before or after
/// it reaches the store), retries until the run succeeds, and checks the
/// output holds each item once, in order.
async fn exactly_once_with_failure(
    store: Arc<dyn Storage>,
    count: usize,
    unit: usize,
    fail_at: usize,
    after: bool,
) {
    orders().create(store.as_ref(), &()).await.expect("create");
    let items: Vec<_> = (0..count).map(|i| order(i, i as f64)).collect();
    orders()
        .append(store.as_ref(), &(), &items)
        .await
        .expect("append");
    let faulty = Arc::new(Faulty::new(store.clone()));
    faulty.fail_nth(
        None,
        fail_at,
        if after { When::After } else { When::Before },
    );
    let host = Host::new(faulty.clone());
    let bound = order_totals().at(()).expect("bind");
    let mut succeeded = false;
    for _ in 0..5 {
        match host
            .run(&bound, RunOptions::default().with_unit_size(unit))
            .await
        {
            Ok(_) => {
                succeeded = true;
                break;
            }
            Err(e) => assert_eq!(e.code(), "storage-failure", "{e}"),
        }
    }
    assert!(succeeded);
    let ids: Vec<String> = read_all(store.as_ref(), &totals(), &())
        .await
        .into_iter()
        .map(|t| t.order_id)
        .collect();
    let expected: Vec<String> = (0..count).map(|i| format!("o{i}")).collect();
    assert_eq!(ids, expected, "fail_at {fail_at}, after {after}");
}

/// Every call of a three-unit run, failed before and after it reaches the
/// store, then retried.
async fn exactly_once_at_every_step(sqlite: bool) {
    for fail_at in 0..30 {
        for after in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let fresh: Arc<dyn Storage> = if sqlite {
                Arc::new(eddy_streams::SqliteStorage::open(dir.path()).expect("open"))
            } else {
                Arc::new(MemoryStorage::new())
            };
            exactly_once_with_failure(fresh, 5, 2, fail_at, after).await;
        }
    }
}

#[test]
fn exactly_once_at_every_step_on_memory() {
    runtime().block_on(exactly_once_at_every_step(false));
}

#[test]
fn exactly_once_at_every_step_on_sqlite() {
    runtime().block_on(exactly_once_at_every_step(true));
}
