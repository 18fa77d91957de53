//! Live waits decide from what commits publish, not by asking the store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eddy_streams::{
    Append, Appended, Created, MemoryStorage, Notifier, Offset, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath, Wait,
};

/// Memory storage that counts `head` calls and keeps `wait` the default.
#[derive(Default)]
struct Counting {
    inner: MemoryStorage,
    heads: AtomicUsize,
}

#[async_trait]
impl Storage for Counting {
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
        max: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.inner.read(path, from, max).await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.heads.fetch_add(1, Ordering::SeqCst);
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
}

/// A waiter looks at the stream once; the commits that wake it carry the
/// new tail, so neither it nor a waiter that comes later asks again.
#[tokio::test]
async fn woken_waiters_decide_from_the_published_commit() {
    let store = Arc::new(Counting::default());
    let path = StreamPath::new("live").expect("path");
    let empty = store
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .expect("create")
        .info
        .tail;
    let first = tokio::spawn({
        let (store, path) = (Arc::clone(&store), path.clone());
        async move {
            store
                .wait(&path, Offset::ZERO, Duration::from_secs(10))
                .await
        }
    });
    while store.heads.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // An empty wait for the tail to pass 1 keeps a watcher on the path, so
    // the next commit's state stays published for later waiters.
    let second = tokio::spawn({
        let (store, path) = (Arc::clone(&store), path.clone());
        async move {
            store
                .wait(&path, empty.with_position(1), Duration::from_secs(10))
                .await
        }
    });
    while store.heads.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    store
        .append(&path, Append::body("1"))
        .await
        .expect("append");
    let woken = first.await.expect("join").expect("wait");
    assert!(matches!(woken, Wait::Changed(info) if info.tail.position() == 1));
    let late = store
        .wait(&path, Offset::ZERO, Duration::from_secs(10))
        .await
        .expect("wait");
    assert!(matches!(late, Wait::Changed(info) if info.tail.position() == 1));
    store
        .append(&path, Append::body("2"))
        .await
        .expect("append");
    let woken = second.await.expect("join").expect("wait");
    assert!(matches!(woken, Wait::Changed(info) if info.tail.position() == 2));
    assert_eq!(
        store.heads.load(Ordering::SeqCst),
        2,
        "one look per waiter that came before any commit, none after"
    );
}
