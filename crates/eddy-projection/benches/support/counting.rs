//! A storage wrapper for benchmarks that counts what goes to Eddy's own
//! streams (under [`RESERVED_PREFIX`]): store calls, writes, the records
//! and bytes appended, and the bytes read. Counts do not depend on the
//! machine's load; timings do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eddy_projection::RESERVED_PREFIX;
use eddy_streams::{
    Append, Appended, Created, Notifier, Offset, Payload, ReadChunk, ReadFrom, Storage,
    StreamConfig, StreamError, StreamInfo, StreamPath, Wait,
};

/// Counts the calls on Eddy's own streams.
pub struct Counting {
    inner: Arc<dyn Storage>,
    /// Every call (create, append, read, head, delete).
    pub calls: AtomicU64,
    /// Creates, appends and deletes.
    pub writes: AtomicU64,
    /// Appends and creates that carried data.
    pub records: AtomicU64,
    /// The bytes they carried.
    pub bytes: AtomicU64,
    /// The bytes of the messages read.
    pub read_bytes: AtomicU64,
}

impl Counting {
    /// Counts the calls on `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Counting {
            inner,
            calls: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
        }
    }

    /// One count now.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn call(&self, path: &StreamPath, write: bool) -> bool {
        let ours = path.as_str().starts_with(RESERVED_PREFIX);
        if ours {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if write {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
        }
        ours
    }

    fn wrote(&self, path: &StreamPath, payload: &Payload) {
        if self.call(path, true) && !payload.is_empty() {
            self.records.fetch_add(1, Ordering::Relaxed);
            self.bytes
                .fetch_add(payload.len() as u64, Ordering::Relaxed);
        }
    }
}

#[async_trait]
impl Storage for Counting {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.wrote(path, &initial);
        self.inner.create(path, config, initial).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        self.wrote(path, &append.payload);
        self.inner.append(path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let chunk = self.inner.read(path, from, max_bytes).await?;
        if self.call(path, false) {
            let bytes: usize = chunk.messages.iter().map(|m| m.len()).sum();
            self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        Ok(chunk)
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.call(path, false);
        self.inner.head(path).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.call(path, true);
        self.inner.delete(path).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.inner.list(prefix).await
    }

    fn notifier(&self) -> &Notifier {
        self.inner.notifier()
    }

    async fn wait(
        &self,
        path: &StreamPath,
        after: Offset,
        timeout: Duration,
    ) -> Result<Wait, StreamError> {
        self.inner.wait(path, after, timeout).await
    }
}
