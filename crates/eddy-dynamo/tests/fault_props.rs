//! Property tests of multi-source rows with removals under faults: random
//! interleavings of the freight sources (cancellations included), the
//! records reordered across stream instances as another shard layout would
//! deliver them (each instance's own order kept), cut into batches with
//! duplicates and a batch delivered again, and transient faults on gap-fill
//! reads, row reads, row writes and lost acknowledgements, each failed
//! batch delivered again from its first failed record on, as Lambda does.
//! The rows, and the effects the consumer sees (in order per row, at least
//! once), must be those of the same delivery without faults, with the
//! spec's restart rule and with only orders restarting a cancelled row.
//!
//! With removals, no sequential fold is the reference (a removal does not
//! commute with the other sources' events of one write), so the reference
//! is the same batches without faults: a fault may change how many writes
//! a row takes, never what it holds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use eddy_dynamo::{
    get_str, process_batch_delivering, BatchProjection, ChangeFeed, ChangeRecord, EffectCommit,
    Outbox,
};
use proptest::prelude::*;

use crate::common::{sqlite_table, table, TestTable};
use crate::faults::{Call, Fault, Faulty};
use crate::freight::{shipment, Freight, NoticesFn, Restart};
use crate::multi_props::{
    append_ops, deliveries, every_event, fates, first_deliveries, op, FlakyConsumer, Op,
};

fn op_or_cancel() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => op(),
        1 => (0..2usize, 0..3usize).prop_map(|(order, shipment)| Op::Cancel { order, shipment }),
    ]
}

/// The records as another shard layout delivers them: each stream
/// instance's records in their own order, the instances interleaved as
/// `picks` says.
fn reordered(records: &[ChangeRecord], picks: &[usize]) -> Vec<ChangeRecord> {
    let mut queues: Vec<(String, VecDeque<ChangeRecord>)> = Vec::new();
    for record in records {
        let pk = get_str(&record.change.keys, "pk")
            .unwrap_or_default()
            .to_owned();
        match queues.iter_mut().find(|(p, _)| *p == pk) {
            Some((_, queue)) => queue.push_back(record.clone()),
            None => queues.push((pk, VecDeque::from([record.clone()]))),
        }
    }
    let mut out = Vec::with_capacity(records.len());
    for step in 0.. {
        queues.retain(|(_, q)| !q.is_empty());
        if queues.is_empty() {
            break;
        }
        let pick = picks.get(step).copied().unwrap_or(0) % queues.len();
        out.extend(queues[pick].1.pop_front());
    }
    out
}

/// A fault, armed before batch `batch` (modulo the batches).
#[derive(Debug, Clone)]
struct Planned {
    kind: u8,
    target: usize,
    times: usize,
    batch: usize,
}

fn planned() -> impl Strategy<Value = Planned> {
    (0..5u8, 0..3usize, 1..3usize, 0..10usize).prop_map(|(kind, target, times, batch)| Planned {
        kind,
        target,
        times,
        batch,
    })
}

impl Planned {
    fn fault(&self) -> Fault {
        let row = format!("ShipmentSummary#shipmentId=sh-{}", self.target);
        match self.kind {
            0 => Fault::new(
                Call::Query,
                format!("$stream#Order#orderId=o-{}", self.target % 2),
                self.times,
            ),
            1 => Fault::new(
                Call::Query,
                format!("$stream#Weigh#sessionId=w-{}", self.target % 2),
                self.times,
            ),
            2 => Fault::new(Call::GetItem, row, self.times),
            3 => Fault::new(Call::Write, row, self.times),
            _ => Fault::new(Call::AckLost, row, self.times),
        }
    }
}

/// A delivery plan: the ops, the interleaving, the cuts, duplicates, the
/// batch delivered again, the faults, and whether only orders restart a
/// cancelled shipment.
type Plan = (
    Vec<Op>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    usize,
    Vec<Planned>,
    bool,
);

fn plan() -> impl Strategy<Value = Plan> {
    (
        proptest::collection::vec(op_or_cancel(), 1..30),
        proptest::collection::vec(0..8usize, 0..30),
        proptest::collection::vec(0..40usize, 0..6),
        proptest::collection::vec(0..40usize, 0..5),
        0..10usize,
        proptest::collection::vec(planned(), 0..6),
        any::<bool>(),
    )
}

/// The freight projection with an outbox notice per applied event.
fn shipments(f: &Freight, orders_only: bool) -> crate::multi::Shipments {
    let outbox = Outbox::new(&f.summaries)
        .and_then(|o| o.with_index("gsi1"))
        .unwrap();
    let outbox: Arc<dyn EffectCommit> = Arc::new(outbox);
    let restart = if orders_only {
        Restart::OrdersOnly
    } else {
        Restart::AnySource
    };
    f.projection_restarting(Some((outbox, every_event as NoticesFn)), restart)
        .unwrap()
}

/// What a user sees of a shipment: its parts and checkpoints, or only the
/// checkpoints of its tombstone.
async fn view(
    f: &Freight,
    id: &str,
) -> (
    Option<(u64, String, u64)>,
    Option<eddy_dynamo::AttributeValue>,
) {
    let key = f.summaries.key(&shipment(id)).unwrap();
    let Some(item) = f.summaries.table().get_item(key).await.unwrap() else {
        return (None, None);
    };
    let checkpoints = item.get("checkpoints").cloned();
    if !f.summaries.owns(&item) {
        return (None, checkpoints);
    }
    let row: crate::freight::ShipmentSummary = f.summaries.decode(item).unwrap();
    (Some((row.parcels, row.location, row.kg)), checkpoints)
}

async fn scenario(t: TestTable, plan: Plan, fates: Vec<u8>) -> Result<(), TestCaseError> {
    let (ops, picks, cuts, duplicates, redeliver, faults, orders_only) = plan;
    let faulty_table = Faulty::new(t.table.clone());
    let events = Freight::new(t.table.clone()).unwrap();
    let clean = Freight::with_read_model(t.table.clone(), "CleanSummary").unwrap();
    let faulty = Freight::with_read_model(faulty_table.clone(), "ShipmentSummary").unwrap();
    append_ops(&events, &ops).await;
    let records = t.read_changes(None, 10_000).await.unwrap().into_records();
    prop_assert_eq!(records.len(), ops.len());
    let records = reordered(&records, &picks);

    let clean_p = shipments(&clean, orders_only);
    let reliable = FlakyConsumer::new(Vec::new());
    let one: [&dyn BatchProjection; 1] = [&clean_p];
    for batch in deliveries(&records, &cuts, &[], 0) {
        let result = process_batch_delivering(&batch, &one, &reliable.deliver()).await;
        prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
    }

    let faulty_p = shipments(&faulty, orders_only);
    let flaky = FlakyConsumer::new(fates);
    let mine: [&dyn BatchProjection; 1] = [&faulty_p];
    let batches = deliveries(&records, &cuts, &duplicates, redeliver);
    for (at, batch) in batches.iter().enumerate() {
        for fault in faults.iter().filter(|f| f.batch % batches.len() == at) {
            faulty_table.arm(fault.fault());
        }
        // Lambda delivers a failed batch again from its first failed record.
        let mut rest = batch.clone();
        for delivery in 1.. {
            let result = process_batch_delivering(&rest, &mine, &flaky.deliver()).await;
            let Some(first) = result.first_failure() else {
                break;
            };
            prop_assert!(delivery < 20, "still failing: {:?}", result.failures);
            let codes: Vec<&str> = result.failures.iter().map(|f| f.code.as_str()).collect();
            prop_assert!(
                codes
                    .iter()
                    .all(|c| ["storage-unavailable", "Deferred", "InstancesFailed"].contains(c)),
                "only the faults fail: {:?}",
                result.failures
            );
            rest = rest[first..].to_vec();
        }
    }
    faulty_table.disarm();
    crate::multi_props::sweep(&faulty_p, &flaky).await?;

    let (want_all, got_all) = (reliable.seen(), flaky.seen());
    for s in 0..3 {
        let id = format!("sh-{s}");
        prop_assert_eq!(
            view(&faulty, &id).await,
            view(&clean, &id).await,
            "shipment {}",
            id
        );
        let got = first_deliveries(&got_all, &id);
        crate::multi_props::in_commit_order(&got, &id)?;
        // The same effects, in the same order within each source instance.
        let by_instance = |seen: &[crate::multi_props::Seen]| {
            let mut all: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
            for s in seen {
                all.entry(format!("{}#{}", s.source, s.stream))
                    .or_default()
                    .push((s.version, s.kind.clone()));
            }
            all
        };
        let want = first_deliveries(&want_all, &id);
        prop_assert_eq!(by_instance(&got), by_instance(&want), "effects of {}", id);
    }
    Ok(())
}

fn run(t: TestTable, plan: Plan, fates: Vec<u8>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(scenario(t, plan, fates))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn removals_under_faults_and_reordering_end_as_without_faults(plan in plan(), fates in fates()) {
        run(table(), plan, fates)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn removals_under_faults_and_reordering_end_as_without_faults_on_sqlite(
        plan in plan(),
        fates in fates(),
    ) {
        run(sqlite_table(), plan, fates)?;
    }
}

#[cfg(feature = "aws")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 2, ..ProptestConfig::default() })]

    #[test]
    fn removals_under_faults_and_reordering_end_as_without_faults_on_dynamodb(
        plan in plan(),
        fates in fates(),
    ) {
        crate::multi_props::on_dynamodb(|t| scenario(t, plan, fates))?;
    }
}
