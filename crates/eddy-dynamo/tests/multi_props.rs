//! Property tests of multi-source rows: random interleavings of the three
//! freight sources, random batch splits, duplicated and redelivered
//! records fold to the same rows and checkpoints as one sequential fold
//! (each record alone, in feed order); with an outbox and deliveries that
//! fail at random, the effects reach the consumer in order per row, at
//! least once, and are those of the sequential fold.

use std::sync::Arc;

use eddy_dynamo::{
    process_batch, process_batch_delivering, BatchProjection, ChangeFeed, ChangeRecord,
};
use proptest::prelude::*;

use crate::common::{sqlite_table, table, TestTable};
use crate::freight::{shipment, Freight, OrderEvent, ScanEvent, ShipmentNotice, WeighEvent};
use crate::multi::append;

/// One event of the scenario. These properties leave cancellations out: a
/// removal resets every source's part of the row, so it does not commute
/// with the other sources' events of the same write (the spec folds
/// sources in declaration order within a write), and no sequential fold is
/// the reference. `fault_props.rs` includes them, with faults, against the
/// same delivery without faults.
#[derive(Debug, Clone)]
pub enum Op {
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
    /// An order cancels one of its shipments: the row is removed.
    Cancel {
        order: usize,
        shipment: usize,
    },
}

pub fn op() -> impl Strategy<Value = Op> {
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

pub async fn append_ops(f: &Freight, ops: &[Op]) {
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
            Op::Cancel { order, shipment } => {
                let id = f.orders.id([("orderId", format!("o-{order}"))]).unwrap();
                let cancel = OrderEvent::OrderCancelled {
                    shipment_id: format!("sh-{shipment}"),
                };
                append(&f.orders, &id, &[cancel]).await;
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
pub fn deliveries(
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
    let records = t.read_changes(None, 10_000).await.unwrap().into_records();
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

/// Runs one property case on a fresh moto table (unless moto is skipped).
#[cfg(feature = "aws")]
pub fn on_dynamodb<F>(case: impl FnOnce(TestTable) -> F) -> Result<(), TestCaseError>
where
    F: std::future::Future<Output = Result<(), TestCaseError>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match runtime.block_on(crate::moto::test_table(crate::common::schema())) {
        Some(t) => runtime.block_on(case(t)),
        None => Ok(()),
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
        on_dynamodb(|t| scenario(t, ops, cuts, duplicates, redeliver))?;
    }
}

/// Every applied event leaves one notice naming its source, so the
/// effects of all three sources are compared (the spec's example only
/// notifies scans).
pub fn every_event(
    event: &eddy_dynamo::EffectEvent<'_>,
    next: Option<&crate::freight::ShipmentSummary>,
) -> Vec<ShipmentNotice> {
    next.map(|row| ShipmentNotice {
        shipment_id: row.shipment_id.clone(),
        kind: match event.event_type {
            "Scanned" => format!("at {}", row.location),
            other => other.to_owned(),
        },
    })
    .into_iter()
    .collect()
}

/// One delivery as the consumer saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub shipment: String,
    pub source: String,
    pub stream: String,
    pub version: u64,
    /// Where the outbox committed it in its row: (revision, position).
    pub at: (u64, u32),
    pub kind: String,
}

/// A consumer whose deliveries fail as `plan` says, in turn: 0 fails
/// before the consumer has the effect, 1 after (the ack is lost: a
/// duplicate follows), anything else succeeds.
#[derive(Clone)]
pub struct FlakyConsumer {
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    plan: Arc<Vec<u8>>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl FlakyConsumer {
    pub fn new(plan: Vec<u8>) -> Self {
        Self {
            seen: Arc::default(),
            plan: Arc::new(plan),
            calls: Arc::default(),
        }
    }
    pub fn deliver(
        &self,
    ) -> impl Fn(
        eddy_dynamo::Effect,
    ) -> futures::future::BoxFuture<'static, Result<(), eddy_dynamo::BoxError>>
           + Send
           + Sync {
        let consumer = self.clone();
        move |effect| {
            let call = consumer
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let fate = match consumer.plan.len() {
                0 => 2,
                len => consumer.plan[call % len],
            };
            let seen = consumer.seen.clone();
            Box::pin(async move {
                if fate == 0 {
                    return Err("the consumer is down".into());
                }
                let notice: ShipmentNotice = effect.decode()?;
                seen.lock().unwrap().push(Seen {
                    shipment: notice.shipment_id,
                    source: effect.source.clone(),
                    stream: effect.stream_id.to_string(),
                    version: effect.version,
                    at: (effect.revision, effect.position),
                    kind: notice.kind,
                });
                if fate == 1 {
                    return Err("the ack was lost".into());
                }
                Ok(())
            })
        }
    }
    /// The same consumer (what it saw so far), no longer failing.
    pub fn steady(&self) -> Self {
        Self {
            plan: Arc::new(Vec::new()),
            ..self.clone()
        }
    }
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Sweeps what failed deliveries left pending to `consumer`, no longer
/// failing, until none is left.
pub async fn sweep(
    p: &crate::multi::Shipments,
    consumer: &FlakyConsumer,
) -> Result<(), TestCaseError> {
    p.drain_pending(&consumer.steady().deliver()).await.unwrap();
    prop_assert!(p.pending_rows().await.unwrap().is_empty());
    Ok(())
}

/// Whether a row's first deliveries came in the order the outbox
/// committed them: (revision, position) ascending.
pub fn in_commit_order(firsts: &[Seen], row: &str) -> Result<(), TestCaseError> {
    let commits: Vec<(u64, u32)> = firsts.iter().map(|g| g.at).collect();
    let mut sorted = commits.clone();
    sorted.sort_unstable();
    sorted.dedup();
    prop_assert_eq!(&commits, &sorted, "{} delivered out of order", row);
    Ok(())
}

/// The first delivery of each effect of a shipment, in delivery order.
pub fn first_deliveries(seen: &[Seen], shipment: &str) -> Vec<Seen> {
    let mut firsts: Vec<Seen> = Vec::new();
    for s in seen.iter().filter(|s| s.shipment == shipment) {
        let again = firsts
            .iter()
            .any(|f| (f.stream.as_str(), f.version, f.at) == (s.stream.as_str(), s.version, s.at));
        if !again {
            firsts.push(s.clone());
        }
    }
    firsts
}

async fn scenario_with_effects(
    t: TestTable,
    ops: Vec<Op>,
    cuts: Vec<usize>,
    duplicates: Vec<usize>,
    redeliver: usize,
    fates: Vec<u8>,
) -> Result<(), TestCaseError> {
    let f = Freight::with_read_model(t.table.clone(), "NotifiedSummary").unwrap();
    let reference = Freight::with_read_model(t.table.clone(), "ReferenceSummary").unwrap();
    append_ops(&f, &ops).await;
    let records: Vec<ChangeRecord> = t.read_changes(None, 10_000).await.unwrap().into_records();
    prop_assert_eq!(records.len(), ops.len());
    let outbox = |summaries| {
        let outbox = eddy_dynamo::Outbox::new(summaries)
            .and_then(|o| o.with_index("gsi1"))
            .unwrap();
        let commit: Arc<dyn eddy_dynamo::EffectCommit> = Arc::new(outbox);
        Some((commit, every_event as crate::freight::NoticesFn))
    };

    // The reference: each record alone, every delivery succeeding.
    let sequential = reference
        .projection_with(outbox(&reference.summaries))
        .unwrap();
    let reliable = FlakyConsumer::new(Vec::new());
    let one: [&dyn BatchProjection; 1] = [&sequential];
    for record in &records {
        let result =
            process_batch_delivering(std::slice::from_ref(record), &one, &reliable.deliver()).await;
        prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
    }

    let batched = f.projection_with(outbox(&f.summaries)).unwrap();
    let flaky = FlakyConsumer::new(fates);
    let mine: [&dyn BatchProjection; 1] = [&batched];
    for batch in deliveries(&records, &cuts, &duplicates, redeliver) {
        let result = process_batch_delivering(&batch, &mine, &flaky.deliver()).await;
        prop_assert!(result.failures.is_empty(), "{:?}", result.failures);
    }
    sweep(&batched, &flaky).await?;

    let (want_all, got_all) = (reliable.seen(), flaky.seen());
    for s in 0..3 {
        let id = format!("sh-{s}");
        let key = shipment(&id);
        let strip = |r: Option<crate::freight::ShipmentSummary>| {
            r.map(|r| (r.parcels, r.location, r.kg, r.checkpoints))
        };
        prop_assert_eq!(
            strip(f.summaries.get(&key).await.unwrap()),
            strip(reference.summaries.get(&key).await.unwrap()),
            "shipment {}",
            id
        );
        let want = first_deliveries(&want_all, &id);
        let got = first_deliveries(&got_all, &id);
        in_commit_order(&got, &id)?;
        // At least once, and the same effects as the sequential fold:
        // every fold-mode event's; of the scans (latest mode), the ones
        // a batch applied, always including the last.
        let events = |v: &[Seen], scans: bool| {
            let mut e: Vec<(String, String, u64, String)> = v
                .iter()
                .filter(|s| (s.source == "scan") == scans)
                .map(|s| {
                    (
                        s.source.clone(),
                        s.stream.clone(),
                        s.version,
                        s.kind.clone(),
                    )
                })
                .collect();
            e.sort();
            e
        };
        prop_assert_eq!(events(&got, false), events(&want, false), "{}", id);
        let (got_scans, want_scans) = (events(&got, true), events(&want, true));
        prop_assert!(
            got_scans.iter().all(|g| want_scans.contains(g)),
            "{}: {:?} not among {:?}",
            id,
            got_scans,
            want_scans
        );
        prop_assert_eq!(got_scans.last(), want_scans.last(), "{}: the last scan", id);
    }
    Ok(())
}

fn run_with_effects(
    t: TestTable,
    (ops, cuts, duplicates, redeliver): (Vec<Op>, Vec<usize>, Vec<usize>, usize),
    fates: Vec<u8>,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(scenario_with_effects(
        t, ops, cuts, duplicates, redeliver, fates,
    ))
}

/// Delivery fates: mostly successes, some failures before and after the
/// consumer has the effect.
pub fn fates() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0..6u8, 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn effects_reach_the_consumer_in_order_per_row_at_least_once(
        plan in plan(),
        fates in fates(),
    ) {
        run_with_effects(table(), plan, fates)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    #[test]
    fn effects_reach_the_consumer_in_order_per_row_at_least_once_on_sqlite(
        plan in plan(),
        fates in fates(),
    ) {
        run_with_effects(sqlite_table(), plan, fates)?;
    }
}

#[cfg(feature = "aws")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 2, ..ProptestConfig::default() })]

    #[test]
    fn effects_reach_the_consumer_in_order_per_row_at_least_once_on_dynamodb(
        plan in plan(),
        fates in fates(),
    ) {
        on_dynamodb(|t| scenario_with_effects(t, plan.0, plan.1, plan.2, plan.3, fates))?;
    }
}
