//! `run`, commits, checkpoints, `read`, `current` and `decide`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use eddy_projection::{Commit, Declare, Host, Projection, RunOptions, Status, Step};
use eddy_streams::{Control, StateStream, Storage};

use crate::support::{order, orders, read_all, total_of, totals, Faulty, Op, Order, Total, When};

/// `total`: the sum of the orders' amounts.
pub fn total_fold() -> Projection<(), f64> {
    let declare = Declare::<()>::new("total");
    let orders = declare.input("orders", &orders());
    declare
        .fold(0.0)
        .on(orders, |sum, entry, _| sum + entry.item.amount)
        .build()
        .expect("declare")
}

/// `order-totals`: one total per order, with the producer commit.
pub fn order_totals() -> Projection<(), ()> {
    let declare = Declare::<()>::new("order-totals");
    let input = declare.input("input", &orders());
    let totals = declare.output("totals", &totals());
    declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(totals, total_of(entry.item))
        })
        .build()
        .expect("declare")
}

/// A running total of the orders' amounts, written to `totals`.
pub fn running_totals(id: &str) -> Projection<(), f64> {
    let declare = Declare::<()>::new(id);
    let input = declare.input("orders", &orders());
    let totals = declare.output("totals", &totals());
    declare
        .map_accum(Commit::producer(), 0.0)
        .on(input, move |sum, entry, _, emits| {
            let next = sum + entry.item.amount;
            emits.push(
                totals,
                Total {
                    order_id: entry.item.order_id.clone(),
                    total: next,
                },
            );
            next
        })
        .build()
        .expect("declare")
}

/// What a compensation saw: the items written, the cause's code and the
/// unit's input range.
type Compensations = Arc<Mutex<Vec<(usize, &'static str, u64)>>>;

/// `order-totals` with a compensation that records its calls and answers
/// `answer`.
fn compensated(answer: Step<()>) -> (Projection<(), ()>, Compensations) {
    let calls: Compensations = Arc::default();
    let seen = calls.clone();
    let answer = Mutex::new(Some(answer));
    let declare = Declare::<()>::new("compensated");
    let input = declare.input("input", &orders());
    let totals = declare.output("totals", &totals());
    let commit = Commit::producer().with_compensation(move |result, cause, unit| {
        seen.lock().expect("calls").push((
            result.emits.len(totals),
            cause.code(),
            unit.ranges["input"].len(),
        ));
        answer
            .lock()
            .expect("answer")
            .take()
            .unwrap_or(Step::from(()))
    });
    let projection = declare
        .emit(commit)
        .on(input, move |entry, _, emits| {
            emits.push(totals, total_of(entry.item))
        })
        .build()
        .expect("declare");
    (projection, calls)
}

pub async fn seed(store: &dyn Storage, range: std::ops::Range<usize>) {
    let items: Vec<Order> = range.map(|i| order(i, i as f64)).collect();
    orders().create(store, &()).await.expect("create");
    if !items.is_empty() {
        orders().append(store, &(), &items).await.expect("append");
    }
}

mod cases {
    use super::*;

    pub async fn fold_commits_in_units_up_to_the_limit(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..10).await;
        let host = Host::new(store.clone());
        let bound = total_fold().at(()).expect("bind");
        let first = host
            .run(
                &bound,
                RunOptions::default().with_limit(2).with_unit_size(3),
            )
            .await
            .expect("run");
        assert_eq!(
            (first.units, first.items, first.status),
            (2, 6, Status::Limited)
        );
        assert_eq!(first.state, Some(15.0));
        assert_eq!(first.offsets["orders"].position(), 6);
        let rest = host
            .run(&bound, RunOptions::default().with_unit_size(3))
            .await
            .expect("run");
        assert_eq!(
            (rest.units, rest.items, rest.status),
            (2, 4, Status::CaughtUp)
        );
        assert_eq!(rest.state, Some(45.0));
        assert_eq!(rest.pass.offsets["orders"].position(), 10);
        let idle = host.run(&bound, RunOptions::default()).await.expect("run");
        assert_eq!((idle.units, idle.status), (0, Status::CaughtUp));
        assert_eq!(host.read(&bound).await.expect("read"), 45.0);
    }

    pub async fn emit_writes_each_output_once(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..5).await;
        let host = Host::new(store.clone());
        let bound = order_totals().at(()).expect("bind");
        let progress = host
            .run(&bound, RunOptions::default().with_unit_size(2))
            .await
            .expect("run");
        assert_eq!((progress.units, progress.items), (3, 5));
        assert_eq!(progress.state, None);
        host.run(&bound, RunOptions::default())
            .await
            .expect("again");
        let written = read_all(store.as_ref(), &totals(), &()).await;
        let ids: Vec<_> = written.iter().map(|t| t.order_id.as_str()).collect();
        assert_eq!(ids, ["o0", "o1", "o2", "o3", "o4"]);
    }

    /// Items pushed to two outputs in turn, of different sizes, reach each
    /// output whole and in the order they were pushed.
    pub async fn interleaved_items_of_two_outputs_keep_their_order(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..7).await;
        let declare = Declare::<()>::new("two-outputs");
        let input = declare.input("orders", &orders());
        let totals_output = declare.output("totals", &totals());
        let sums_output = declare.output("sums", &crate::support::sums());
        let projection = declare
            .emit(Commit::producer())
            .on(input, move |entry, _, emits| {
                emits.push(totals_output, total_of(entry.item));
                emits.push(sums_output, 10u64.pow(entry.offset.position() as u32));
                emits.push(totals_output, total_of(&order(100, entry.item.amount)));
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        host.run(&bound, RunOptions::default().with_unit_size(3))
            .await
            .expect("run");
        let written = read_all(store.as_ref(), &totals(), &()).await;
        let expected: Vec<Total> = (0..7)
            .flat_map(|i| {
                [
                    total_of(&order(i, i as f64)),
                    total_of(&order(100, i as f64)),
                ]
            })
            .collect();
        assert_eq!(written, expected);
        let sums = read_all(store.as_ref(), &crate::support::sums(), &()).await;
        assert_eq!(sums, (0..7).map(|i| 10u64.pow(i)).collect::<Vec<_>>());
    }

    /// A producer unit that failed after its outputs were appended is
    /// replayed from its pinned range; the store drops the duplicates even
    /// though more input arrived in between.
    pub async fn a_retried_producer_unit_writes_outputs_exactly_once(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = order_totals().at(()).expect("bind");
        host.run(&bound, RunOptions::default())
            .await
            .expect("first");
        orders()
            .append(store.as_ref(), &(), &[order(3, 3.0), order(4, 4.0)])
            .await
            .expect("append");
        // Calls of the next unit: load (head, read), read input (read),
        // head output (head), pin (append), output (append), settle (append).
        // The second append is the output: let it land, then fail.
        faulty.fail_nth(Some(Op::Append), 1, When::After);
        let failed = host.run(&bound, RunOptions::default()).await;
        assert_eq!(failed.expect_err("fails").code(), "storage-failure");
        orders()
            .append(store.as_ref(), &(), &[order(5, 5.0)])
            .await
            .expect("append");
        let progress = host
            .run(&bound, RunOptions::default())
            .await
            .expect("retry");
        assert_eq!(
            progress.items, 3,
            "the pinned unit (2), then the new item (1)"
        );
        let ids: Vec<_> = read_all(store.as_ref(), &totals(), &())
            .await
            .into_iter()
            .map(|t| t.order_id)
            .collect();
        assert_eq!(ids, ["o0", "o1", "o2", "o3", "o4", "o5"]);
    }

    pub async fn a_second_writer_gets_a_checkpoint_conflict(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let host = Host::new(store.clone());
        let bound = total_fold().at(()).expect("bind");
        let loaded = host
            .checkpoints()
            .load(&bound_key(&bound))
            .await
            .expect("load");
        host.run(&bound, RunOptions::default())
            .await
            .expect("writer a");
        let err = host
            .checkpoints()
            .save(&bound_key(&bound), loaded.token, &Default::default())
            .await
            .expect_err("stale writer");
        assert_eq!(err.code(), "checkpoint/conflict");
        assert_eq!(
            host.read(&bound).await.expect("read"),
            1.0,
            "nothing overwritten"
        );
    }

    pub async fn at_least_once_retries_keep_the_unit_key(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let seen = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let fail_once = Arc::new(Mutex::new(true));
        let (seen2, fail2) = (seen.clone(), fail_once.clone());
        let declare = Declare::<()>::new("effects");
        let input = declare.input("orders", &orders());
        let projection = declare
            .process_each(Commit::at_least_once())
            .on(input, move |entry, unit| {
                seen2
                    .lock()
                    .expect("seen")
                    .push((unit.key.clone(), entry.item.order_id.clone()));
                let mut fail = fail2.lock().expect("fail");
                if entry.item.order_id == "o1" && *fail {
                    *fail = false;
                    return Step::fail("external call failed");
                }
                Step::from(())
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "handler/failed");
        seed(store.as_ref(), 3..4).await;
        let progress = host
            .run(&bound, RunOptions::default())
            .await
            .expect("retry");
        assert_eq!(progress.items, 4, "the pinned three, then the new one");
        let seen = seen.lock().expect("seen").clone();
        let first_key = &seen[0].0;
        let retried: Vec<_> = seen
            .iter()
            .filter(|(k, _)| k == first_key)
            .map(|(_, id)| id.as_str())
            .collect();
        assert_eq!(retried, ["o0", "o1", "o0", "o1", "o2"]);
        assert_eq!(seen.last().map(|(_, id)| id.as_str()), Some("o3"));
    }

    pub async fn compensation_runs_when_the_commit_fails(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let calls2 = calls.clone();
        let declare = Declare::<()>::new("compensated");
        let input = declare.input("input", &orders());
        let totals = declare.output("totals", &totals());
        let commit = Commit::producer().with_compensation(move |result, cause, unit| {
            calls2.lock().expect("calls").push((
                result.emits.len(totals),
                cause.code(),
                unit.ranges["input"].len(),
            ));
        });
        let projection = declare
            .emit(commit)
            .on(input, move |entry, _, emits| {
                emits.push(totals, total_of(entry.item))
            })
            .build()
            .expect("declare");
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = projection.at(()).expect("bind");
        // Appends: create is not an append; pin (0), output (1).
        faulty.fail_nth(Some(Op::Append), 1, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "storage-failure");
        assert_eq!(
            calls.lock().expect("calls").clone(),
            vec![(2, "storage-failure", 2)]
        );
    }

    /// Issue 26: when the producer's pin failed after the handler ran, the
    /// compensation was skipped.
    pub async fn compensation_runs_when_the_pin_fails_after_the_handler(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let (projection, calls) = compensated(Step::from(()));
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = projection.at(()).expect("bind");
        faulty.fail_nth(Some(Op::Append), 0, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "storage-failure");
        assert_eq!(
            calls.lock().expect("calls").clone(),
            vec![(2, "storage-failure", 2)]
        );
    }

    /// Issue 26: a compensation that failed was only logged; the unit's
    /// error now carries it (`compensation/failed`), keeping the commit's
    /// cause and whether it may be retried.
    pub async fn a_failed_compensation_is_part_of_the_units_error(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let (projection, calls) = compensated(Step::fail("the undo failed too"));
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = projection.at(()).expect("bind");
        faulty.fail_nth(Some(Op::Append), 1, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(calls.lock().expect("calls").len(), 1);
        assert_eq!(err.code(), "compensation/failed", "{err}");
        assert!(err.is_retryable(), "its cause, a storage failure, is");
        let message = err.to_string();
        assert!(
            message.contains("the undo failed too") && message.contains("storage failure"),
            "{message}"
        );
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("the undo failed too"));
    }

    pub async fn current_and_decide_fold_in_memory_and_never_write(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..4).await;
        let host = Host::new(store.clone());
        let bound = total_fold().at(()).expect("bind");
        host.run(
            &bound,
            RunOptions::default().with_limit(1).with_unit_size(2),
        )
        .await
        .expect("run");
        let checkpoint = || async {
            host.checkpoints()
                .load(bound.checkpoint_key())
                .await
                .expect("load")
                .token
        };
        let before = checkpoint().await;
        assert_eq!(host.current(&bound).await.expect("current"), 6.0);
        let decided = host
            .decide(&bound, |total| *total > 5.0)
            .await
            .expect("decide");
        assert!(decided);
        assert_eq!(before, checkpoint().await, "no checkpoint written");
        assert_eq!(host.read(&bound).await.expect("read"), 1.0);
        let emit = order_totals().at(()).expect("bind");
        assert_eq!(
            host.current(&emit).await.expect_err("no state").code(),
            "load/invalid-options"
        );
    }

    pub async fn map_accum_batch_writes_state_and_json_outputs(store: Arc<dyn Storage>) {
        #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Card {
            issue_id: String,
            total: i64,
        }
        let numbers = crate::support::numbers();
        let board = StateStream::new("Tracker/Board", "board")
            .expect("route")
            .collection::<Card>("card", "issueId");
        let transitions =
            eddy_streams::JsonStream::<i64>::new("Tracker/Transitions", "transitions")
                .expect("route");
        let declare = Declare::<()>::new("tracker");
        let input = declare.input("numbers", &numbers);
        let board_output = declare.state_output("board", &board);
        let cards = declare.collection::<Card>(board_output, "card");
        let steps = declare.output("transitions", &transitions);
        let tracker = declare
            .map_accum_batch(Commit::producer(), 0i64, move |state, batch, _, emits| {
                let next = state + batch.items(input).iter().sum::<i64>();
                let card = Card {
                    issue_id: "total".into(),
                    total: next,
                };
                emits.upsert(cards, card);
                emits.remove(cards, "old");
                emits.push(steps, next);
                next
            })
            .expect("declare");
        numbers.create(store.as_ref(), &()).await.expect("create");
        numbers
            .append(store.as_ref(), &(), &[1, 2, 3, 4])
            .await
            .expect("append");
        let host = Host::new(store.clone());
        let bound = tracker.at(()).expect("bind");
        let progress = host
            .run(&bound, RunOptions::default().with_unit_size(3))
            .await
            .expect("run");
        assert_eq!(progress.state, Some(10));
        let rows = board.materialize(store.as_ref(), &()).await.expect("board");
        let cards = rows.rows::<Card>("card").expect("cards");
        assert_eq!(cards["total"].total, 10);
        assert_eq!(read_all(store.as_ref(), &transitions, &()).await, [6, 10]);
    }

    pub async fn a_closed_output_fails_with_invalid_output(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        totals().create(store.as_ref(), &()).await.expect("create");
        store
            .append(
                &totals().path(&()).expect("path"),
                eddy_streams::Append::close_only(),
            )
            .await
            .expect("close");
        refused_before_pin(store).await;
    }

    pub async fn a_missing_foreign_output_fails_and_an_owned_one_is_created(
        store: Arc<dyn Storage>,
    ) {
        seed(store.as_ref(), 0..1).await;
        let declare = Declare::<()>::new("foreign");
        let input = declare.input("input", &orders());
        declare.foreign_output("totals", &totals());
        let foreign = declare
            .emit(Commit::producer())
            .on(input, |_, _, _| ())
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let err = host
            .run(&foreign.at(()).expect("bind"), RunOptions::default())
            .await
            .expect_err("absent");
        assert_eq!(err.code(), "pin/invalid-output");
        host.run(&order_totals().at(()).expect("bind"), RunOptions::default())
            .await
            .expect("owned");
        assert_eq!(read_all(store.as_ref(), &totals(), &()).await.len(), 1);
    }

    pub async fn bad_options_and_storage_failures_have_codes(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = total_fold().at(()).expect("bind");
        let bad = host
            .run(
                &bound,
                RunOptions {
                    limit: Some(0),
                    ..RunOptions::default().with_unit_size(10)
                },
            )
            .await;
        assert_eq!(bad.expect_err("limit").code(), "load/invalid-options");
        let bad = host
            .run(&bound, RunOptions::default().with_unit_size(0))
            .await;
        assert_eq!(bad.expect_err("unit size").code(), "load/invalid-options");
        faulty.fail_nth(Some(Op::Read), 0, When::Before);
        let failed = host.run(&bound, RunOptions::default()).await;
        assert_eq!(failed.expect_err("storage").code(), "storage-failure");
        assert_eq!(
            host.run(&bound, RunOptions::default())
                .await
                .expect("ok")
                .state,
            Some(0.0)
        );
    }
    /// State controls are written unchanged, in order with the row changes.
    pub async fn state_outputs_write_controls_in_order(store: Arc<dyn Storage>) {
        #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Card {
            issue_id: String,
        }
        seed(store.as_ref(), 0..1).await;
        let board = StateStream::new("Tracker/Board", "board")
            .expect("route")
            .collection::<Card>("card", "issueId");
        let declare = Declare::<()>::new("controls");
        let input = declare.input("input", &orders());
        let board_output = declare.state_output("board", &board);
        let cards = declare.collection::<Card>(board_output, "card");
        let projection = declare
            .emit(Commit::producer())
            .on(input, move |entry, _, emits| {
                let card = Card {
                    issue_id: entry.item.order_id.clone(),
                };
                emits.control(board_output, Control::SnapshotStart);
                emits.upsert(cards, card);
                emits.control(board_output, Control::Reset);
                emits.remove(cards, "old");
                emits.control(board_output, Control::SnapshotEnd);
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        host.run(&projection.at(()).expect("bind"), RunOptions::default())
            .await
            .expect("run");
        let raw =
            eddy_streams::JsonStream::<serde_json::Value>::new("Raw", "board").expect("route");
        let written: Vec<String> = read_all(store.as_ref(), &raw, &())
            .await
            .into_iter()
            .map(|m| match m["headers"]["control"].as_str() {
                Some(control) => control.to_owned(),
                None => format!(
                    "{}:{}:{}",
                    m["headers"]["operation"].as_str().unwrap_or("?"),
                    m["type"].as_str().unwrap_or("?"),
                    m["key"].as_str().unwrap_or("?")
                ),
            })
            .collect();
        assert_eq!(
            written,
            [
                "snapshot-start",
                "update:card:o0",
                "reset",
                "delete:card:old",
                "snapshot-end"
            ]
        );
    }

    /// A missing output key emits nothing, and an output with no items in a
    /// unit uses no producer sequence number.
    pub async fn an_empty_output_uses_no_producer_sequence(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let evens = eddy_streams::JsonStream::<String>::new("Shop/Evens", "evens").expect("route");
        let declare = Declare::<()>::new("two-outputs");
        let input = declare.input("input", &orders());
        let totals_output = declare.output("totals", &totals());
        let evens_output = declare.output("evens", &evens);
        let projection = declare
            .emit(Commit::producer())
            .on(input, move |entry, _, emits| {
                emits.push(totals_output, total_of(entry.item));
                match entry.item.order_id.as_str() {
                    // Both outputs.
                    "o0" => emits.push(evens_output, &entry.item.order_id),
                    // Nothing for `evens`.
                    "o1" => {}
                    // No items for `evens`.
                    _ => emits.extend(evens_output, Vec::<String>::new()),
                }
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        let progress = host
            .run(&bound, RunOptions::default().with_unit_size(1))
            .await
            .expect("run");
        assert_eq!(progress.units, 3);
        let checkpoint = host
            .checkpoints()
            .load(&bound_key(&bound))
            .await
            .expect("load")
            .checkpoint
            .expect("checkpoint");
        assert_eq!(checkpoint.next_seq.get("totals"), Some(&3));
        assert_eq!(
            checkpoint.next_seq.get("evens"),
            Some(&1),
            "units with no `evens` items used no sequence"
        );
        assert_eq!(read_all(store.as_ref(), &evens, &()).await, ["o0"]);
        assert_eq!(read_all(store.as_ref(), &totals(), &()).await.len(), 3);
    }

    /// A deleted output (owned, so it would otherwise be created) fails
    /// with `pin/invalid-output` before anything is pinned.
    pub async fn a_gone_output_fails_with_invalid_output(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        totals().create(store.as_ref(), &()).await.expect("create");
        store
            .delete(&totals().path(&()).expect("path"))
            .await
            .expect("delete");
        refused_before_pin(store).await;
    }

    /// Compensation gets the handler's new state, the commit's error and
    /// the unit; it is not called when the handler itself fails.
    pub async fn compensation_gets_the_state_and_skips_handler_failures(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        type Call = (Option<f64>, &'static str, u64);
        let calls = Arc::new(Mutex::new(Vec::<Call>::new()));
        let calls2 = calls.clone();
        let commit = Commit::checkpoint().with_compensation(move |result, cause, unit| {
            calls2.lock().expect("calls").push((
                result.state,
                cause.code(),
                unit.ranges["orders"].len(),
            ));
        });
        let fail_handler = Arc::new(Mutex::new(false));
        let fail2 = fail_handler.clone();
        let declare = Declare::<()>::new("compensated-fold");
        let input = declare.input("orders", &orders());
        let projection = declare
            .fold(0.0)
            .with_commit(commit)
            .on(input, move |sum: f64, entry, _| {
                if *fail2.lock().expect("fail") {
                    return Step::fail("handler failed");
                }
                Step::from(sum + entry.item.amount)
            })
            .build()
            .expect("declare");
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = projection.at(()).expect("bind");
        // The checkpoint save is the first append.
        faulty.fail_nth(Some(Op::Append), 0, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "storage-failure");
        assert_eq!(
            calls.lock().expect("calls").clone(),
            vec![(Some(3.0), "storage-failure", 3)]
        );
        *fail_handler.lock().expect("fail") = true;
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("handler fails");
        assert_eq!(err.code(), "handler/failed");
        assert_eq!(calls.lock().expect("calls").len(), 1, "no compensation");
    }

    /// `current` on a projection with outputs folds in memory: no output is
    /// created or appended, no checkpoint is written.
    pub async fn current_on_an_output_projection_writes_nothing(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let running = running_totals("running");
        let host = Host::new(store.clone());
        let bound = running.at(()).expect("bind");
        assert_eq!(host.current(&bound).await.expect("current"), 3.0);
        assert_eq!(host.decide(&bound, |sum| *sum).await.expect("decide"), 3.0);
        assert!(
            store.head(&bound.output_paths()[0]).await.is_err(),
            "no output created"
        );
        let prefix = format!("{}/", bound.checkpoint_path());
        assert!(
            store.list(&prefix).await.expect("list").is_empty(),
            "no checkpoint written"
        );
        assert_eq!(host.read(&bound).await.expect("read"), 0.0);
    }

    /// `each` runs entries in input declaration order, not name order.
    pub async fn each_keeps_input_declaration_order(store: Arc<dyn Storage>) {
        let zeta = eddy_streams::JsonStream::<Order>::new("Test/Zeta", "zeta").expect("route");
        let alpha = eddy_streams::JsonStream::<Order>::new("Test/Alpha", "alpha").expect("route");
        for (stream, ids) in [(&alpha, [10, 11]), (&zeta, [20, 21])] {
            stream.create(store.as_ref(), &()).await.expect("create");
            let items: Vec<Order> = ids.iter().map(|&i| order(i, 0.0)).collect();
            stream
                .append(store.as_ref(), &(), &items)
                .await
                .expect("append");
        }
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen2 = seen.clone();
        let declare = Declare::<()>::new("ordered");
        let zeta = declare.input("zeta", &zeta);
        let alpha = declare.input("alpha", &alpha);
        let record = move |input: &str, order: &Order| {
            seen2
                .lock()
                .expect("seen")
                .push(format!("{input}:{}", order.order_id));
        };
        let record2 = record.clone();
        let projection = declare
            .process_each(Commit::at_least_once())
            .on(alpha, move |entry, _| record("alpha", entry.item))
            .on(zeta, move |entry, _| record2("zeta", entry.item))
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        host.run(&projection.at(()).expect("bind"), RunOptions::default())
            .await
            .expect("run");
        assert_eq!(
            *seen.lock().expect("seen"),
            ["zeta:o20", "zeta:o21", "alpha:o10", "alpha:o11"]
        );
    }
    /// The first unit of a binding with state, pinned but not settled,
    /// replays on the next run (the pin carries the initial state).
    pub async fn a_first_unit_pinned_but_not_settled_replays(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..3).await;
        let running = running_totals("running");
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let bound = running.at(()).expect("bind");
        // Appends: pin (0), output (1), settle (2).
        faulty.fail_nth(Some(Op::Append), 2, When::Before);
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("settle fails");
        assert_eq!(err.code(), "storage-failure");
        let progress = host
            .run(&bound, RunOptions::default())
            .await
            .expect("replay");
        assert_eq!((progress.units, progress.state), (1, Some(3.0)));
        let written: Vec<f64> = read_all(store.as_ref(), &totals(), &())
            .await
            .into_iter()
            .map(|t| t.total)
            .collect();
        assert_eq!(written, [0.0, 1.0, 3.0]);
    }

    /// Asynchronous handlers borrow the entry, the unit, the batch and the
    /// outputs across their awaits (no `'static` clones), in every shape.
    pub async fn async_handlers_borrow_what_they_are_given(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..4).await;
        let host = Host::new(store.clone());
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));

        let declare = Declare::<()>::new("async-fold");
        let input = declare.input("orders", &orders());
        let fold = declare
            .fold(0.0)
            .on_async(input, async |sum, entry, unit| {
                tokio::task::yield_now().await;
                assert_eq!(unit.key.len(), 16, "the unit is still there");
                Ok(sum + entry.item.amount)
            })
            .build()
            .expect("declare");
        let progress = host
            .run(
                &fold.at(()).expect("bind"),
                RunOptions::default().with_unit_size(3),
            )
            .await
            .expect("fold");
        assert_eq!(progress.state, Some(6.0));

        let declare = Declare::<()>::new("async-emit");
        let input = declare.input("input", &orders());
        let output = declare.output("totals", &totals());
        let emit = declare
            .emit(Commit::producer())
            .on_async(input, async move |entry, _unit, emits| {
                tokio::task::yield_now().await;
                emits.push(output, total_of(entry.item));
                Ok(())
            })
            .build()
            .expect("declare");
        host.run(&emit.at(()).expect("bind"), RunOptions::default())
            .await
            .expect("emit");
        assert_eq!(read_all(store.as_ref(), &totals(), &()).await.len(), 4);

        let record = seen.clone();
        let declare = Declare::<()>::new("async-process");
        let input = declare.input("orders", &orders());
        let process = declare
            .process_async(Commit::at_least_once(), async move |batch, unit| {
                tokio::task::yield_now().await;
                for order in batch.items(input) {
                    record.lock().expect("seen").push(format!(
                        "{}:{}",
                        &unit.key[..4],
                        order.order_id
                    ));
                }
                Ok(())
            })
            .expect("declare");
        host.run(&process.at(()).expect("bind"), RunOptions::default())
            .await
            .expect("process");
        let seen = seen.lock().expect("seen").clone();
        assert_eq!(seen.len(), 4);
        assert!(seen[3].ends_with(":o3"));

        let declare = Declare::<()>::new("async-failure");
        let input = declare.input("orders", &orders());
        let failing = declare
            .process_each(Commit::at_least_once())
            .on_async(input, async |entry, _unit| {
                tokio::task::yield_now().await;
                Err(format!("cannot send {}", entry.item.order_id).into())
            })
            .build()
            .expect("declare");
        let err = host
            .run(&failing.at(()).expect("bind"), RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "handler/failed");
        assert!(err.to_string().contains("cannot send o0"), "{err}");
    }

    /// An asynchronous compensation sees the result, the cause and the
    /// unit for the duration of its call.
    pub async fn an_async_compensation_runs_when_the_commit_fails(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..2).await;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let record = calls.clone();
        let commit =
            Commit::checkpoint().with_compensation_async(async move |result, cause, unit| {
                tokio::task::yield_now().await;
                record.lock().expect("calls").push((
                    result.state,
                    cause.code(),
                    unit.ranges["orders"].len(),
                ));
                Ok(())
            });
        let declare = Declare::<()>::new("compensated-async");
        let input = declare.input("orders", &orders());
        let projection = declare
            .fold(0.0)
            .with_commit(commit)
            .on(input, |sum: f64, entry, _| sum + entry.item.amount)
            .build()
            .expect("declare");
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        faulty.fail_nth(Some(Op::Append), 0, When::Before);
        let err = host
            .run(&projection.at(()).expect("bind"), RunOptions::default())
            .await
            .expect_err("fails");
        assert_eq!(err.code(), "storage-failure");
        assert_eq!(
            calls.lock().expect("calls").clone(),
            vec![(Some(1.0), "storage-failure", 2)]
        );
    }

    /// Regression (issue 11, 1.3): an output mistake was found only after
    /// the pin, and the replay failed the same way forever. With typed
    /// handles the compiler rules out wrong names and item types; what it
    /// cannot see (a handle of another declaration, a row the state stream
    /// refuses, an item that does not encode) fails the unit before
    /// anything is written, and a fixed handler resumes.
    pub async fn an_output_mistake_writes_nothing_and_a_fixed_handler_resumes(
        store: Arc<dyn Storage>,
    ) {
        #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
        struct Row {
            id: String,
        }
        #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
        struct NotARow {
            name: String,
        }
        seed(store.as_ref(), 0..2).await;
        let board = StateStream::new("Test/Board", "board")
            .expect("route")
            .collection::<Row>("row", "id");
        let odd = eddy_streams::JsonStream::<Odd>::new("Test/Odd", "odd").expect("route");
        let other = Declare::<()>::new("other");
        let foreign_handle = other.output("totals", &totals());
        for mistake in [
            "another declaration's handle",
            "refused row",
            "does not encode",
        ] {
            let buggy = Arc::new(AtomicBool::new(true));
            let flag = buggy.clone();
            let declare = Declare::<()>::new(format!("mistake-{}", mistake.len()));
            let input = declare.input("input", &orders());
            let totals_output = declare.output("totals", &totals());
            let board_output = declare.state_output("board", &board);
            let rows = declare.collection::<Row>(board_output, "row");
            let not_rows = declare.collection::<NotARow>(board_output, "row");
            let odd_output = declare.output("odd", &odd);
            let projection = declare
                .emit(Commit::producer())
                .on(input, move |entry, _, emits| {
                    let id = entry.item.order_id.clone();
                    emits.push(totals_output, total_of(entry.item));
                    emits.upsert(rows, Row { id: id.clone() });
                    if !flag.load(Ordering::SeqCst) {
                        return;
                    }
                    match mistake {
                        "another declaration's handle" => {
                            emits.push(foreign_handle, total_of(entry.item))
                        }
                        "refused row" => emits.upsert(not_rows, NotARow { name: id }),
                        _ => emits.push(odd_output, Odd::unencodable()),
                    }
                })
                .build()
                .expect("declare");
            let host = Host::new(store.clone());
            let bound = projection.at(()).expect("bind");
            let totals_path = bound.output_paths()[0].clone();
            let tail = || async {
                store
                    .head(&totals_path)
                    .await
                    .map_or(0, |info| info.tail.position())
            };
            let before = tail().await;
            let err = host
                .run(&bound, RunOptions::default())
                .await
                .expect_err("refused");
            assert_eq!(err.code(), "pin/invalid-output", "{mistake}: {err}");
            let loaded = host
                .checkpoints()
                .load(&bound_key(&bound))
                .await
                .expect("load");
            assert!(loaded.checkpoint.is_none(), "{mistake}: nothing pinned");
            assert_eq!(
                tail().await,
                before,
                "{mistake}: nothing appended to the first output"
            );
            buggy.store(false, Ordering::SeqCst);
            let fixed = host
                .run(&bound, RunOptions::default())
                .await
                .expect("a fixed handler resumes");
            assert_eq!(fixed.items, 2, "{mistake}");
            assert_eq!(tail().await, before + 2, "{mistake}");
        }
    }

    /// Regression (issue 11, 1.3): outputs were encoded one by one, so
    /// output A was appended before output B was refused.
    pub async fn a_refused_second_output_leaves_the_first_untouched(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let odd = eddy_streams::JsonStream::<Odd>::new("Test/Odd", "odd").expect("route");
        let declare = Declare::<()>::new("two");
        let input = declare.input("input", &orders());
        let totals_output = declare.output("totals", &totals());
        let odd_output = declare.output("odd", &odd);
        let projection = declare
            .emit(Commit::producer())
            .on(input, move |entry, _, emits| {
                emits.push(totals_output, total_of(entry.item));
                emits.push(odd_output, Odd::unencodable());
            })
            .build()
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("refused");
        assert_eq!(err.code(), "pin/invalid-output");
        assert!(read_all(store.as_ref(), &totals(), &()).await.is_empty());
    }

    /// A batch handler that reads an input of another declaration fails
    /// its unit with `load/invalid-options` before anything is written.
    pub async fn a_batch_handler_with_another_declarations_input_fails(store: Arc<dyn Storage>) {
        seed(store.as_ref(), 0..1).await;
        let other = Declare::<()>::new("other");
        let foreign_input = other.input("orders", &orders());
        let declare = Declare::<()>::new("confused");
        declare.input("orders", &orders());
        let totals_output = declare.output("totals", &totals());
        let projection = declare
            .map_accum_batch(Commit::producer(), 0usize, move |seen, batch, _, emits| {
                for order in batch.items(foreign_input) {
                    emits.push(totals_output, total_of(order));
                }
                seen + batch.len()
            })
            .expect("declare");
        let host = Host::new(store.clone());
        let bound = projection.at(()).expect("bind");
        let err = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("refused");
        assert_eq!(err.code(), "load/invalid-options", "{err}");
        assert!(host
            .checkpoints()
            .load(bound.checkpoint_key())
            .await
            .expect("load")
            .checkpoint
            .is_none());
    }
}

/// An output item whose encoding fails: JSON object keys must be strings.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Odd(std::collections::BTreeMap<Vec<u8>, u8>);

impl Odd {
    fn unencodable() -> Self {
        Odd([(vec![1], 1)].into_iter().collect())
    }
}

/// Runs `order_totals` and checks that its output is refused with
/// `pin/invalid-output` before anything is pinned.
async fn refused_before_pin(store: Arc<dyn Storage>) {
    let host = Host::new(store);
    let bound = order_totals().at(()).expect("bind");
    let err = host
        .run(&bound, RunOptions::default())
        .await
        .expect_err("the output is unusable");
    assert_eq!(err.code(), "pin/invalid-output");
    assert!(
        host.checkpoints()
            .load(&bound_key(&bound))
            .await
            .expect("load")
            .checkpoint
            .is_none(),
        "nothing pinned"
    );
}

pub fn bound_key<P: eddy_projection::Params, S: eddy_projection::State>(
    bound: &eddy_projection::Bound<P, S>,
) -> eddy_projection::CheckpointKey {
    bound.checkpoint_key().clone()
}

crate::on_backends!(
    fold_commits_in_units_up_to_the_limit,
    emit_writes_each_output_once,
    interleaved_items_of_two_outputs_keep_their_order,
    a_retried_producer_unit_writes_outputs_exactly_once,
    a_second_writer_gets_a_checkpoint_conflict,
    at_least_once_retries_keep_the_unit_key,
    compensation_runs_when_the_commit_fails,
    compensation_runs_when_the_pin_fails_after_the_handler,
    a_failed_compensation_is_part_of_the_units_error,
    current_and_decide_fold_in_memory_and_never_write,
    map_accum_batch_writes_state_and_json_outputs,
    a_closed_output_fails_with_invalid_output,
    a_missing_foreign_output_fails_and_an_owned_one_is_created,
    bad_options_and_storage_failures_have_codes,
    state_outputs_write_controls_in_order,
    an_empty_output_uses_no_producer_sequence,
    a_gone_output_fails_with_invalid_output,
    compensation_gets_the_state_and_skips_handler_failures,
    current_on_an_output_projection_writes_nothing,
    each_keeps_input_declaration_order,
    a_first_unit_pinned_but_not_settled_replays,
    an_output_mistake_writes_nothing_and_a_fixed_handler_resumes,
    a_refused_second_output_leaves_the_first_untouched,
    a_batch_handler_with_another_declarations_input_fails,
    async_handlers_borrow_what_they_are_given,
    an_async_compensation_runs_when_the_commit_fails,
);
