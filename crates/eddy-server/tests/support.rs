//! What the test modules share: a server on a memory store, the series of
//! its `/metrics` page, and a memory store that counts what it is asked.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eddy_server::{RunningServer, Server, ServerConfig};
use eddy_streams::{
    Append, Appended, Created, MemoryStorage, Notifier, Payload, ReadChunk, ReadFrom, Storage,
    StreamConfig, StreamError, StreamInfo, StreamPath,
};
use tokio::sync::watch;

/// A server with `config` on a fresh memory store, at a free local port.
pub(crate) async fn start(config: ServerConfig) -> RunningServer {
    Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        config,
    )
    .await
    .expect("bind")
    .spawn()
}

/// The server's `/metrics` page.
pub(crate) async fn metrics_page(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body")
}

/// The value of the unlabelled series `name` on a `/metrics` page.
pub(crate) fn series<T: FromStr>(page: &str, name: &str) -> Option<T> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the unlabelled series `name` on the server's page has a
/// value that `reached` accepts: the server's own account that it reached
/// a state.
pub(crate) async fn until_series(base: &str, name: &str, reached: impl Fn(f64) -> bool) {
    let http = reqwest::Client::new();
    for _ in 0..2000 {
        let page = metrics_page(&http, base).await;
        if series(&page, name).is_some_and(&reached) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the server's {name} never reached the value waited for");
}

/// A store (memory unless given another) that counts the reads, heads
/// and listings asked of it. It keeps the default `wait`, as the memory
/// store does, so the heads a wait makes are counted too.
pub(crate) struct Counted {
    inner: Arc<dyn Storage>,
    reads: AtomicUsize,
    lists: AtomicUsize,
    heads: watch::Sender<usize>,
}

impl Counted {
    pub(crate) fn new() -> Self {
        Counted::over(Arc::new(MemoryStorage::new()))
    }

    /// Counts what is asked of `inner`. Its own `wait` is not used: a
    /// DynamoDB store's would start its poller (not needed by a test of
    /// one process) and ask its heads past the count.
    pub(crate) fn over(inner: Arc<dyn Storage>) -> Self {
        Counted {
            inner,
            reads: AtomicUsize::new(0),
            lists: AtomicUsize::new(0),
            heads: watch::Sender::new(0),
        }
    }

    /// Listings so far.
    pub(crate) fn lists(&self) -> usize {
        self.lists.load(Ordering::SeqCst)
    }

    /// (reads, heads) so far.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.reads.load(Ordering::SeqCst), *self.heads.borrow())
    }

    /// Waits until `count` heads have been answered: each waiting reader
    /// looks at the stream once before it parks.
    pub(crate) async fn until_heads(&self, count: usize) {
        let mut heads = self.heads.subscribe();
        tokio::time::timeout(Duration::from_secs(60), heads.wait_for(|n| *n >= count))
            .await
            .expect("the readers never all waited")
            .expect("heads");
    }
}

#[async_trait]
impl Storage for Counted {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.inner.create(path, config, initial).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        self.inner.append(path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read(path, from, max_bytes).await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let head = self.inner.head(path).await;
        // Counted once answered: a waiter that counts has looked.
        self.heads.send_modify(|n| *n += 1);
        head
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.inner.delete(path).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix).await
    }

    fn documents(&self) -> Option<&dyn eddy_streams::Documents> {
        self.inner.documents()
    }

    fn notifier(&self) -> &Notifier {
        self.inner.notifier()
    }
}
