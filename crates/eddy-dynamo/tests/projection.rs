//! Single-source projections: fold, checkpoints, gap fill, terminal, guards.

use std::sync::Arc;

use eddy_dynamo::{get_u64, make_stream, Entity, KeyComposite, Projection, StoredEvent, Table};
use serde_json::json;

use crate::common::{
    app, line, orders, placed, summaries, summary_of, summary_projection, table, OrderEvent,
    OrderSummary, TestTable,
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
    assert_eq!(out[0].applied, [1, 2, 3]);
    assert_eq!(out[0].checkpoint, 3);
    assert!(out[0].written && out[0].is_applied());
    let row = out[0].state.clone().unwrap();
    assert_eq!(
        (row.customer.as_str(), row.lines, row.total_cents),
        ("ann", 2, 250)
    );
    assert_eq!(
        summaries(&t).get(&json!({"orderId": "o-1"})).await.unwrap(),
        Some(row.clone())
    );

    let again = p.apply_batch(events).await.unwrap();
    assert_eq!(again[0].already_applied, [1, 2, 3]);
    assert!(again[0].applied.is_empty() && !again[0].written);
    assert_eq!(again[0].state, Some(row));
    assert_eq!(p.checkpoint(&json!({"orderId": "o-1"})).await.unwrap(), 3);
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
    assert_eq!(out[0].applied, [1, 2, 3, 4]);
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 60);
}

pub async fn terminal_failures_move_the_checkpoint_and_others_stop_it(t: TestTable) {
    let p = summary_projection(&t, false);
    let events = history(&t, "o-1", &[placed("ann"), line(0, 10), line(1, 20)]).await;
    let out = p.apply_batch(events).await.unwrap();
    assert_eq!(
        (out[0].applied.clone(), out[0].rejected.clone()),
        (vec![1, 3], vec![2])
    );
    assert_eq!(out[0].checkpoint, 3);
    assert_eq!(out[0].state.as_ref().unwrap().total_cents, 20);

    // A line before placement fails the row: nothing precedes it, so nothing is written.
    let events = history(&t, "o-2", &[line(1, 5), placed("bob")]).await;
    let out = p.apply_batch(events).await.unwrap();
    let failure = out[0].failure.as_ref().expect("the row failed");
    assert_eq!(failure.code(), "EvolveFailed");
    assert_eq!(out[0].checkpoint, 0);
    assert!(!out[0].written);
    assert_eq!(
        summaries(&t).get(&json!({"orderId": "o-2"})).await.unwrap(),
        None
    );
}

pub async fn the_revision_increments_with_every_write(t: TestTable) {
    let p = summary_projection(&t, true);
    let events = history(&t, "o-1", &[placed("ann"), line(1, 10), line(1, 20)]).await;
    let first = p.apply_batch(events[..2].to_vec()).await.unwrap();
    assert_eq!(first[0].revision, Some(1));
    let second = p.apply_batch(events.clone()).await.unwrap();
    assert_eq!(
        (second[0].revision, second[0].applied.clone()),
        (Some(2), vec![3])
    );
    let item = summaries(&t)
        .get_item(&json!({"orderId": "o-1"}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (get_u64(&item, "revision"), get_u64(&item, "version")),
        (Some(2), Some(3))
    );
}

pub async fn a_second_instance_feeding_one_row_is_a_source_conflict(t: TestTable) {
    let shared: Projection<OrderEvent, OrderSummary, serde_json::Value> =
        Projection::builder("by-customer", summaries(&t), orders(&t))
            .key(|_, _| Some(json!({"orderId": "shared"})))
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
        out[0].failure.as_ref().map(|e| e.code()),
        Some("ProjectionSourceConflict")
    );
}

pub async fn a_row_key_that_does_not_compose_is_refused_before_writing(t: TestTable) {
    let bad: Projection<OrderEvent, OrderSummary, serde_json::Value> =
        Projection::builder("bad", summaries(&t), orders(&t))
            .key(|_, _| Some(json!({"customer": "x"})))
            .initial(|_| unreachable!("never called: the key does not compose"))
            .evolve(|row, _| Ok(row))
            .build()
            .unwrap();
    let events = history(&t, "o-1", &[placed("ann")]).await;
    assert_eq!(
        bad.apply_batch(events).await.unwrap_err().code(),
        "KeyComposeError"
    );
    let missing = Projection::<OrderEvent, OrderSummary, serde_json::Value>::builder(
        "x",
        summaries(&t),
        orders(&t),
    )
    .evolve(|row, _| Ok(row))
    .build();
    assert_eq!(missing.unwrap_err().code(), "InvalidArgument");
}

/// Two writers racing on one row, each with part of its events, lose none.
async fn race(revision: bool) {
    for round in 0..10 {
        let t = table();
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
            assert!(result[0].is_applied(), "{:?}", result[0].failure);
        }
        let row = summary_of(&t, &format!("o-{round}")).await;
        assert_eq!(
            (row.lines, row.total_cents),
            (12, (1..=12).sum::<u64>()),
            "round {round}"
        );
        assert_eq!(
            p.checkpoint(&json!({"orderId": format!("o-{round}")}))
                .await
                .unwrap(),
            13
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_lose_no_event_under_the_checkpoint_guard() {
    race(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_lose_no_event_under_the_revision_guard() {
    race(true).await;
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
        .get_item(summaries(&t).key(&json!({"orderId": "o-1"})).unwrap())
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
        .all(|row| row.written && row.applied == [1, 2, 3]));
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

crate::backend_tests!(
    folding_a_batch_costs_one_write_per_touched_row,
    folds_in_version_order_and_recognises_redelivery,
    a_gap_is_filled_from_the_event_store,
    terminal_failures_move_the_checkpoint_and_others_stop_it,
    the_revision_increments_with_every_write,
    a_second_instance_feeding_one_row_is_a_source_conflict,
    a_row_key_that_does_not_compose_is_refused_before_writing,
    events_of_another_stream_with_the_same_ids_are_not_mixed_in,
);
