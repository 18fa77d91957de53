//! Event streams: append with expected version, reads, conflicts, commands.

use eddy_dynamo::{make_stream, CommandError, EventItem, Table};
use serde_json::json;

use crate::common::{app, orders, OrderEvent, TestTable};

fn line(cents: u64) -> OrderEvent {
    OrderEvent::LineAdded {
        sku: "sku".into(),
        qty: 1,
        cents,
    }
}

pub async fn append_and_read_back_in_version_order(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    assert_eq!(stream.current_version(&id).await.unwrap(), 0);
    let placed = OrderEvent::Placed {
        customer: "ann".into(),
    };
    assert_eq!(
        stream
            .append(&id, &[placed.clone(), line(5)], 0)
            .await
            .unwrap(),
        2
    );
    let meta = json!({"correlationId": "c-9"});
    assert_eq!(
        stream
            .append_with_metadata(&id, &[OrderEvent::Cancelled], 2, Some(&meta))
            .await
            .unwrap(),
        3
    );
    let events = stream.read(&id).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.version).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(events[0].event, placed);
    assert_eq!(events[2].event, OrderEvent::Cancelled);
    assert_eq!(events[2].event_type, "Cancelled");
    assert_eq!(events[2].metadata, Some(meta));
    assert!(events[0].timestamp.ends_with('Z'));
    assert_eq!(stream.read_from(&id, 2).await.unwrap().len(), 2);
    assert_eq!(stream.current_version(&id).await.unwrap(), 3);
    let other = stream.id([("orderId", "o-2")]).unwrap();
    assert!(stream.read(&other).await.unwrap().is_empty());
}

pub async fn a_stale_or_skipping_expected_version_is_a_conflict_and_writes_nothing(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    stream.append(&id, &[line(1)], 0).await.unwrap();
    let stale = stream
        .append(&id, &[line(2), line(3)], 0)
        .await
        .unwrap_err();
    assert_eq!(stale.code(), "VersionConflict");
    let ahead = stream.append(&id, &[line(2)], 5).await.unwrap_err();
    assert_eq!(ahead.code(), "VersionConflict");
    assert_eq!(stream.current_version(&id).await.unwrap(), 1);
}

/// How many writers race at once on this backend: moto runs concurrent
/// transactions without isolation (a cancelled one restores a copy of the
/// table taken before it began, which can undo or let through another
/// writer's transaction), so writers race on the embedded backends only;
/// DynamoDB's own conflict answers are tested against the fault stub
/// (tests/dynamo_faults.rs).
fn racing_writers(t: &TestTable, wanted: usize) -> usize {
    if t.backend == "dynamodb" {
        1
    } else {
        wanted
    }
}

pub async fn concurrent_appends_at_one_version_let_exactly_one_win(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    let mut outcomes = Vec::new();
    for round in (0..8u64).collect::<Vec<_>>().chunks(racing_writers(&t, 8)) {
        let tasks: Vec<_> = round
            .iter()
            .map(|i| {
                let (stream, id, i) = (stream.clone(), id.clone(), *i);
                tokio::spawn(async move { stream.append(&id, &[line(i)], 0).await })
            })
            .collect();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
    }
    let mut wins = 0;
    for outcome in outcomes {
        match outcome {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.code(), "VersionConflict"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(stream.read(&id).await.unwrap().len(), 1);
}

pub async fn command_handler_retries_on_conflict_and_passes_rejections_through(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    let writers = racing_writers(&t, 5);
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (stream, id) = (stream.clone(), id.clone());
            tokio::spawn(async move {
                stream
                    .handle(&id, 50, |history| {
                        Ok::<_, String>(vec![line(history.len() as u64)])
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for _ in writers..5 {
        let decide = |history: &[_]| Ok::<_, String>(vec![line(history.len() as u64)]);
        stream.handle(&id, 50, decide).await.unwrap();
    }
    let events = stream.read(&id).await.unwrap();
    let cents: Vec<u64> = events
        .iter()
        .map(|e| match e.event {
            OrderEvent::LineAdded { cents, .. } => cents,
            _ => u64::MAX,
        })
        .collect();
    assert_eq!(
        cents,
        [0, 1, 2, 3, 4],
        "each decision saw the history before it"
    );
    let rejected = stream
        .handle(&id, 3, |_| Err::<Vec<OrderEvent>, _>("closed"))
        .await
        .unwrap_err();
    assert!(matches!(rejected, CommandError::Rejected("closed")));
}

pub async fn bad_input_gets_typed_errors(t: TestTable) {
    let stream = orders(&t);
    assert_eq!(
        stream.id([("customer", "x")]).unwrap_err().code(),
        "KeyComposeError"
    );
    let id = stream.id([("orderId", "o-1")]).unwrap();
    let too_many: Vec<_> = (0..100).map(line).collect();
    assert_eq!(
        stream.append(&id, &too_many, 0).await.unwrap_err().code(),
        "InvalidArgument"
    );
    assert_eq!(
        stream.append(&id, &[], 0).await.unwrap_err().code(),
        "InvalidArgument"
    );
    let not_enum = make_stream::<u32>(std::sync::Arc::new(t.clone()), app(), "Bad", &["id"]);
    assert_eq!(not_enum.unwrap_err().code(), "InvalidArgument");

    // An event of an unknown type, or with data that does not decode.
    stream.append(&id, &[line(1)], 0).await.unwrap();
    let key = |v: u64| {
        let mut item = eddy_dynamo::Item::new();
        item.insert(
            "pk".into(),
            eddy_dynamo::s("shop#v1#$stream#Order#orderId=o-1"),
        );
        item.insert("sk".into(), eddy_dynamo::s(format!("$event#{v:020}")));
        item
    };
    let mut stored = t
        .get_item(key(1))
        .await
        .unwrap()
        .expect("the event item is at its documented key");
    let mut unknown = EventItem::from_item(&stored).unwrap().unwrap();
    unknown.event_type = "Refunded".into();
    assert_eq!(
        stream.decode(&unknown).unwrap_err().code(),
        "UnknownEventType"
    );
    stored.insert("data".into(), eddy_dynamo::s("not a line"));
    let garbled = EventItem::from_item(&stored).unwrap().unwrap();
    assert_eq!(
        stream.decode(&garbled).unwrap_err().code(),
        "EventDecodeError"
    );
}

/// Regression (version overflow): an append at `u64::MAX` panicked with
/// "attempt to add with overflow". It is now a clear error that writes
/// nothing.
pub async fn an_append_past_the_largest_version_is_a_clear_error(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    let err = stream
        .append(&id, &[line(1), line(2)], u64::MAX - 1)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "CounterOverflow");
    assert!(stream.read(&id).await.unwrap().is_empty());
}

crate::backend_tests!(
    append_and_read_back_in_version_order,
    a_stale_or_skipping_expected_version_is_a_conflict_and_writes_nothing,
    concurrent_appends_at_one_version_let_exactly_one_win,
    command_handler_retries_on_conflict_and_passes_rejections_through,
    bad_input_gets_typed_errors,
    an_append_past_the_largest_version_is_a_clear_error,
);
