//! Property tests: the read model does not depend on batch size, on every
//! record being delivered twice, or on redelivery of any suffix.

use std::collections::BTreeMap;

use eddy_dynamo::{process_batch, BatchProjection, ChangeFeed};
use proptest::prelude::*;

use crate::common::{
    line, orders, placed, sqlite_table, summary_of, summary_projection, table, Only, OrderEvent,
    TestTable,
};

#[derive(Debug, Clone)]
enum Op {
    Line { order: usize, qty: u32, cents: u64 },
    Cancel { order: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 0..3u32, 1..50u64).prop_map(|(order, qty, cents)| Op::Line { order, qty, cents }),
        1 => (0..3usize).prop_map(|order| Op::Cancel { order }),
    ]
}

/// The expected rows, folded without the library.
fn reference(ops: &[Op]) -> BTreeMap<usize, (u32, u64, bool)> {
    let mut rows = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Line { order, qty, cents } => {
                let row = rows.entry(order).or_insert((0, 0, false));
                if qty > 0 {
                    row.0 += 1;
                    row.1 += u64::from(qty) * cents;
                }
            }
            Op::Cancel { order } => rows.entry(order).or_insert((0, 0, false)).2 = true,
        }
    }
    rows
}

async fn scenario(
    t: TestTable,
    ops: Vec<Op>,
    batch: usize,
    suffix: usize,
) -> Result<(), TestCaseError> {
    let stream = orders(&t);
    let mut versions = BTreeMap::new();
    for op in &ops {
        let (order, event) = match *op {
            Op::Line { order, qty, cents } => (order, line(qty, cents)),
            Op::Cancel { order } => (order, OrderEvent::Cancelled),
        };
        let id = stream.id([("orderId", format!("o-{order}"))]).unwrap();
        let version = versions.entry(order).or_insert(0u64);
        if *version == 0 {
            *version = stream.append(&id, &[placed("ann")], 0).await.unwrap();
        }
        *version = stream.append(&id, &[event], *version).await.unwrap();
    }
    let records = t.read_changes(None, 10_000).await.unwrap().into_records();
    let p = summary_projection(&t, true);
    let projections = [&p as &dyn BatchProjection];
    for chunk in records.chunks(batch) {
        for _ in 0..2 {
            let result = process_batch(chunk, &projections).await;
            prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
        }
    }
    let start = suffix % (records.len() + 1);
    let result = process_batch(&records[start..], &projections).await;
    prop_assert!(result.failures.is_empty());
    prop_assert!(result.rows.iter().all(|r| r.only().applied.is_empty()));

    for (order, (lines, total, cancelled)) in reference(&ops) {
        let row = summary_of(&t, &format!("o-{order}")).await;
        prop_assert_eq!(
            (row.lines, row.total_cents, row.cancelled),
            (lines, total, cancelled)
        );
        prop_assert_eq!(row.customer.as_str(), "ann");
    }
    Ok(())
}

fn run(t: TestTable, ops: Vec<Op>, batch: usize, suffix: usize) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(scenario(t, ops, batch, suffix))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn read_model_is_independent_of_batching_and_redelivery(
        ops in proptest::collection::vec(op(), 1..25),
        batch in 1..9usize,
        suffix in 0..200usize,
    ) {
        run(table(), ops, batch, suffix)?;
    }
}

proptest! {
    // Every write is an fsynced commit: fewer cases than in memory.
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn read_model_is_independent_of_batching_and_redelivery_on_sqlite(
        ops in proptest::collection::vec(op(), 1..25),
        batch in 1..9usize,
        suffix in 0..200usize,
    ) {
        run(sqlite_table(), ops, batch, suffix)?;
    }
}
