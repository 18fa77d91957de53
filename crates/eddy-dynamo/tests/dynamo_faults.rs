//! Faults of the DynamoDB backend that moto cannot produce, against a tiny
//! HTTP server that answers every request with a chosen DynamoDB error and
//! counts the requests it saw.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use eddy_dynamo::{s, DynamoOptions, DynamoTable, Item, Put, Table, TableSchema};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Starts a server that answers every request with `error_type`; returns
/// its URL and the request counter.
async fn failing_server(error_type: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
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
                    buf.drain(..head_end + length);
                    seen.fetch_add(1, Ordering::SeqCst);
                    let body = format!(
                        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"injected {error_type}"}}"#
                    );
                    let response = format!(
                        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.0\r\nx-amzn-RequestId: test\r\nContent-Length: {}\r\n\r\n{body}",
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
        assert!(err.to_string().contains("capacity"), "{err}");
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
    assert_eq!(err.code(), "storage-failure");
    assert!(err.to_string().contains("endpoint"), "{err}");
}
