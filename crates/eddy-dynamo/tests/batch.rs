//! process_batch over the change feed, and a DynamoDB Streams event in the
//! exact JSON Lambda sends.

use eddy_dynamo::{
    handle_stream_event, n, process_batch, s, BatchProjection, ChangeFeed, EventItem, Item, Put,
    StreamEvent, Table,
};
use serde_json::json;

use crate::common::{line, orders, placed, summary_of, summary_projection, table, Only, TestTable};

/// Writes an event item of a type the stream does not have.
async fn append_poison(t: &TestTable, order: &str, version: u64) {
    let stream = orders(t);
    let id = stream.id([("orderId", order)]).unwrap();
    let good = stream.read(&id).await.unwrap();
    assert_eq!(good.len() as u64, version - 1);
    // Copy the layout of the last good event, then change what it says.
    let mut key = Item::new();
    key.insert(
        "pk".into(),
        s(format!("shop#v1#$stream#Order#orderId={order}")),
    );
    key.insert("sk".into(), s(format!("$event#{:020}", version - 1)));
    let mut item = t.get_item(key).await.unwrap().unwrap();
    item.insert("sk".into(), s(format!("$event#{version:020}")));
    item.insert("version".into(), n(version));
    item.insert("eventType".into(), s("Refunded"));
    t.put_item(Put::new(item)).await.unwrap();
}

pub async fn a_poison_record_is_reported_and_nothing_after_it_in_its_stream_is_done(t: TestTable) {
    let stream = orders(&t);
    let o1 = stream.id([("orderId", "o-1")]).unwrap();
    let o2 = stream.id([("orderId", "o-2")]).unwrap();
    stream
        .append(&o1, &[placed("ann"), line(1, 10)], 0)
        .await
        .unwrap();
    append_poison(&t, "o-1", 3).await;
    stream.append(&o1, &[line(1, 20)], 3).await.unwrap();
    stream
        .append(&o2, &[placed("bob"), line(2, 5)], 0)
        .await
        .unwrap();
    let records = t.read_changes(None, 100).await.unwrap().into_records();
    assert_eq!(records.len(), 6);

    let p = summary_projection(&t, false);
    let result = process_batch(&records, &[&p as &dyn BatchProjection]).await;
    let failed: Vec<(usize, &str)> = result
        .failures
        .iter()
        .map(|f| (f.index, f.code.as_str()))
        .collect();
    assert_eq!(failed, [(2, "UnknownEventType"), (3, "UnknownEventType")]);
    let poison_seq = records[2].change.sequence_number.clone().unwrap();
    let response = serde_json::to_value(&result.response).unwrap();
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": poison_seq}]})
    );
    let o1_row = summary_of(&t, "o-1").await;
    assert_eq!(
        o1_row.total_cents, 10,
        "the events before the poison are applied, the one after is not"
    );
    let o2_row = summary_of(&t, "o-2").await;
    assert_eq!(o2_row.total_cents, 10);

    // The feed now also holds the read-model rows: they are ignored.
    let all = t.read_changes(None, 100).await.unwrap().into_records();
    let again = process_batch(&all, &[&p as &dyn BatchProjection]).await;
    assert_eq!(again.ignored.len(), all.len() - 6);
    assert_eq!(again.first_failure(), Some(2));
    assert!(
        again.rows.iter().all(|r| r.only().applied.is_empty()),
        "redelivery applies nothing twice"
    );
}

pub async fn an_empty_batch_or_one_without_events_needs_no_retry(t: TestTable) {
    let p = summary_projection(&t, false);
    let result = process_batch(&[], &[&p as &dyn BatchProjection]).await;
    assert!(result.response.batch_item_failures.is_empty());
    t.put_item(Put::new(Item::from([
        ("pk".into(), s("x")),
        ("sk".into(), s("y")),
    ])))
    .await
    .unwrap();
    let records = t.read_changes(None, 10).await.unwrap().into_records();
    let result = process_batch(&records, &[&p as &dyn BatchProjection]).await;
    assert_eq!((result.ignored.len(), result.failures.len()), (1, 0));
}

/// Three records as Lambda delivers them: an event, a read-model row
/// update (ignored), and an event of an unknown type.
const LAMBDA_EVENT: &str = r#"{
  "Records": [
    {
      "eventID": "7de3041dd709b024af6f29e4fa13d34c",
      "eventName": "INSERT",
      "eventVersion": "1.1",
      "eventSource": "aws:dynamodb",
      "awsRegion": "us-east-1",
      "dynamodb": {
        "ApproximateCreationDateTime": 1700000000,
        "Keys": {
          "pk": {"S": "shop#v1#$stream#Order#orderId=o-9"},
          "sk": {"S": "$event#00000000000000000001"}
        },
        "NewImage": {
          "pk": {"S": "shop#v1#$stream#Order#orderId=o-9"},
          "sk": {"S": "$event#00000000000000000001"},
          "__edd_e__": {"S": "Order#event"},
          "streamName": {"S": "Order"},
          "streamId": {"M": {"orderId": {"S": "o-9"}}},
          "version": {"N": "1"},
          "eventType": {"S": "Placed"},
          "data": {"M": {"customer": {"S": "dee"}}},
          "timestamp": {"S": "2023-11-14T22:13:20.000Z"}
        },
        "SequenceNumber": "4421584500000000017450439091",
        "SizeBytes": 312,
        "StreamViewType": "NEW_AND_OLD_IMAGES"
      },
      "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/shop/stream/2023-11-14T00:00:00.000"
    },
    {
      "eventID": "8ae3041dd709b024af6f29e4fa13d34d",
      "eventName": "MODIFY",
      "eventVersion": "1.1",
      "eventSource": "aws:dynamodb",
      "awsRegion": "us-east-1",
      "dynamodb": {
        "ApproximateCreationDateTime": 1700000001,
        "Keys": {"pk": {"S": "shop#v1#OrderSummary#orderId=o-1"}, "sk": {"S": "OrderSummary"}},
        "NewImage": {
          "pk": {"S": "shop#v1#OrderSummary#orderId=o-1"}, "sk": {"S": "OrderSummary"},
          "__edd_e__": {"S": "OrderSummary"}, "lines": {"N": "2"}
        },
        "OldImage": {
          "pk": {"S": "shop#v1#OrderSummary#orderId=o-1"}, "sk": {"S": "OrderSummary"},
          "__edd_e__": {"S": "OrderSummary"}, "lines": {"N": "1"}
        },
        "SequenceNumber": "4421584500000000017450439092",
        "SizeBytes": 220,
        "StreamViewType": "NEW_AND_OLD_IMAGES"
      },
      "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/shop/stream/2023-11-14T00:00:00.000"
    },
    {
      "eventID": "9be3041dd709b024af6f29e4fa13d34e",
      "eventName": "INSERT",
      "eventVersion": "1.1",
      "eventSource": "aws:dynamodb",
      "awsRegion": "us-east-1",
      "dynamodb": {
        "ApproximateCreationDateTime": 1700000002,
        "Keys": {
          "pk": {"S": "shop#v1#$stream#Order#orderId=o-9"},
          "sk": {"S": "$event#00000000000000000002"}
        },
        "NewImage": {
          "pk": {"S": "shop#v1#$stream#Order#orderId=o-9"},
          "sk": {"S": "$event#00000000000000000002"},
          "__edd_e__": {"S": "Order#event"},
          "streamName": {"S": "Order"},
          "streamId": {"M": {"orderId": {"S": "o-9"}}},
          "version": {"N": "2"},
          "eventType": {"S": "Refunded"},
          "data": {"M": {"cents": {"N": "100"}}},
          "timestamp": {"S": "2023-11-14T22:13:22.000Z"}
        },
        "SequenceNumber": "4421584500000000017450439093",
        "SizeBytes": 300,
        "StreamViewType": "NEW_AND_OLD_IMAGES"
      },
      "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/shop/stream/2023-11-14T00:00:00.000"
    }
  ]
}"#;

#[tokio::test]
async fn a_lambda_dynamodb_streams_event_is_decoded_and_answered() {
    let event: StreamEvent = serde_json::from_str(LAMBDA_EVENT).unwrap();
    assert_eq!(event.records.len(), 3);
    let decoded = EventItem::from_item(&event.records[0].change.new_image)
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            decoded.stream.name.as_str(),
            decoded.version,
            decoded.event_type.as_str()
        ),
        ("Order", 1, "Placed")
    );

    let t = table();
    let p = summary_projection(&t, false);
    let response = handle_stream_event(event, &[&p as &dyn BatchProjection]).await;
    assert_eq!(
        serde_json::to_string(&response).unwrap(),
        r#"{"batchItemFailures":[{"itemIdentifier":"4421584500000000017450439093"}]}"#
    );
    let row = summary_of(&t, "o-9").await;
    assert_eq!(row.customer, "dee");
}

pub async fn embedded_records_round_trip_through_the_lambda_json_shape(t: TestTable) {
    let stream = orders(&t);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    stream.append(&id, &[placed("ann")], 0).await.unwrap();
    let records = t.read_changes(None, 10).await.unwrap().into_records();
    let json = serde_json::to_string(&json!({ "Records": records })).unwrap();
    let event: StreamEvent = serde_json::from_str(&json).unwrap();
    assert_eq!(event.records, records);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let record = &value["Records"][0];
    assert_eq!(record["eventName"], "INSERT");
    assert_eq!(record["eventSource"], "aws:dynamodb");
    assert_eq!(
        record["dynamodb"]["NewImage"]["eventType"],
        json!({"S": "Placed"})
    );
    assert_eq!(record["dynamodb"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
}

/// Regression (routing by stream name alone): two applications (or two
/// schema versions of one) sharing a table both have an `Order` stream with
/// the same ids. `process_batch` routed by stream name, so one app's
/// projection folded the other's events into its rows. Records are now
/// routed by application, schema version and stream name; the others are
/// ignored, and the result says why.
pub async fn records_of_another_application_are_ignored_and_reported(t: TestTable) {
    let ours = orders(&t);
    let theirs: eddy_dynamo::EventStream<crate::common::OrderEvent> = eddy_dynamo::make_stream(
        t.table.clone(),
        eddy_dynamo::AppSchema::new("shop", 2),
        "Order",
        &["orderId"],
    )
    .unwrap();
    let id = ours.id([("orderId", "o-1")]).unwrap();
    ours.append(&id, &[placed("ann"), line(1, 10)], 0)
        .await
        .unwrap();
    theirs
        .append(&id, &[placed("zed"), line(1, 500), line(1, 700)], 0)
        .await
        .unwrap();
    let records = t.read_changes(None, 100).await.unwrap().into_records();
    assert_eq!(records.len(), 5);

    let p = summary_projection(&t, false);
    let result = process_batch(&records, &[&p as &dyn BatchProjection]).await;
    assert!(result.failures.is_empty(), "{:?}", result.failures);
    let row = summary_of(&t, "o-1").await;
    assert_eq!((row.customer.as_str(), row.total_cents), ("ann", 10));
    let unrouted: Vec<(usize, String)> = result
        .ignored
        .iter()
        .filter_map(|i| match &i.reason {
            eddy_dynamo::IgnoreReason::NoProjection { stream } => {
                Some((i.index, stream.to_string()))
            }
            eddy_dynamo::IgnoreReason::NotAnEvent => None,
        })
        .collect();
    assert_eq!(
        unrouted,
        [
            (2, "shop#v2#Order".to_owned()),
            (3, "shop#v2#Order".to_owned()),
            (4, "shop#v2#Order".to_owned())
        ]
    );
}

/// Regression (issue 25): records of a stream without new images
/// (`KEYS_ONLY`, `OLD_IMAGE`) were acknowledged as "not an event", so a
/// projection on such a stream lost every event without a word. Now an
/// INSERT or MODIFY without its new image fails, not retryably, and says
/// which stream view type is needed; a REMOVE needs none.
pub async fn records_without_a_new_image_are_refused(t: TestTable) {
    use eddy_dynamo::ChangeRecord;
    crate::common::place_order(&t, "o-1").await;
    let records = t.read_changes(None, 100).await.unwrap().into_records();
    assert_eq!(records.len(), 2);
    let keys_only: Vec<ChangeRecord> = records
        .into_iter()
        .map(|mut r| {
            r.change.new_image = Default::default();
            r.change.stream_view_type = Some(aws_lambda_events::dynamodb::StreamViewType::KeysOnly);
            r
        })
        .collect();
    let p = summary_projection(&t, false);
    let result = process_batch(&keys_only, &[&p as &dyn BatchProjection]).await;
    assert!(result.ignored.is_empty(), "{:?}", result.ignored);
    let codes: Vec<&str> = result.failures.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["MissingNewImage", "MissingNewImage"]);
    assert!(
        result.failures[0].message.contains("NEW_AND_OLD_IMAGES"),
        "{}",
        result.failures[0].message
    );
    assert_eq!(result.first_failure(), Some(0));

    // A modification without its new image is refused the same way; a
    // removal never has one.
    let mut modify = keys_only[0].clone();
    modify.event_name = "MODIFY".into();
    let mut remove = keys_only[0].clone();
    remove.event_name = "REMOVE".into();
    let result = process_batch(&[remove, modify], &[&p as &dyn BatchProjection]).await;
    assert_eq!(result.ignored.len(), 1);
    assert_eq!(result.failures.len(), 1);
    assert_eq!(
        (result.failures[0].index, result.failures[0].code.as_str()),
        (1, "MissingNewImage")
    );
}

crate::backend_tests!(
    records_without_a_new_image_are_refused,
    a_poison_record_is_reported_and_nothing_after_it_in_its_stream_is_done,
    an_empty_batch_or_one_without_events_needs_no_retry,
    embedded_records_round_trip_through_the_lambda_json_shape,
    records_of_another_application_are_ignored_and_reported,
);
