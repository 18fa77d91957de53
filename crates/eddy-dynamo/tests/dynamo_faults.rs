//! Faults of the DynamoDB backend that moto cannot produce, against a tiny
//! HTTP server that answers every request with a chosen DynamoDB error and
//! counts the requests it saw.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use eddy_dynamo::{s, DynamoOptions, DynamoTable, Item, Put, Table, TableErrorKind, TableSchema};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the fault server answers: status and JSON body, given the
/// operation (`X-Amz-Target`) and the request body.
pub type Handler = Arc<dyn Fn(&str, &str) -> (u16, String) + Send + Sync>;

/// Starts a server that answers every request with `error_type`; returns
/// its URL and the request counter.
async fn failing_server(error_type: &'static str) -> (String, Arc<AtomicUsize>) {
    server(Arc::new(move |_, _| {
        (
            400,
            format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"injected {error_type}"}}"#
            ),
        )
    }))
    .await
}

/// Starts a server that answers with `handler`; returns its URL and the
/// request counter.
pub async fn server(handler: Handler) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            let handler = handler.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // Read one request: headers, then Content-Length bytes.
                    let (head_end, length) = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (end + 4, length);
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    while buf.len() < head_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let target = head
                        .lines()
                        .find_map(|l| l.strip_prefix("x-amz-target:"))
                        .map(|v| v.trim().rsplit('.').next().unwrap_or_default().to_owned())
                        .unwrap_or_default();
                    let body =
                        String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
                    buf.drain(..head_end + length);
                    seen.fetch_add(1, Ordering::SeqCst);
                    let (status, body) = handler(&target, &body);
                    let reason = if status == 200 { "OK" } else { "Bad Request" };
                    let response = format!(
                        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: test\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, count)
}

async fn table(url: &str, attempts: u32) -> DynamoTable {
    let options = DynamoOptions::from_env()
        .endpoint(url)
        .region("us-east-1")
        .credentials("testing", "testing")
        .max_attempts(attempts);
    let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await.unwrap());
    DynamoTable::new(client, TableSchema::single_table("faults"))
}

fn key() -> Item {
    Item::from([("pk".to_owned(), s("p")), ("sk".to_owned(), s("s"))])
}

#[tokio::test]
async fn throttling_is_retried_with_backoff_then_a_typed_error() {
    for error in [
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
    ] {
        let (url, count) = failing_server(error).await;
        let t = table(&url, 3).await;
        let err = t.get_item(key()).await.unwrap_err();
        assert_eq!(err.code(), "ThrottlingException", "{error}: {err}");
        assert_eq!(err.kind(), TableErrorKind::Throttled);
        assert!(err.is_retryable());
        assert!(err.to_string().contains("capacity"), "{err}");
        assert!(
            !err.to_string().contains("ThrottlingException:"),
            "no code prefix: {err}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 3, "{error}: three attempts");
    }
}

#[tokio::test]
async fn a_request_that_fails_validation_is_never_sent() {
    let (url, count) = failing_server("InternalServerError").await;
    let t = table(&url, 1).await;
    let mut big = key();
    big.insert("blob".into(), s("x".repeat(400 * 1024)));
    let err = t.put_item(Put::new(big)).await.unwrap_err();
    assert_eq!(err.code(), "ValidationException");
    let bad_key = Item::from([("pk".to_owned(), s("p"))]);
    assert_eq!(
        t.get_item(bad_key).await.unwrap_err().code(),
        "ValidationException"
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "nothing reached the service"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_storage_failure_that_names_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let t = table(&url, 1).await;
    let err = t.get_item(key()).await.unwrap_err();
    assert_eq!(err.code(), "storage-unavailable");
    assert!(
        err.is_retryable(),
        "an endpoint that does not answer may answer later"
    );
    assert!(err.to_string().contains("endpoint"), "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the SDK's failure is kept as the source"
    );
}

/// A service failure this crate does not know is not retried blindly;
/// a transient one is retryable. Both keep the SDK error as their source.
#[tokio::test]
async fn unknown_service_errors_are_internal_and_transient_ones_unavailable() {
    for (error, code, retryable) in [
        ("SomethingNewException", "storage-failure", false),
        ("InternalServerError", "storage-unavailable", true),
    ] {
        let (url, _) = failing_server(error).await;
        let err = table(&url, 1).await.get_item(key()).await.unwrap_err();
        assert_eq!(
            (err.code(), err.is_retryable()),
            (code, retryable),
            "{error}: {err}"
        );
        assert!(err.to_string().contains(error), "{err}");
        let source = std::error::Error::source(&err).expect("a source");
        assert!(!source.to_string().is_empty());
    }
}

#[tokio::test]
async fn unprocessed_batch_keys_are_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let item = |sk: &str| format!(r#"{{"pk":{{"S":"p"}},"sk":{{"S":"{sk}"}}}}"#);
    let (url, count) = server(Arc::new(move |target, body| {
        assert_eq!(target, "batchgetitem", "{body}");
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            // The first answer holds one item and leaves the other unprocessed.
            (
                200,
                format!(
                    r#"{{"Responses":{{"faults":[{}]}},"UnprocessedKeys":{{"faults":{{"Keys":[{}],"ConsistentRead":true}}}}}}"#,
                    item("a"),
                    item("b")
                ),
            )
        } else {
            assert!(body.contains(r#""b""#) && !body.contains(r#""a""#), "{body}");
            (
                200,
                format!(
                    r#"{{"Responses":{{"faults":[{}]}},"UnprocessedKeys":{{}}}}"#,
                    item("b")
                ),
            )
        }
    }))
    .await;
    let t = table(&url, 1).await;
    let keys = ["a", "b", "a"]
        .iter()
        .map(|sk| Item::from([("pk".to_owned(), s("p")), ("sk".to_owned(), s(*sk))]))
        .collect();
    let mut found = t.batch_get_item(keys).await.unwrap();
    found.sort_by_key(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default().to_owned());
    let sks: Vec<_> = found
        .iter()
        .map(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default())
        .collect();
    assert_eq!(sks, ["a", "b"]);
    assert_eq!(count.load(Ordering::SeqCst), 2);
    let stats = t.request_stats();
    assert_eq!((stats.reads, stats.items_read), (2, 2));
}

#[tokio::test]
async fn an_expired_shard_iterator_is_renewed() {
    let iterators = Arc::new(AtomicUsize::new(0));
    let seen = iterators.clone();
    let (url, _) = server(Arc::new(move |target, body| match target {
        "getsharditerator" => {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            (200, format!(r#"{{"ShardIterator":"it-{n}"}}"#))
        }
        "getrecords" if body.contains("it-0") => (
            400,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ExpiredIteratorException","message":"Iterator expired"}"#.to_owned(),
        ),
        "getrecords" => (
            200,
            r#"{"Records":[{"eventID":"e1","eventName":"INSERT","eventVersion":"1.1","eventSource":"aws:dynamodb","awsRegion":"us-east-1","dynamodb":{"Keys":{"pk":{"S":"p"},"sk":{"S":"s"}},"NewImage":{"pk":{"S":"p"},"sk":{"S":"s"}},"SequenceNumber":"100","SizeBytes":10,"StreamViewType":"NEW_AND_OLD_IMAGES"}}]}"#.to_owned(),
        ),
        other => panic!("unexpected {other}: {body}"),
    }))
    .await;
    let options = DynamoOptions::from_env()
        .endpoint(&url)
        .region("us-east-1")
        .credentials("testing", "testing")
        .max_attempts(1);
    let client = aws_sdk_dynamodbstreams::Client::new(&options.sdk_config().await.unwrap());
    let streams = eddy_dynamo::DynamoStreams::new(client, "arn:test/stream", "faults");
    let read = streams.read_shard("shard-1", None, 10).await.unwrap();
    assert_eq!(read.records.len(), 1);
    assert_eq!(
        read.records[0].change.sequence_number.as_deref(),
        Some("100")
    );
    assert!(
        read.exhausted,
        "no next iterator: the shard is closed and read"
    );
    assert_eq!(iterators.load(Ordering::SeqCst), 2, "one renewal");
}

/// The body of a `TransactionCanceledException` with these reason codes.
fn cancelled(codes: &[&str]) -> String {
    let reasons: Vec<String> = codes
        .iter()
        .map(|code| format!(r#"{{"Code":"{code}","Message":"reason {code}"}}"#))
        .collect();
    format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [{}]","CancellationReasons":[{}]}}"#,
        codes.join(", "),
        reasons.join(",")
    )
}

/// Answers `TransactWriteItems` with `conflicts` transaction conflicts, then
/// success; returns the URL and the request counter.
async fn conflicting_server(
    conflicts: usize,
    reasons: &'static [&'static str],
) -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    server(Arc::new(move |target, body| {
        assert_eq!(target, "transactwriteitems", "{body}");
        if seen.fetch_add(1, Ordering::SeqCst) < conflicts {
            (400, cancelled(reasons))
        } else {
            (200, "{}".to_owned())
        }
    }))
    .await
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Counter {
    Incremented,
}

fn counter(t: DynamoTable) -> eddy_dynamo::EventStream<Counter> {
    eddy_dynamo::make_stream(
        Arc::new(t),
        eddy_dynamo::AppSchema::new("app", 1),
        "Counter",
        &["id"],
    )
    .unwrap()
}

/// Regression (transaction conflicts): under concurrent writers DynamoDB
/// cancels a transaction with `TransactionConflict` reasons, which moto never
/// produces. The append failed with an opaque cancellation; it is now
/// retried with jittered backoff, and only a failed version condition is a
/// `VersionConflict`.
#[tokio::test]
async fn a_transaction_conflict_is_retried_and_a_failed_condition_is_a_version_conflict() {
    let (url, count) = conflicting_server(2, &["None", "TransactionConflict"]).await;
    let stream = counter(table(&url, 4).await);
    let id = stream.id([("id", "c-1")]).unwrap();
    assert_eq!(
        stream
            .append(&id, &[Counter::Incremented], 1)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        3,
        "two conflicts, then success"
    );

    let (url, count) = conflicting_server(usize::MAX, &["TransactionConflict"]).await;
    let stream = counter(table(&url, 4).await);
    let err = stream
        .append(&id, &[Counter::Incremented], 0)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "TransactionConflict", "{err}");
    assert!(err.is_retryable(), "a conflict is worth retrying later");
    assert_eq!(count.load(Ordering::SeqCst), 4, "max_attempts attempts");

    // A condition that failed is decided: no retry, a version conflict.
    let (url, count) = conflicting_server(
        usize::MAX,
        &["ConditionalCheckFailed", "TransactionConflict"],
    )
    .await;
    let stream = counter(table(&url, 4).await);
    let err = stream
        .append(&id, &[Counter::Incremented], 1)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "VersionConflict", "{err}");
    assert!(
        !err.to_string().contains("VersionConflict"),
        "no code prefix: {err}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// Regression (transaction conflicts on single writes): a `PutItem` on an
/// item that a transaction is writing answers `TransactionConflictException`;
/// it was a storage failure. It is retried, then a retryable conflict.
#[tokio::test]
async fn a_single_write_conflicting_with_a_transaction_is_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let (url, count) = server(Arc::new(move |target, _| {
        assert_eq!(target, "putitem");
        if seen.fetch_add(1, Ordering::SeqCst) < 2 {
            (
                400,
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#.to_owned(),
            )
        } else {
            (200, "{}".to_owned())
        }
    }))
    .await;
    let t = table(&url, 4).await;
    t.put_item(Put::new(key())).await.unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 3);

    let (url, count) = failing_server("TransactionConflictException").await;
    let t = table(&url, 3).await;
    let err = t.put_item(Put::new(key())).await.unwrap_err();
    assert_eq!(err.code(), "TransactionConflict", "{err}");
    assert_eq!(count.load(Ordering::SeqCst), 3);
}
