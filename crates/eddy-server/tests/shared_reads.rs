//! Live readers waiting at one offset are answered from one store read
//! per append (issue 32, part 4): long-poll and SSE readers at the tail of
//! one stream, one append, and the store calls it cost, counted by a
//! store wrapper (memory) or by the table's own request count (the
//! DynamoDB stream store on the embedded table).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_server::{app, App, AppState, ServerConfig};
use eddy_streams::Storage;
use http_body_util::BodyExt;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::support::{series, Counted};

/// The application over `store`, with room for 20 000 live readers.
fn serve(store: Arc<dyn Storage>) -> App {
    let (stop, stopping) = watch::channel(false);
    // The server runs for the whole test.
    std::mem::forget(stop);
    let config = ServerConfig {
        max_live_readers: 20_000,
        long_poll_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    };
    app(AppState::new(store, config, stopping))
}

const STREAM: &str = "/v1/stream/live";

async fn call(app: &App, method: &str, uri: &str, body: &'static str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "text/plain")
        .body(Body::from(body))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let offset = response
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, offset)
}

/// Creates the stream with one message and returns its tail offset.
async fn stream_with_one_message(app: &App) -> String {
    let (status, _) = call(app, "PUT", STREAM, "").await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, tail) = call(app, "POST", STREAM, "a").await;
    assert!(status.is_success(), "append: {status}");
    tail
}

/// A long-poll reader at `offset`: the status and body it is answered,
/// and the offset the answer names.
async fn long_poll(app: App, offset: String) -> (StatusCode, String, String) {
    let request = Request::builder()
        .uri(format!("{STREAM}?offset={offset}&live=long-poll"))
        .body(Body::empty())
        .expect("request");
    let response = app.oneshot(request).await.expect("infallible");
    let status = response.status();
    let next = response
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.into_body().collect().await.expect("body");
    let body = String::from_utf8_lossy(&body.to_bytes()).into_owned();
    (status, body, next)
}

/// An SSE reader at `offset`: its events up to its first data event.
async fn sse(app: App, offset: String) -> String {
    let request = Request::builder()
        .uri(format!("{STREAM}?offset={offset}&live=sse"))
        .body(Body::empty())
        .expect("request");
    let response = app.oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut events = String::new();
    while !events.contains("event: data") {
        let frame = body.frame().await.expect("an event").expect("a frame");
        if let Ok(data) = frame.into_data() {
            events.push_str(&String::from_utf8_lossy(&data));
        }
    }
    events
}

/// How a reader of the test is answered.
#[derive(Clone, Copy, Debug)]
enum Live {
    LongPoll,
    Sse,
}

/// Starts `count` readers of `live` at `tail`; each returns whether it
/// got the message `b`.
fn readers(app: &App, live: Live, tail: &str, count: usize) -> Vec<tokio::task::JoinHandle<bool>> {
    (0..count)
        .map(|_| {
            let (app, tail) = (app.clone(), tail.to_owned());
            tokio::spawn(async move {
                match live {
                    Live::LongPoll => {
                        let (status, body, _) = long_poll(app, tail).await;
                        (status, body.as_str()) == (StatusCode::OK, "b")
                    }
                    Live::Sse => sse(app, tail).await.contains("event: data\ndata:b\n"),
                }
            })
        })
        .collect()
}

/// Store calls of one append that `count` waiting readers see: (reads,
/// heads) between the append and the last reader's answer.
async fn memory_calls_per_append(live: Live, count: usize) -> (usize, usize) {
    let store = Arc::new(Counted::new());
    let app = serve(Arc::clone(&store) as Arc<dyn Storage>);
    let tail = stream_with_one_message(&app).await;
    let (_, heads_before) = store.counts();
    let waiting = readers(&app, live, &tail, count);
    store.until_heads(heads_before + count).await;
    let (reads, heads) = store.counts();
    let (status, _) = call(&app, "POST", STREAM, "b").await;
    assert!(status.is_success(), "append: {status}");
    for reader in waiting {
        assert!(
            reader.await.expect("reader"),
            "every reader gets the message"
        );
    }
    let (reads_after, heads_after) = store.counts();
    let calls = (reads_after - reads, heads_after - heads);
    println!(
        "memory, {live:?}, {count} readers: {} reads, {} heads per append",
        calls.0, calls.1
    );
    calls
}

/// At most this many reads answer one append, however many wait: the
/// woken readers share one; a reader woken a moment later by the same
/// commit may start a second.
const READS_PER_APPEND: usize = 2;

/// Measures 1, 100 and 10 000 readers of `live`, then checks each.
async fn assert_bounded(live: Live) {
    let mut measured = Vec::new();
    for count in [1, 100, 10_000] {
        measured.push((count, memory_calls_per_append(live, count).await));
    }
    for (count, (reads, heads)) in measured {
        assert!(reads <= READS_PER_APPEND, "{count} readers: {reads} reads");
        assert_eq!(heads, 0, "woken readers decide from the commit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_readers_at_one_offset_share_one_read_per_append() {
    assert_bounded(Live::LongPoll).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_at_one_offset_share_one_read_per_append() {
    assert_bounded(Live::Sse).await;
}

/// The DynamoDB stream store on the embedded table: table requests of one
/// append that `count` waiting long-poll readers see.
async fn dynamodb_requests_per_append(count: usize) -> u64 {
    let (table, store, app) = dynamodb_counted();
    let tail = stream_with_one_message(&app).await;
    let (_, heads) = store.counts();
    let waiting = readers(&app, Live::LongPoll, &tail, count);
    store.until_heads(heads + count).await;
    let before = table.request_stats();
    let (status, _) = call(&app, "POST", STREAM, "b").await;
    assert!(status.is_success(), "append: {status}");
    for reader in waiting {
        assert!(
            reader.await.expect("reader"),
            "every reader gets the message"
        );
    }
    let all = table.request_stats() - before;
    let requests = all.reads + all.writes + all.transactions;
    println!(
        "dynamodb, {count} long-poll readers: {requests} requests per append \
         ({} reads, {} writes, {} transactions)",
        all.reads, all.writes, all.transactions
    );
    requests
}

/// The application over the DynamoDB stream store on a fresh embedded
/// table, polling for other processes' commits every `poll`.
fn dynamodb(poll: Duration) -> (Arc<dyn eddy_dynamo::Table>, App) {
    let (table, store) = dynamodb_store(poll);
    (table, serve(store))
}

/// The DynamoDB stream store on a fresh embedded table, polling for other
/// processes' commits every `poll`.
fn dynamodb_store(poll: Duration) -> (Arc<dyn eddy_dynamo::Table>, Arc<dyn Storage>) {
    let table: Arc<dyn eddy_dynamo::Table> = Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout(format!("fanout-{:08x}", fastrand::u32(..))),
    ));
    let options = eddy_streams::backend::RecordOptions {
        poll,
        ..eddy_streams_dynamodb::options()
    };
    let store = eddy_streams_dynamodb::open(Arc::clone(&table), options).expect("open");
    (table, Arc::new(store))
}

/// The application over the DynamoDB stream store on a fresh embedded
/// table, counted: a waiting reader counts as live before its wait has
/// looked at the stream (one read of its record), and a test of what an
/// append costs waits for those looks, which belong to the readers'
/// arrival. Its waits do not start the store's poller: polls are counted
/// on their own (`dynamodb_waiting_readers_cost_one_poll_per_round`).
fn dynamodb_counted() -> (Arc<dyn eddy_dynamo::Table>, Arc<Counted>, App) {
    let (table, store) = dynamodb_store(Duration::from_secs(600));
    let store = Arc::new(Counted::over(store));
    (table, Arc::clone(&store), serve(store))
}

/// Waits until the server counts `count` live readers.
async fn until_live_readers(app: &App, count: usize) {
    for _ in 0..6000 {
        let request = Request::builder()
            .uri("/metrics")
            .body(Body::empty())
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        let page = response
            .into_body()
            .collect()
            .await
            .expect("page")
            .to_bytes();
        let page = String::from_utf8_lossy(&page);
        if series::<f64>(&page, "eddy_live_readers").is_some_and(|n| n >= count as f64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the readers never all waited");
}

/// The append's own requests (its stream's record, its transaction) and
/// one shared read (the record and a page of messages).
const DYNAMODB_REQUESTS_PER_APPEND: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_long_poll_readers_share_one_read_per_append() {
    let mut measured = Vec::new();
    for count in [1, 100, 1_000, 10_000] {
        measured.push((count, dynamodb_requests_per_append(count).await));
    }
    for (count, requests) in measured {
        assert!(
            requests <= DYNAMODB_REQUESTS_PER_APPEND,
            "{count} readers: {requests} requests"
        );
    }
}

/// Readers waiting on DynamoDB cost one poll per round for their stream
/// (a `BatchGetItem` of the watched paths' records; `TransactGetItems` on
/// the embedded table), and nothing per reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_waiting_readers_cost_one_poll_per_round() {
    let (table, app) = dynamodb(Duration::from_millis(20));
    let tail = stream_with_one_message(&app).await;
    let count = 1_000;
    let arriving = table.request_stats();
    let waiting = readers(&app, Live::LongPoll, &tail, count);
    until_live_readers(&app, count).await;
    // Two polls after the readers all wait: each of them has looked.
    let settled = table.request_stats().transactions + 2;
    until_polls(&table, settled).await;
    let before = table.request_stats();
    println!(
        "dynamodb, {count} long-poll readers arriving: {:?}",
        before - arriving
    );
    until_polls(&table, before.transactions + 5).await;
    let polled = table.request_stats() - before;
    println!("dynamodb, {count} waiting long-poll readers, 5 poll rounds: {polled:?}");
    assert_eq!(polled.reads, 0, "no reader asks the table while it waits");
    assert_eq!(
        polled.items_read, polled.transactions,
        "each round reads the one watched stream's record once"
    );
    let (status, _) = call(&app, "POST", STREAM, "b").await;
    assert!(status.is_success(), "append: {status}");
    for reader in waiting {
        assert!(reader.await.expect("reader"));
    }
}

/// Waits until the table has answered `count` transactional reads (the
/// embedded table's polls), in all.
async fn until_polls(table: &Arc<dyn eddy_dynamo::Table>, count: u64) {
    for _ in 0..6000 {
        if table.request_stats().transactions >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the store never polled");
}

/// `count` long-poll readers at `tail` that, once answered, poll again
/// from the offset the answer names, as clients do; `answered` counts the
/// first answers. Each returns whether it got `b`, then `c`.
fn polling_readers(
    app: &App,
    tail: &str,
    count: usize,
    answered: &Arc<watch::Sender<usize>>,
) -> Vec<tokio::task::JoinHandle<bool>> {
    (0..count)
        .map(|_| {
            let (app, tail, answered) = (app.clone(), tail.to_owned(), Arc::clone(answered));
            tokio::spawn(async move {
                let (status, first, next) = long_poll(app.clone(), tail).await;
                answered.send_modify(|n| *n += 1);
                let (again, second, _) = long_poll(app, next).await;
                (status, first.as_str(), again, second.as_str())
                    == (StatusCode::OK, "b", StatusCode::OK, "c")
            })
        })
        .collect()
}

/// Table requests of one append in the steady state of polling clients:
/// from the append until every reader it answered waits again.
async fn dynamodb_requests_per_append_polling_again(count: usize) -> u64 {
    let (table, store, app) = dynamodb_counted();
    let tail = stream_with_one_message(&app).await;
    let answered = Arc::new(watch::Sender::new(0));
    let (_, heads) = store.counts();
    let waiting = polling_readers(&app, &tail, count, &answered);
    store.until_heads(heads + count).await;
    let before = table.request_stats();
    let (status, _) = call(&app, "POST", STREAM, "b").await;
    assert!(status.is_success(), "append: {status}");
    answered
        .subscribe()
        .wait_for(|n| *n >= count)
        .await
        .expect("answers");
    until_live_readers(&app, count).await;
    let all = table.request_stats() - before;
    let (status, _) = call(&app, "POST", STREAM, "c").await;
    assert!(status.is_success(), "append: {status}");
    for reader in waiting {
        assert!(reader.await.expect("reader"), "every reader gets b, then c");
    }
    let requests = all.reads + all.writes + all.transactions;
    println!(
        "dynamodb, {count} long-poll readers polling again: {requests} requests per append \
         ({} reads, {} writes, {} transactions)",
        all.reads, all.writes, all.transactions
    );
    requests
}

/// [`DYNAMODB_REQUESTS_PER_APPEND`] and the readers' next polls, which
/// share one read (the record and a page) too.
const DYNAMODB_REQUESTS_PER_APPEND_POLLING_AGAIN: u64 = DYNAMODB_REQUESTS_PER_APPEND + 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_long_poll_readers_polling_again_share_their_next_read() {
    let mut measured = Vec::new();
    for count in [1, 100, 1_000, 10_000] {
        measured.push((
            count,
            dynamodb_requests_per_append_polling_again(count).await,
        ));
    }
    for (count, requests) in measured {
        assert!(
            requests <= DYNAMODB_REQUESTS_PER_APPEND_POLLING_AGAIN,
            "{count} readers: {requests} requests"
        );
    }
}
