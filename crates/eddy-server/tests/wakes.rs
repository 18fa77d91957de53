//! Wake-ups are never lost: a subscription registry that falls behind the
//! store's commit feed, and a pull-wake event that cannot be appended,
//! still wake the subscription.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::StatusCode;
use bytes::Bytes;
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::{
    Append, Appended, Committed, Created, Document, Documents, Fork, MemoryDocuments,
    MemoryStorage, Notifier, Payload, ReadChunk, ReadFrom, Storage, StreamConfig, StreamError,
    StreamInfo, StreamPath,
};
use tokio::sync::broadcast;

use crate::router::{fast, req, send};

/// A memory store with two faults a test controls: its commit feed holds
/// one commit and is fed only on [`release`](Self::release) (so a
/// subscriber that is not reading falls behind), and appends to one path
/// fail a given number of times.
struct Rigged {
    inner: MemoryStorage,
    /// The inner store's commits, not yet passed on.
    held: Mutex<broadcast::Receiver<Committed>>,
    /// The feed subscribers see: room for one commit.
    feed: broadcast::Sender<Committed>,
    failing_path: String,
    failures_left: AtomicUsize,
    failed: AtomicUsize,
    documents: FlakyDocuments,
}

/// Documents whose next writes fail, as a store that is briefly away.
#[derive(Default)]
struct FlakyDocuments {
    inner: MemoryDocuments,
    failures_left: AtomicUsize,
    failed: AtomicUsize,
}

#[async_trait]
impl Documents for FlakyDocuments {
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError> {
        self.inner.get(key).await
    }

    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError> {
        let fail = self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StreamError::Unavailable {
                message: "the database is away".into(),
                source: None,
            });
        }
        self.inner.put(key, expected, body).await
    }

    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError> {
        self.inner.remove(key, expected).await
    }

    async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StreamError> {
        self.inner.scan(prefix, after, limit).await
    }
}

impl Rigged {
    fn new(failing_path: &str, failures: usize) -> Arc<Self> {
        let inner = MemoryStorage::new();
        let held = Mutex::new(inner.committed());
        Arc::new(Rigged {
            inner,
            held,
            feed: broadcast::channel(1).0,
            failing_path: failing_path.to_owned(),
            failures_left: AtomicUsize::new(failures),
            failed: AtomicUsize::new(0),
            documents: FlakyDocuments::default(),
        })
    }

    /// Passes every held commit on at once, without yielding: a reader
    /// of the feed misses all but the last.
    fn release(&self) {
        let mut held = self.held.lock().expect("lock");
        while let Ok(commit) = held.try_recv() {
            let _ = self.feed.send(commit);
        }
    }
}

#[async_trait]
impl Storage for Rigged {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.inner.create(path, config, initial).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let fail = path.as_str() == self.failing_path
            && self
                .failures_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if fail {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StreamError::Unavailable {
                message: "the disk is away".into(),
                source: None,
            });
        }
        self.inner.append(path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.inner.read(path, from, max_bytes).await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        self.inner.fork(path, fork).await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.inner.head(path).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.inner.delete(path).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.inner.list(prefix).await
    }

    fn notifier(&self) -> &Notifier {
        self.inner.notifier()
    }

    fn committed(&self) -> broadcast::Receiver<Committed> {
        self.feed.subscribe()
    }

    fn documents(&self) -> Option<&dyn Documents> {
        Some(&self.documents)
    }
}

fn serve(store: Arc<Rigged>, config: ServerConfig) -> eddy_server::App {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    std::mem::forget(stop);
    app(AppState::new(store, config, stopping))
}

async fn call(app: &eddy_server::App, method: &str, uri: &str, body: &str) -> StatusCode {
    let request = req(method, uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let (response, text) = send(app, request).await;
    assert!(
        response.status().is_success(),
        "{method} {uri}: {} {text}",
        response.status()
    );
    response.status()
}

async fn subscribe(app: &eddy_server::App, id: &str, stream: &str, wake_stream: &str) {
    let body = serde_json::json!({
        "type": "pull-wake",
        "streams": [stream],
        "wake_stream": wake_stream,
    });
    call(
        app,
        "PUT",
        &format!("/v1/__ds/subscriptions/{id}"),
        &body.to_string(),
    )
    .await;
}

/// The wake events in a stream, once there are some: each read is a
/// long-poll, which waits on the store until the stream has data (or the
/// server's long-poll timeout), as the registry works on its own task.
async fn wake_events(app: &eddy_server::App, stream: &str) -> Vec<serde_json::Value> {
    for _ in 0..100 {
        let uri = format!("/v1/{stream}?offset=-1&live=long-poll");
        let (response, body) = send(app, req("GET", &uri).body(Body::empty()).expect("req")).await;
        if response.status() == StatusCode::OK {
            let events: Vec<serde_json::Value> = serde_json::from_str(&body).expect("json");
            if !events.is_empty() {
                return events;
            }
        }
    }
    Vec::new()
}

/// Regression: when the registry fell behind the commit feed it only
/// logged it, and a subscription whose commit was among those missed was
/// never woken.
#[tokio::test]
async fn a_registry_that_falls_behind_the_commit_feed_still_wakes_every_subscription() {
    let store = Rigged::new("", 0);
    let app = serve(Arc::clone(&store), fast());
    for stream in ["events/a", "other/b", "wake/one", "wake/two"] {
        call(&app, "PUT", &format!("/v1/{stream}"), "").await;
    }
    subscribe(&app, "one", "events/a", "wake/one").await;
    subscribe(&app, "two", "other/b", "wake/two").await;
    store.release();
    call(&app, "POST", "/v1/events/a", r#"{"n":1}"#).await;
    call(&app, "POST", "/v1/other/b", r#"{"n":2}"#).await;
    // Both commits at once: the registry sees that it missed the first.
    store.release();

    let two = wake_events(&app, "wake/two").await;
    assert_eq!(two.len(), 1, "the commit it saw wakes `two`");
    let one = wake_events(&app, "wake/one").await;
    assert_eq!(one.len(), 1, "the commit it missed wakes `one` too");
    assert_eq!(one[0]["subscription_id"], "one");
    assert_eq!(one[0]["streams"][0]["path"], "events/a");
}

/// Regression: a pull-wake event that could not be appended left the
/// subscription marked as woken for good: no later commit, and no retry,
/// woke it again.
#[tokio::test]
async fn a_failed_wake_append_is_retried_and_the_subscription_wakes_again() {
    let store = Rigged::new("v1/wake/one", 2);
    let events = wake_events_of_one_commit(&store, || {}).await;
    assert_eq!(store.failed.load(Ordering::SeqCst), 2, "two appends failed");
    assert_eq!(events.len(), 1, "the third attempt posts the wake event");
    assert_eq!(events[0]["streams"][0]["path"], "events/a");
}

/// A commit whose recording on its subscription fails (the store's
/// documents briefly refuse writes) is recorded again after a backoff,
/// and the subscription is woken: nothing is lost to a passing failure.
#[tokio::test]
async fn a_commit_whose_recording_fails_is_recorded_again_and_wakes() {
    let store = Rigged::new("", 0);
    let events = wake_events_of_one_commit(&store, || {
        store.documents.failures_left.store(3, Ordering::SeqCst);
    })
    .await;
    assert_eq!(
        store.documents.failed.load(Ordering::SeqCst),
        3,
        "three writes of the subscription failed"
    );
    assert_eq!(events.len(), 1, "the commit was recorded and woke it");
    assert_eq!(events[0]["streams"][0]["path"], "events/a");
}

/// The wake events of pull-wake subscription `one` of `events/a` after one
/// append there, on a server that retries failed wakes quickly; `arm`
/// runs between the subscription and the append.
async fn wake_events_of_one_commit(
    store: &Arc<Rigged>,
    arm: impl FnOnce(),
) -> Vec<serde_json::Value> {
    let app = serve(
        Arc::clone(store),
        ServerConfig {
            wake_retry_initial: Duration::from_millis(10),
            ..fast()
        },
    );
    for stream in ["events/a", "wake/one"] {
        call(&app, "PUT", &format!("/v1/{stream}"), "").await;
    }
    subscribe(&app, "one", "events/a", "wake/one").await;
    store.release();
    arm();
    call(&app, "POST", "/v1/events/a", r#"{"n":1}"#).await;
    store.release();
    wake_events(&app, "wake/one").await
}
