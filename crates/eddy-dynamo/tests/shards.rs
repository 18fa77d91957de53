//! `DynamoStreams` as a change feed over a stream of several shards,
//! against a stub of the DynamoDB Streams API (moto gives every stream one
//! shard): records are ordered within a shard only, and a `Follower` on
//! the feed must see every record of every shard.

use std::sync::Arc;

use eddy_dynamo::{
    BatchProjection, ChangeFeed, DynamoOptions, DynamoStreams, EmbeddedTable, FeedPosition,
    Follower,
};
use serde_json::{json, Value};

use crate::common::{summary_of, summary_projection, TestTable};

/// One record of the stub stream: an order event, in the Streams JSON.
fn record(sequence: u64, order: &str, version: u64, event: Value) -> Value {
    let pk = format!("shop#v1#$stream#Order#orderId={order}");
    let sk = format!("$event#{version:020}");
    let (event_type, data) = match event {
        Value::Object(map) => map.into_iter().next().unwrap(),
        _ => unreachable!(),
    };
    json!({
        "eventID": format!("e-{sequence}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_700_000_000 + sequence,
            "Keys": {"pk": {"S": pk}, "sk": {"S": sk}},
            "NewImage": {
                "pk": {"S": pk}, "sk": {"S": sk},
                "__edd_e__": {"S": "Order#event"},
                "streamName": {"S": "Order"},
                "streamId": {"M": {"orderId": {"S": order}}},
                "version": {"N": version.to_string()},
                "eventType": {"S": event_type},
                "data": data,
                "timestamp": {"S": "2023-11-14T22:13:20.000Z"}
            },
            "SequenceNumber": sequence.to_string(),
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        }
    })
}

fn placed(customer: &str) -> Value {
    json!({"Placed": {"M": {"customer": {"S": customer}}}})
}

fn line(cents: u64) -> Value {
    json!({"LineAdded": {"M": {"sku": {"S": "x"}, "qty": {"N": "1"}, "cents": {"N": cents.to_string()}}}})
}

/// A stub of the DynamoDB Streams API serving `shards`: (shard id,
/// parent, records in sequence order). An iterator is `<shard>|<after>`.
async fn stub(shards: Vec<(&'static str, Option<&'static str>, Vec<Value>)>) -> String {
    let shards = Arc::new(shards);
    let (url, _) = crate::dynamo_faults::server(Arc::new(move |target: &str, body: &str| {
        let request: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let answer = match target {
            "describestream" => json!({"StreamDescription": {
                "StreamArn": "arn:aws:dynamodb:us-east-1:1:table/shop/stream/x",
                "StreamStatus": "ENABLED",
                "StreamViewType": "NEW_AND_OLD_IMAGES",
                "TableName": "shop",
                "Shards": shards.iter().map(|(id, parent, records)| {
                    let first = records.first().map_or("1".to_owned(), |r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned());
                    let mut shard = json!({"ShardId": id, "SequenceNumberRange": {"StartingSequenceNumber": first}});
                    if let Some(parent) = parent {
                        shard["ParentShardId"] = json!(parent);
                    }
                    // A shard with children is closed.
                    if shards.iter().any(|(_, p, _)| *p == Some(*id)) {
                        let last = records.last().map_or(first.clone(), |r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned());
                        shard["SequenceNumberRange"]["EndingSequenceNumber"] = json!(last);
                    }
                    shard
                }).collect::<Vec<_>>(),
            }}),
            "getsharditerator" => {
                let after = request["SequenceNumber"].as_str().unwrap_or("0");
                json!({"ShardIterator": format!("{}|{after}", request["ShardId"].as_str().unwrap())})
            }
            "getrecords" => {
                let iterator = request["ShardIterator"].as_str().unwrap();
                let (shard, after) = iterator.split_once('|').unwrap();
                let after: u64 = after.parse().unwrap();
                let limit = request["Limit"].as_u64().unwrap_or(1000) as usize;
                let records: Vec<Value> = shards
                    .iter()
                    .find(|(id, _, _)| *id == shard)
                    .map(|(_, _, records)| records.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().parse::<u64>().unwrap() > after)
                    .take(limit)
                    .collect();
                let last = records.last().map_or(after.to_string(), |r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned());
                let closed = shards.iter().any(|(_, p, _)| *p == Some(shard));
                let remaining = shards
                    .iter()
                    .find(|(id, _, _)| *id == shard)
                    .map_or(0, |(_, _, all)| all.iter().filter(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().parse::<u64>().unwrap() > last.parse::<u64>().unwrap()).count());
                // A closed shard read to its end has no next iterator.
                let next = if closed && remaining == 0 { Value::Null } else { json!(format!("{shard}|{last}")) };
                json!({"Records": records, "NextShardIterator": next})
            }
            other => json!({"__type": "UnknownOperationException", "message": other}),
        };
        (200, answer.to_string())
    }))
    .await;
    url
}

async fn streams(url: &str) -> DynamoStreams {
    let options = DynamoOptions::from_env()
        .endpoint(url)
        .region("us-east-1")
        .credentials("testing", "testing");
    let config = options.sdk_config().await.unwrap();
    let checkpoints = EmbeddedTable::memory(eddy_dynamo::TableSchema::single_table("checkpoints"));
    DynamoStreams::new(
        aws_sdk_dynamodbstreams::Client::new(&config),
        "arn:aws:dynamodb:us-east-1:1:table/shop/stream/x",
        "shop",
    )
    .with_checkpoints(Arc::new(checkpoints))
    .unwrap()
}

/// Shards a (closed, with child c) and b, five records in all.
fn three_shards() -> Vec<(&'static str, Option<&'static str>, Vec<Value>)> {
    vec![
        (
            "shard-a",
            None,
            vec![
                record(100, "o-1", 1, placed("ann")),
                record(300, "o-1", 2, line(10)),
            ],
        ),
        (
            "shard-b",
            None,
            vec![
                record(200, "o-2", 1, placed("bob")),
                record(400, "o-2", 2, line(20)),
            ],
        ),
        (
            "shard-c",
            Some("shard-a"),
            vec![record(500, "o-1", 3, line(5))],
        ),
    ]
}

/// From the start or after any record, in batches of any size, each
/// position saved as text and read back: every later record once, in the
/// feed's order (parents before children, each shard in order). An older
/// eddy's sequence number, upgraded, is a floor in every shard.
#[tokio::test]
async fn batches_of_any_size_from_any_saved_position_read_every_record_once() {
    use crate::feed_positions::{read_in_batches, saved, sequences};
    let feed = streams(&stub(three_shards()).await).await;
    let all = feed.read_changes(None, 100).await.unwrap();
    let order = sequences(&all);
    assert_eq!(order, ["100", "300", "200", "400", "500"]);
    for start in 0..=all.len() {
        let after = start
            .checked_sub(1)
            .map(|i| saved(all.position_after(i).unwrap()));
        for size in 1..=all.len() + 1 {
            let seen = read_in_batches(&feed, after.clone(), &[size]).await;
            assert_eq!(
                seen,
                order[start..],
                "after {start} records, batches of {size}"
            );
        }
        let seen = read_in_batches(&feed, after.clone(), &[2, 1, 3]).await;
        assert_eq!(
            seen,
            order[start..],
            "after {start} records, batches of 2, 1, 3"
        );
    }
    let floor = FeedPosition::upgrade("250").unwrap();
    for size in 1..=3 {
        let seen = read_in_batches(&feed, Some(floor.clone()), &[size]).await;
        assert_eq!(seen, ["300", "400", "500"], "batches of {size}");
    }
}

/// Regression (issue 25): `DynamoStreams` as a change feed kept one
/// position for the whole stream and compared sequence numbers across
/// shards, so a follower that finished shard A at 300 read only shard B's
/// records above 300 next: B's 200 was skipped for good. Now the feed keeps
/// a position per shard, orders records within a shard only, and reads a
/// child shard after its parent.
#[tokio::test]
async fn a_follower_on_a_stream_of_several_shards_sees_every_record() {
    let url = stub(vec![
        (
            "shard-a",
            None,
            vec![
                record(100, "o-1", 1, placed("ann")),
                record(300, "o-1", 2, line(10)),
            ],
        ),
        (
            "shard-b",
            None,
            vec![
                record(200, "o-2", 1, placed("bob")),
                record(400, "o-2", 2, line(20)),
            ],
        ),
        (
            "shard-c",
            Some("shard-a"),
            vec![record(500, "o-1", 3, line(5))],
        ),
    ])
    .await;
    let feed = streams(&url).await;
    let t: TestTable = EmbeddedTable::memory(crate::common::schema()).into();
    let p = summary_projection(&t, false);
    let follower = Follower::new(feed.clone(), "summaries").batch_size(2);
    let mut polls = 0;
    while let Some(result) = follower
        .poll_once(&[&p as &dyn BatchProjection])
        .await
        .unwrap()
    {
        assert!(result.failures.is_empty(), "{:?}", result.failures);
        polls += 1;
        assert!(polls < 10, "the follower keeps finding records");
    }
    assert_eq!(
        summary_of(&t, "o-1").await.total_cents,
        15,
        "shard a and its child c"
    );
    assert_eq!(
        summary_of(&t, "o-2").await.total_cents,
        20,
        "every record of shard b"
    );

    // Read whole, the feed is each shard in order, the child after its parent.
    let all = feed.read_changes(None, 100).await.unwrap().into_records();
    let order: Vec<&str> = all
        .iter()
        .map(|r| r.change.sequence_number.as_deref().unwrap())
        .collect();
    let position = |seq: &str| order.iter().position(|s| *s == seq).unwrap();
    assert_eq!(order.len(), 5);
    assert!(position("100") < position("300") && position("300") < position("500"));
    assert!(position("200") < position("400"));
}
