//! Single-source projections: fold, checkpoints, gap fill, terminal, guards.

use std::sync::Arc;

use eddy_dynamo::{
    get_u64, make_stream, Entity, KeyComposite, Projection, Step, StoredEvent, Table,
};
use serde_json::json;

use crate::common::{
    app, empty_summary, key, line, orders, placed, summaries, summary_of, summary_projection,
    table, Only, OrderError, OrderEvent, OrderSummary, SummaryKey, SummaryProjection, TestTable,
};

async fn history(
    t: &TestTable,
    order: &str,
    events: &[OrderEvent],
) -> Vec<StoredEvent<OrderEvent>> {
    let stream = orders(t);
    let id = stream.id([("orderId", order)]).unwrap();
    stream.append(&id, events, 0).await.unwrap();
    stream.read(&id).await.unwrap()
}

pub async fn folds_in_version_order_and_recognises_redelivery(t: TestTable) {
    let p = summary_projection(&t, false);
    let events = history(&t, "o-1", &[placed("ann"), line(2, 100), line(1, 50)]).await;
    let mut shuffled = events.clone();
    shuffled.reverse();
    let out = p.apply_batch(shuffled).await.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].only().applied, [1, 2, 3]);
    assert_eq!(out[0].only().checkpoint, 3);
    assert!(out[0].written && out[0].is_applied());
    let row = out[0].state.clone().unwrap();
    assert_eq!(
        (row.customer.as_str(), row.lines, row.total_cents),
        ("ann", 2, 250)
    );
    assert_eq!(
        summaries(&t).get(&key("o-1")).await.unwrap(),
        Some(row.clone())
    );

    let again = p.apply_batch(events).await.unwrap();
    assert_eq!(again[0].only().already_applied, [1, 2, 3]);
    assert!(again[0].only().applied.is_empty() && !again[0].written);
    assert_eq!(again[0].state, Some(row));
    assert_eq!(p.checkpoint(&key("o-1")).await.unwrap(), 3);
}

pub async fn a_gap_is_filled_from_the_event_store(t: TestTable) {
    let p = summary_projection(&t, false);
    let events = history(
        &t,
        "o-1",
        &[placed("ann"), line(1, 10), line(1, 20), line(1, 30)],
    )
    .await;
    let out = p
        .apply_batch(vec![events[3].clone(), events[1].clone()])
        .await
        .unwrap();
    assert_eq!(out[0].only().applied, [1, 2, 3, 4]);
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 60);
}

pub async fn terminal_failures_move_the_checkpoint_and_others_stop_it(t: TestTable) {
    let p = summary_projection(&t, false);
    let events = history(&t, "o-1", &[placed("ann"), line(0, 10), line(1, 20)]).await;
    let out = p.apply_batch(events).await.unwrap();
    assert_eq!(
        (
            out[0].only().applied.clone(),
            out[0].only().rejected.clone()
        ),
        (vec![1, 3], vec![2])
    );
    assert_eq!(out[0].only().checkpoint, 3);
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 20);

    // A line before placement fails the row: nothing precedes it, so nothing is written.
    let events = history(&t, "o-2", &[line(1, 5), placed("bob")]).await;
    let out = p.apply_batch(events).await.unwrap();
    let failure = out[0].first_failure().expect("the row failed");
    assert_eq!(failure.code(), "EvolveFailed");
    assert_eq!(out[0].only().checkpoint, 0);
    assert!(!out[0].written);
    assert_eq!(summaries(&t).get(&key("o-2")).await.unwrap(), None);
}

pub async fn the_revision_increments_with_every_write(t: TestTable) {
    let p = summary_projection(&t, true);
    let events = history(&t, "o-1", &[placed("ann"), line(1, 10), line(1, 20)]).await;
    let first = p.apply_batch(events[..2].to_vec()).await.unwrap();
    assert_eq!(first[0].revision, Some(1));
    let second = p.apply_batch(events.clone()).await.unwrap();
    assert_eq!(
        (second[0].revision, second[0].only().applied.clone()),
        (Some(2), vec![3])
    );
    let item = summaries(&t).get_item(&key("o-1")).await.unwrap().unwrap();
    assert_eq!(
        (get_u64(&item, "revision"), get_u64(&item, "version")),
        (Some(2), Some(3))
    );
}

pub async fn a_second_instance_feeding_one_row_is_a_source_conflict(t: TestTable) {
    let shared: Projection<OrderEvent, OrderSummary, SummaryKey> =
        Projection::builder("by-customer", summaries(&t), orders(&t))
            .key(|_, _| Some(key("shared")))
            .initial(|_| OrderSummary {
                order_id: "shared".into(),
                customer: String::new(),
                lines: 0,
                total_cents: 0,
                cancelled: false,
            })
            .evolve(|row, _| Ok(row))
            .build()
            .unwrap();
    let a = history(&t, "o-1", &[placed("ann")]).await;
    let b = history(&t, "o-2", &[placed("bob")]).await;
    shared.apply_batch(a).await.unwrap();
    let out = shared.apply_batch(b).await.unwrap();
    assert_eq!(
        out[0].first_failure().map(|e| e.code()),
        Some("ProjectionSourceConflict")
    );
}

pub async fn a_row_key_that_does_not_compose_is_refused_before_writing(t: TestTable) {
    /// Not the summaries' key: it lacks `orderId`.
    #[derive(serde::Serialize)]
    struct CustomerKey {
        customer: String,
    }
    let bad: Projection<OrderEvent, OrderSummary, CustomerKey> =
        Projection::builder("bad", summaries(&t), orders(&t))
            .key(|_, _| {
                Some(CustomerKey {
                    customer: "x".into(),
                })
            })
            .initial(|_| unreachable!("never called: the key does not compose"))
            .evolve(|row, _| Ok(row))
            .build()
            .unwrap();
    let events = history(&t, "o-1", &[placed("ann")]).await;
    assert_eq!(
        bad.apply_batch(events).await.unwrap_err().code(),
        "KeyComposeError"
    );
    let missing =
        Projection::<OrderEvent, OrderSummary, SummaryKey>::builder("x", summaries(&t), orders(&t))
            .evolve(|row, _| Ok(row))
            .build();
    assert_eq!(missing.unwrap_err().code(), "InvalidArgument");
}

/// Two writers racing on one row, each with part of its events, lose none.
async fn race(revision: bool, make: fn() -> TestTable) {
    for round in 0..10 {
        let t = make();
        let p = summary_projection(&t, revision);
        let mut events = vec![placed("ann")];
        events.extend((1..=12).map(|i| line(1, i)));
        let events = history(&t, &format!("o-{round}"), &events).await;
        let (odd, even): (Vec<_>, Vec<_>) =
            events.iter().cloned().partition(|e| e.version % 2 == 1);
        let (p1, p2) = (p.clone(), p.clone());
        let a = tokio::spawn(async move { p1.apply_batch(odd).await });
        let b = tokio::spawn(async move { p2.apply_batch(even).await });
        for result in [a.await.unwrap().unwrap(), b.await.unwrap().unwrap()] {
            assert!(result[0].is_applied(), "{:?}", result[0].first_failure());
        }
        let row = summary_of(&t, &format!("o-{round}")).await;
        assert_eq!(
            (row.lines, row.total_cents),
            (12, (1..=12).sum::<u64>()),
            "round {round}"
        );
        assert_eq!(p.checkpoint(&key(&format!("o-{round}"))).await.unwrap(), 13);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_lose_no_event_under_the_checkpoint_guard() {
    race(false, table).await;
    race(false, crate::common::sqlite_table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_lose_no_event_under_the_revision_guard() {
    race(true, table).await;
    race(true, crate::common::sqlite_table).await;
}

pub async fn events_of_another_stream_with_the_same_ids_are_not_mixed_in(t: TestTable) {
    let p = summary_projection(&t, false);
    let other: eddy_dynamo::EventStream<OrderEvent> =
        make_stream(Arc::new(t.clone()), app(), "Archive", &["orderId"]).unwrap();
    let id = other.id([("orderId", "o-1")]).unwrap();
    other
        .append(&id, &[placed("zed"), line(1, 999)], 0)
        .await
        .unwrap();
    let events = history(&t, "o-1", &[placed("ann"), line(1, 1)]).await;
    let out = p.apply_batch(vec![events[1].clone()]).await.unwrap();
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 1);
    let _ = Entity::<OrderSummary>::new(
        Arc::new(t.clone()),
        app(),
        "X",
        KeyComposite::new(&["a"], &[]),
    );
    assert!(t
        .get_item(summaries(&t).key(&key("o-1")).unwrap())
        .await
        .unwrap()
        .is_some());
}

/// Folding a batch into rows costs, per touched row, one read of the row
/// and one guarded write: no transaction, no read-modify-write beyond it.
pub async fn folding_a_batch_costs_one_write_per_touched_row(t: TestTable) {
    let p = summary_projection(&t, false);
    let mut batch = Vec::new();
    for order in ["o-1", "o-2", "o-3"] {
        batch.extend(history(&t, order, &[placed("ann"), line(1, 10), line(2, 5)]).await);
    }
    let before = t.request_stats();
    let out = p.apply_batch(batch).await.unwrap();
    let cost = t.request_stats() - before;
    assert_eq!(out.len(), 3);
    assert!(out
        .iter()
        .all(|row| row.written && row.only().applied == [1, 2, 3]));
    eprintln!("{}: folding 9 events into 3 rows cost {cost:?}", t.backend);
    assert_eq!(cost.writes, 3, "one write per touched row on {}", t.backend);
    assert_eq!(cost.items_written, 3);
    assert_eq!(cost.transactions, 0);
    assert_eq!(cost.reads, 3, "one read per touched row on {}", t.backend);

    // Redelivery of the same batch reads the rows and writes nothing.
    let events = [history_of(&t, "o-1").await, history_of(&t, "o-2").await].concat();
    let before = t.request_stats();
    p.apply_batch(events).await.unwrap();
    let cost = t.request_stats() - before;
    assert_eq!((cost.writes, cost.transactions), (0, 0), "{cost:?}");
}

async fn history_of(t: &TestTable, order: &str) -> Vec<StoredEvent<OrderEvent>> {
    let stream = orders(t);
    let id = stream.id([("orderId", order)]).unwrap();
    stream.read(&id).await.unwrap()
}

/// A tally whose optional fields serde writes as `NULL` when `None`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tally {
    id: String,
    count: u64,
    note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
enum TallyEvent {
    Counted { by: u64 },
}

fn tally_projection(t: &TestTable, revision: bool) -> Projection<TallyEvent, Tally, TallyKey> {
    let tallies = Entity::new(
        t.table.clone(),
        app(),
        "Tally",
        KeyComposite::new(&["id"], &[]),
    );
    let stream = make_stream(t.table.clone(), app(), "Tally", &["id"]).unwrap();
    let builder = Projection::builder("tallies", tallies, stream)
        .key(|id, _| id.get("id").map(|id| TallyKey { id: id.to_owned() }))
        .initial(|key: &TallyKey| Tally {
            id: key.id.clone(),
            count: 0,
            note: None,
        })
        .evolve(|mut row, event| {
            let TallyEvent::Counted { by } = event.event;
            row.count += by;
            Ok(row)
        })
        .checkpoint("version");
    let builder = if revision {
        builder.revision("revision")
    } else {
        builder
    };
    builder.build().unwrap()
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct TallyKey {
    id: String,
}

/// Regression (NULL is absent): serde writes `Option::None` as DynamoDB
/// `NULL`. A row written before the projection with `NULL` checkpoint,
/// revision and owner fields was guarded with `attribute_not_exists`, which
/// never holds for a `NULL` attribute, so the record was retried until it
/// failed. Such rows now end exactly like fresh rows, and no projection
/// write stores `NULL`.
pub async fn legacy_rows_with_null_fields_are_projected_like_fresh_rows(t: TestTable) {
    for revision in [false, true] {
        let p = tally_projection(&t, revision);
        let stream = p.stream().clone();
        let (fresh, legacy) = (format!("fresh-{revision}"), format!("legacy-{revision}"));
        let mut batch = Vec::new();
        for id in [&fresh, &legacy] {
            let id = stream.id([("id", id.as_str())]).unwrap();
            let events = [TallyEvent::Counted { by: 2 }, TallyEvent::Counted { by: 3 }];
            stream.append(&id, &events, 0).await.unwrap();
            batch.extend(stream.read(&id).await.unwrap());
        }
        // The legacy row, as a writer that knew nothing of the projection
        // stored it: every optional field NULL.
        let mut row = p
            .read_model()
            .to_item(&Tally {
                id: legacy.clone(),
                count: 0,
                note: None,
            })
            .unwrap();
        for field in ["note", "version", "revision", eddy_dynamo::SOURCE_ATTRIBUTE] {
            row.insert(field.to_owned(), eddy_dynamo::AttributeValue::Null(true));
        }
        t.put_item(eddy_dynamo::Put::new(row)).await.unwrap();

        let out = p.apply_batch(batch).await.unwrap();
        assert_eq!(out.len(), 2);
        for row in &out {
            assert!(row.is_applied(), "{:?}", row.first_failure());
        }
        let stored = |id: String| {
            let p = p.clone();
            async move {
                let mut item = p
                    .read_model()
                    .get_item(&TallyKey { id })
                    .await
                    .unwrap()
                    .unwrap();
                for key in ["pk", "sk", "id", eddy_dynamo::SOURCE_ATTRIBUTE] {
                    item.remove(key);
                }
                item
            }
        };
        let (fresh_item, legacy_item) = (stored(fresh).await, stored(legacy).await);
        assert_eq!(fresh_item, legacy_item, "revision guard: {revision}");
        assert!(
            !fresh_item
                .values()
                .any(|v| matches!(v, eddy_dynamo::AttributeValue::Null(_))),
            "a projection write stores no NULL: {fresh_item:?}"
        );
        assert_eq!(get_u64(&fresh_item, "count"), Some(5));
        assert_eq!(get_u64(&fresh_item, "version"), Some(2));
        if revision {
            assert_eq!(get_u64(&fresh_item, "revision"), Some(1));
        }
    }
}

/// A table that hides one event version from queries: an eventually
/// consistent read, a trimmed stream or the wrong table, as gap fill sees it.
struct HidingTable {
    table: Arc<dyn Table>,
    hidden: u64,
}

#[async_trait::async_trait]
impl Table for HidingTable {
    fn schema(&self) -> &eddy_dynamo::TableSchema {
        self.table.schema()
    }
    async fn get_item(
        &self,
        key: eddy_dynamo::Item,
    ) -> Result<Option<eddy_dynamo::Item>, eddy_dynamo::TableError> {
        self.table.get_item(key).await
    }
    async fn transact_get_items(
        &self,
        keys: Vec<eddy_dynamo::Item>,
    ) -> Result<Vec<Option<eddy_dynamo::Item>>, eddy_dynamo::TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(
        &self,
        query: eddy_dynamo::Query,
    ) -> Result<eddy_dynamo::QueryPage, eddy_dynamo::TableError> {
        let mut page = self.table.query(query).await?;
        page.items
            .retain(|item| get_u64(item, "version") != Some(self.hidden));
        Ok(page)
    }
    async fn transact_write_items(
        &self,
        items: Vec<eddy_dynamo::TransactWriteItem>,
    ) -> Result<(), eddy_dynamo::TableError> {
        self.table.transact_write_items(items).await
    }
}

/// Regression (gap fill accepted partial history): a gap filled from the
/// event store folded whatever the read returned, so a missing version was
/// skipped silently and the checkpoint moved past it. Now the instance fails
/// with `history-incomplete`, nothing is written, and the record is
/// reported in the partial batch response.
pub async fn a_gap_fill_missing_a_version_fails_and_moves_nothing(t: TestTable) {
    let hiding = t.wrapped(Arc::new(HidingTable {
        table: t.table.clone(),
        hidden: 2,
    }));
    let p = summary_projection(&hiding, false);
    let events = history(&t, "o-1", &[placed("ann"), line(1, 10), line(1, 20)]).await;
    let out = p.apply_batch(vec![events[2].clone()]).await.unwrap();
    let failure = out[0].first_failure().expect("the instance failed");
    assert_eq!(failure.code(), "history-incomplete");
    assert!(!out[0].written);
    assert_eq!(p.checkpoint(&key("o-1")).await.unwrap(), 0);

    let records: Vec<_> = eddy_dynamo::ChangeFeed::read_changes(&t, None, 100)
        .await
        .unwrap()
        .into_records()
        .into_iter()
        .filter(|r| r.event_name == "INSERT")
        .collect();
    let last = records.last().unwrap().clone();
    let result = eddy_dynamo::process_batch(
        std::slice::from_ref(&last),
        &[&p as &dyn eddy_dynamo::BatchProjection],
    )
    .await;
    assert_eq!(result.failures[0].code, "history-incomplete");
    assert_eq!(
        serde_json::to_value(&result.response).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": last.change.sequence_number}]})
    );
    assert_eq!(p.checkpoint(&key("o-1")).await.unwrap(), 0);

    // The whole history folds once every version is there.
    let out = summary_projection(&t, false)
        .apply_batch(vec![events[2].clone()])
        .await
        .unwrap();
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 30);
}

/// Regression (counter overflow): a row whose revision is at `u64::MAX`
/// panicked with "attempt to add with overflow" on its next write. Now the
/// row fails with `CounterOverflow` and is left as it is.
pub async fn a_revision_at_its_maximum_is_a_clear_error(t: TestTable) {
    let p = tally_projection(&t, true);
    let stream = p.stream().clone();
    let id = stream.id([("id", "t-1")]).unwrap();
    stream
        .append(&id, &[TallyEvent::Counted { by: 1 }], 0)
        .await
        .unwrap();
    let mut row = p
        .read_model()
        .to_item(&Tally {
            id: "t-1".into(),
            count: 0,
            note: Some("legacy".into()),
        })
        .unwrap();
    row.insert("revision".into(), eddy_dynamo::n(u64::MAX));
    t.put_item(eddy_dynamo::Put::new(row.clone()))
        .await
        .unwrap();
    let out = p
        .apply_batch(stream.read(&id).await.unwrap())
        .await
        .unwrap();
    let failure = out[0].first_failure().expect("the row failed");
    assert_eq!(failure.code(), "CounterOverflow");
    assert!(!out[0].written);
}

/// A projection whose `evolve` skips lines without a quantity, rejects (as
/// terminal) lines without a price, fails lines of 99 with an error of
/// another type that has the same message, and removes cancelled orders.
fn picky(t: &TestTable) -> SummaryProjection {
    Projection::builder("picky", summaries(t), orders(t))
        .key(|id, _| id.get("orderId").map(key))
        .initial(empty_summary)
        .evolve(|mut row, event| {
            match &event.event {
                OrderEvent::Placed { customer } => row.customer = customer.clone(),
                OrderEvent::LineAdded { qty: 0, .. } => return Ok(Step::Skip),
                OrderEvent::LineAdded { cents: 0, .. } => return Err(OrderError::NoQuantity.into()),
                OrderEvent::LineAdded { qty: 99, .. } => {
                    return Err(std::io::Error::other(OrderError::NoQuantity.to_string()).into())
                }
                OrderEvent::LineAdded { qty, cents, .. } => {
                    row.lines += 1;
                    row.total_cents += u64::from(*qty) * cents;
                }
                OrderEvent::Cancelled => return Ok(Step::Remove),
            }
            Ok(Step::Next(row))
        })
        .terminal(|e: &OrderError| matches!(e, OrderError::NoQuantity))
        .checkpoint("version")
        .build()
        .unwrap()
}

/// A skipped event is reported, not applied, writes nothing on its own,
/// and does not move the checkpoint: the next gap fill decides it again.
pub async fn skipped_events_write_nothing_and_are_decided_again(t: TestTable) {
    let p = picky(&t);
    let events = history(&t, "o-1", &[placed("ann"), line(0, 10)]).await;
    let out = p.apply_batch(events.clone()).await.unwrap();
    let row = out[0].only();
    assert_eq!(
        (row.applied.clone(), row.skipped.clone()),
        (vec![1], vec![2])
    );
    assert_eq!(
        row.checkpoint, 1,
        "the checkpoint stops at the last applied event"
    );
    assert!(out[0].written);

    let before = t.request_stats();
    let again = p.apply_batch(vec![events[1].clone()]).await.unwrap();
    assert_eq!(again[0].only().skipped, [2]);
    assert!(!again[0].written && again[0].is_applied());
    assert_eq!(
        (t.request_stats() - before).writes,
        0,
        "a skip alone writes nothing"
    );

    // A later event fills the gap: the skipped event is decided again.
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    stream.append(&id, &[line(1, 7)], 2).await.unwrap();
    let third = stream.read_from(&id, 3).await.unwrap();
    let out = p.apply_batch(third).await.unwrap();
    let row = out[0].only();
    assert_eq!(
        (row.skipped.clone(), row.applied.clone()),
        (vec![2], vec![3])
    );
    assert_eq!(row.checkpoint, 3);
    assert_eq!(summary_of(&t, "o-1").await.total_cents, 7);

    // Records whose events were skipped are done: no partial batch failure.
    let records: Vec<_> = eddy_dynamo::ChangeFeed::read_changes(&t, None, 100)
        .await
        .unwrap()
        .into_records();
    let result =
        eddy_dynamo::process_batch(&records, &[&p as &dyn eddy_dynamo::BatchProjection]).await;
    assert!(result.failures.is_empty(), "{:?}", result.failures);
}

/// `terminal` decides by the error's type: an error of the accepted type is
/// a rejection, one of another type with the very same message fails the
/// row, and keeps the original error as its source.
pub async fn terminal_matches_the_error_type_not_its_text(t: TestTable) {
    let p = picky(&t);
    let events = history(
        &t,
        "o-1",
        &[placed("ann"), line(1, 0), line(99, 5), line(1, 3)],
    )
    .await;
    let out = p.apply_batch(events).await.unwrap();
    let row = out[0].only();
    assert_eq!(
        (row.applied.clone(), row.rejected.clone()),
        (vec![1], vec![2])
    );
    assert_eq!(row.checkpoint, 2, "stopped before the failing event");
    let failure = out[0].first_failure().expect("the row stopped");
    assert_eq!(failure.code(), "EvolveFailed");
    let source = std::error::Error::source(failure).expect("the evolve error");
    assert!(
        source.downcast_ref::<std::io::Error>().is_some(),
        "{source}"
    );
    assert_eq!(source.to_string(), OrderError::NoQuantity.to_string());
}

/// `Step::Remove` needs a projection that declares removal; this one does
/// not, so the instance fails and nothing is written.
pub async fn removing_a_row_without_declared_removal_fails_the_instance(t: TestTable) {
    let p = picky(&t);
    history(&t, "o-1", &[placed("ann")]).await;
    p.apply_batch(
        orders(&t)
            .read(&orders(&t).id([("orderId", "o-1")]).unwrap())
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    stream
        .append(&id, &[OrderEvent::Cancelled], 1)
        .await
        .unwrap();
    let out = p
        .apply_batch(stream.read_from(&id, 2).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        out[0].first_failure().map(|e| e.code()),
        Some("InvalidArgument")
    );
    assert!(!out[0].written);
    assert_eq!(out[0].only().checkpoint, 1);
    assert!(!summary_of(&t, "o-1").await.cancelled);
}

crate::backend_tests!(
    folding_a_batch_costs_one_write_per_touched_row,
    folds_in_version_order_and_recognises_redelivery,
    a_gap_is_filled_from_the_event_store,
    terminal_failures_move_the_checkpoint_and_others_stop_it,
    the_revision_increments_with_every_write,
    a_second_instance_feeding_one_row_is_a_source_conflict,
    a_row_key_that_does_not_compose_is_refused_before_writing,
    events_of_another_stream_with_the_same_ids_are_not_mixed_in,
    legacy_rows_with_null_fields_are_projected_like_fresh_rows,
    a_gap_fill_missing_a_version_fails_and_moves_nothing,
    a_revision_at_its_maximum_is_a_clear_error,
    skipped_events_write_nothing_and_are_decided_again,
    terminal_matches_the_error_type_not_its_text,
    removing_a_row_without_declared_removal_fails_the_instance,
);
