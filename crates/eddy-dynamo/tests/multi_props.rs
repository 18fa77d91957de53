//! Property tests of multi-source rows: random interleavings of the three
//! freight sources, random batch splits, duplicated and redelivered
//! records fold to the same rows and checkpoints as one sequential fold
//! (each record alone, in feed order).

use std::sync::Arc;

use eddy_dynamo::{process_batch, BatchProjection, ChangeFeed, ChangeRecord};
use proptest::prelude::*;

use crate::common::{sqlite_table, table, TestTable};
use crate::freight::{shipment, Freight, OrderEvent, ScanEvent, WeighEvent};
use crate::multi::append;

/// One event of the scenario. Cancellations are left out: a removal resets
/// every source's part of the row, so it does not commute with the other
/// sources' events of the same write (the spec folds sources in
/// declaration order within a write); single-row removal is tested on its
/// own.
#[derive(Debug, Clone)]
enum Op {
    Parcels {
        order: usize,
        shipment: usize,
        parcels: u64,
    },
    Scan {
        shipment: usize,
        location: u8,
    },
    Weigh {
        session: usize,
        shipment: usize,
        kg: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..2usize, 0..3usize, 1..5u64).prop_map(|(order, shipment, parcels)| Op::Parcels {
            order,
            shipment,
            parcels
        }),
        (0..3usize, 0..4u8).prop_map(|(shipment, location)| Op::Scan { shipment, location }),
        (0..2usize, 0..3usize, 0..3u64).prop_map(|(session, shipment, kg)| Op::Weigh {
            session,
            shipment,
            kg
        }),
    ]
}

async fn append_ops(f: &Freight, ops: &[Op]) {
    for op in ops {
        match *op {
            Op::Parcels {
                order,
                shipment,
                parcels,
            } => {
                let id = f.orders.id([("orderId", format!("o-{order}"))]).unwrap();
                append(
                    &f.orders,
                    &id,
                    &[OrderEvent::ParcelAdded {
                        shipment_id: format!("sh-{shipment}"),
                        parcels,
                    }],
                )
                .await;
            }
            Op::Scan { shipment, location } => {
                let id = f
                    .scans
                    .id([("shipmentId", format!("sh-{shipment}"))])
                    .unwrap();
                append(
                    &f.scans,
                    &id,
                    &[ScanEvent::Scanned {
                        location: format!("L{location}"),
                    }],
                )
                .await;
            }
            Op::Weigh {
                session,
                shipment,
                kg,
            } => {
                let id = f
                    .weighings
                    .id([("sessionId", format!("w-{session}"))])
                    .unwrap();
                append(
                    &f.weighings,
                    &id,
                    &[WeighEvent::Weighed {
                        shipment_id: format!("sh-{shipment}"),
                        kg,
                    }],
                )
                .await;
            }
        }
    }
}

/// A delivery plan: the records cut into batches at `cuts`, with the
/// records at `duplicates` delivered twice in their batch and the batch at
/// `redeliver` delivered again at the end.
fn deliveries(
    records: &[ChangeRecord],
    cuts: &[usize],
    duplicates: &[usize],
    redeliver: usize,
) -> Vec<Vec<ChangeRecord>> {
    let mut batches: Vec<Vec<ChangeRecord>> = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (records.len() + 1)).collect();
    ends.push(records.len());
    ends.sort_unstable();
    ends.dedup();
    for end in ends {
        if end <= start {
            continue;
        }
        let mut batch = Vec::new();
        for (at, record) in records[start..end].iter().enumerate() {
            batch.push(record.clone());
            if duplicates.contains(&(start + at)) {
                batch.push(record.clone());
            }
        }
        batches.push(batch);
        start = end;
    }
    if !batches.is_empty() {
        let again = batches[redeliver % batches.len()].clone();
        batches.push(again);
    }
    batches
}

async fn scenario(
    t: TestTable,
    ops: Vec<Op>,
    cuts: Vec<usize>,
    duplicates: Vec<usize>,
    redeliver: usize,
) -> Result<(), TestCaseError> {
    let f = Freight::new(t.table.clone()).unwrap();
    let reference = Freight::with_read_model(t.table.clone(), "ReferenceSummary").unwrap();
    append_ops(&f, &ops).await;
    let records = t.read_changes(None, 10_000).await.unwrap();
    prop_assert_eq!(records.len(), ops.len());

    let sequential = reference.projection(None).unwrap();
    let one: [&dyn BatchProjection; 1] = [&sequential];
    for record in &records {
        let result = process_batch(std::slice::from_ref(record), &one).await;
        prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
    }
    let batched = Arc::new(f.projection(None).unwrap());
    let mine: [&dyn BatchProjection; 1] = [batched.as_ref()];
    for batch in deliveries(&records, &cuts, &duplicates, redeliver) {
        let result = process_batch(&batch, &mine).await;
        prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
    }
    for s in 0..3 {
        let key = shipment(&format!("sh-{s}"));
        let want = reference.summaries.get(&key).await.unwrap();
        let got = f.summaries.get(&key).await.unwrap();
        // Revisions count writes, which depend on batching; the rest may not.
        let strip = |r: Option<crate::freight::ShipmentSummary>| {
            r.map(|r| (r.parcels, r.location, r.kg, r.checkpoints))
        };
        prop_assert_eq!(strip(got), strip(want), "shipment sh-{}", s);
    }
    Ok(())
}

fn run(
    t: TestTable,
    ops: Vec<Op>,
    cuts: Vec<usize>,
    duplicates: Vec<usize>,
    redeliver: usize,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(scenario(t, ops, cuts, duplicates, redeliver))
}

fn plan() -> impl Strategy<Value = (Vec<Op>, Vec<usize>, Vec<usize>, usize)> {
    (
        proptest::collection::vec(op(), 1..30),
        proptest::collection::vec(0..40usize, 0..6),
        proptest::collection::vec(0..40usize, 0..5),
        0..10usize,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn multi_source_rows_are_independent_of_interleaving_batching_and_redelivery(
        (ops, cuts, duplicates, redeliver) in plan(),
    ) {
        run(table(), ops, cuts, duplicates, redeliver)?;
    }
}

proptest! {
    // Every write is an fsynced commit: fewer cases than in memory.
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn multi_source_rows_are_independent_of_interleaving_batching_and_redelivery_on_sqlite(
        (ops, cuts, duplicates, redeliver) in plan(),
    ) {
        run(sqlite_table(), ops, cuts, duplicates, redeliver)?;
    }
}

#[cfg(feature = "aws")]
proptest! {
    // Each case creates a table on moto: a few cases.
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    #[test]
    fn multi_source_rows_are_independent_of_interleaving_batching_and_redelivery_on_dynamodb(
        (ops, cuts, duplicates, redeliver) in plan(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let Some(t) = runtime.block_on(crate::moto::test_table(crate::common::schema())) else {
            return Ok(());
        };
        runtime.block_on(scenario(t, ops, cuts, duplicates, redeliver))?;
    }
}
