//! [`RecordStorage`]: a whole `Storage` over any [`Backend`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::task::JoinHandle;

use super::retry::Retry;
use super::{group, poll, Backend, Commit, RecordOptions, Unit};
use crate::engine::{whole_pass, CompactStep, Engine, COMPACTION_STEP, COMPACTION_STEP_BYTES};
use crate::storage::wait_for;
use crate::{
    Append, Appended, Created, Fork, Notifier, Offset, Payload, ReadChunk, ReadFrom, Storage,
    StreamConfig, StreamError, StreamInfo, StreamPath, StreamSnapshot, Wait,
};

/// The stream store over a [`Backend`]: the engine decides, the backend
/// stores.
///
/// Each call runs the engine on one unit of the backend and commits it
/// once; a call whose unit lost a race to another writer (in this process
/// or another) runs again on a new unit after a jittered pause (1 ms
/// doubling to 100 ms) for up to [`RecordOptions::contention_timeout`],
/// and then fails with a retryable error having written nothing; a
/// winner that had lost first lets the others commit before its next
/// group.
/// Concurrent appends to one stream queue up and are committed together,
/// up to [`RecordOptions::max_group`] per unit. Readers of this process
/// wake at its commits, and at other processes' within
/// [`RecordOptions::poll`]: a task reads the records of the streams that
/// have waiters, all in one backend call, at that interval.
pub struct RecordStorage<B: Backend> {
    inner: Arc<Inner<B>>,
    poller: OnceLock<JoinHandle<()>>,
}

/// What the store's calls and tasks share.
pub(super) struct Inner<B: Backend> {
    pub backend: B,
    pub engine: Engine,
    pub notifier: Notifier,
    pub options: RecordOptions,
    pub queues: group::Queues,
}

impl<B: Backend> std::fmt::Debug for RecordStorage<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStorage")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> RecordStorage<B> {
    /// The store over `backend`.
    pub fn new(backend: B, options: RecordOptions) -> Self {
        let engine = Engine {
            max_append_bytes: options.max_append_bytes,
            max_producers: options.max_producers_per_stream,
            producer_expiry_ms: crate::clock::duration_ms(options.producer_expiry),
            limits: options.limits,
            clock: Arc::clone(&options.clock),
            incarnations: Default::default(),
            passes: Default::default(),
        };
        RecordStorage {
            inner: Arc::new(Inner {
                backend,
                engine,
                notifier: Notifier::default(),
                options,
                queues: group::Queues::default(),
            }),
            poller: OnceLock::new(),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Runs a call that writes until it commits, loses too many races, or
    /// fails.
    async fn write(&self, call: &Write) -> Result<Written, StreamError> {
        let inner = &self.inner;
        let mut retry = Retry::start(inner.options.contention_timeout);
        loop {
            let mut unit = inner.backend.open();
            let written = call.run(&inner.engine, &mut unit).await?;
            if let Some(overflow) = unit.overflow() {
                return Err(overflow);
            }
            match inner.backend.commit(unit).await? {
                Commit::Done => return Ok(written),
                Commit::Conflict => retry.lost().await?,
            }
        }
    }

    /// Starts the task that polls other processes' commits, once.
    fn start_poller(&self) {
        self.poller
            .get_or_init(|| tokio::spawn(poll::run(Arc::downgrade(&self.inner))));
    }
}

impl<B: Backend> Drop for RecordStorage<B> {
    fn drop(&mut self) {
        if let Some(poller) = self.poller.get() {
            poller.abort();
        }
    }
}

/// Refuses a retention policy on a backend that does not apply one
/// ([`Backend::applies_retention`]): a policy stored but never applied
/// would keep what its writer asked to drop.
fn refuse_retention<B: Backend>(
    backend: &B,
    retention: &crate::Retention,
) -> Result<(), StreamError> {
    if retention.is_none() || backend.applies_retention() {
        return Ok(());
    }
    Err(StreamError::InvalidRetention(
        "this store does not drop retained messages: create the stream without a \
         retention policy (Eddy-Retention, --retention)"
            .into(),
    ))
}

/// A call that writes, as data, so that it can run again on a new unit.
enum Write {
    Create {
        path: StreamPath,
        config: StreamConfig,
        initial: Payload,
    },
    Fork {
        path: StreamPath,
        fork: Fork,
    },
    Delete {
        path: StreamPath,
    },
    Restore {
        snapshot: StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    },
}

/// What a [`Write`] returns.
enum Written {
    Created(Created),
    Deleted,
    Restored(StreamInfo),
}

impl Write {
    async fn run<U: Unit>(&self, engine: &Engine, unit: &mut U) -> Result<Written, StreamError> {
        Ok(match self {
            Write::Create {
                path,
                config,
                initial,
            } => Written::Created(
                engine
                    .create(unit, path, config.clone(), initial.clone())
                    .await?,
            ),
            Write::Fork { path, fork } => {
                Written::Created(engine.fork(unit, path, fork.clone()).await?)
            }
            Write::Delete { path } => {
                engine.delete(unit, path).await?;
                Written::Deleted
            }
            Write::Restore {
                snapshot,
                first,
                messages,
            } => Written::Restored(
                engine
                    .restore(unit, snapshot, *first, messages.clone())
                    .await?,
            ),
        })
    }
}

impl<B: Backend> RecordStorage<B> {
    async fn create_or_fork(&self, call: Write) -> Result<Created, StreamError> {
        match self.write(&call).await? {
            Written::Created(created) => {
                if created.created {
                    self.inner.notifier.publish(&created.info);
                }
                Ok(created)
            }
            Written::Deleted | Written::Restored(_) => {
                Err(StreamError::internal("a create answered as another call"))
            }
        }
    }
}

/// Refuses a compaction policy on a backend that does not compact
/// ([`Backend::compacts`]): a policy stored but never applied would keep
/// every superseded change its writer asked to drop.
fn refuse_compaction<B: Backend>(
    backend: &B,
    compaction: Option<&crate::Compaction>,
) -> Result<(), StreamError> {
    if compaction.is_none() || backend.compacts() {
        return Ok(());
    }
    Err(StreamError::InvalidCompaction(
        "this store does not compact streams: create the stream without a compaction \
         policy (Eddy-Compaction, --compaction)"
            .into(),
    ))
}

impl<B: Backend> RecordStorage<B> {
    /// One compaction step of the stream at `path` (see
    /// `Engine::compact_step`), in a unit of its own, committed once; a
    /// step that lost a race runs again (its pass went on past what it
    /// read, which only keeps more).
    async fn compact_step(&self, path: &str, force: bool) -> Result<CompactStep, StreamError> {
        let inner = &self.inner;
        let mut retry = Retry::start(inner.options.contention_timeout);
        loop {
            let mut unit = inner.backend.open();
            let step = (inner.engine)
                .compact_step(
                    &mut unit,
                    path,
                    COMPACTION_STEP,
                    COMPACTION_STEP_BYTES,
                    force,
                )
                .await?;
            if let Some(overflow) = unit.overflow() {
                return Err(overflow);
            }
            match inner.backend.commit(unit).await? {
                Commit::Done => return Ok(step),
                Commit::Conflict => retry.lost().await?,
            }
        }
    }
}

#[async_trait]
impl<B: Backend> Storage for RecordStorage<B> {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        refuse_retention(&self.inner.backend, &config.retention)?;
        refuse_compaction(&self.inner.backend, config.compaction.as_ref())?;
        self.create_or_fork(Write::Create {
            path: path.clone(),
            config,
            initial,
        })
        .await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        group::append(&self.inner, path, append).await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let inner = &self.inner;
        let mut unit = inner.backend.open();
        let (chunk, touch) = inner.engine.read(&mut unit, path, from, max_bytes).await?;
        if let Some(touch) = touch {
            // A lost touch lets the stream expire earlier than this read
            // said, never later; the read itself succeeded.
            if let Err(error) = inner.backend.slide(&touch.key, touch.at_ms).await {
                tracing::debug!(%error, path = %path, "storing a read's TTL touch");
            }
        }
        Ok(chunk)
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        if let Some(retention) = &fork.retention {
            refuse_retention(&self.inner.backend, retention)?;
        }
        refuse_compaction(&self.inner.backend, fork.compaction.as_ref())?;
        self.create_or_fork(Write::Fork {
            path: path.clone(),
            fork,
        })
        .await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let mut unit = self.inner.backend.open();
        self.inner.engine.head(&mut unit, path).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.write(&Write::Delete { path: path.clone() }).await?;
        self.inner.notifier.touch(path.as_str());
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        let mut unit = self.inner.backend.open();
        self.inner.engine.list(&mut unit, prefix).await
    }

    /// One page, read by the backend's `list_page`.
    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::ListPage, StreamError> {
        let mut unit = self.inner.backend.open();
        (self.inner.engine)
            .list_page(&mut unit, prefix, after, limit)
            .await
    }

    /// The backend's paths alone, when it reads them so.
    async fn list_paths_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::PathPage, StreamError> {
        let mut unit = self.inner.backend.open();
        (self.inner.engine)
            .list_paths_page(&mut unit, prefix, after, limit)
            .await
    }

    /// The backend's count, when it keeps one.
    async fn count(&self, prefix: &str) -> Result<usize, StreamError> {
        let mut unit = self.inner.backend.open();
        self.inner.engine.count(&mut unit, prefix).await
    }

    /// What the backend's `sweepable` finds, removed in one unit (see
    /// `sweep.rs`).
    async fn sweep(&self, max: usize) -> Result<usize, StreamError> {
        super::sweep::step(&self.inner, max).await
    }

    /// A whole pass, a step per unit (each as the sweep's), on a backend
    /// that compacts.
    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        if !self.inner.backend.compacts() {
            return Err(StreamError::InvalidCompaction(
                "this stream store cannot compact streams".into(),
            ));
        }
        whole_pass(|force| self.compact_step(path.as_str(), force)).await
    }

    /// Read in one unit, and read again while a commit changed what the
    /// unit read before it was done (its record and producers would be of
    /// two commits).
    async fn snapshot(&self, path: &StreamPath) -> Result<StreamSnapshot, StreamError> {
        let inner = &self.inner;
        let mut retry = Retry::start(inner.options.contention_timeout);
        loop {
            let mut unit = inner.backend.open();
            let snapshot = inner.engine.snapshot(&mut unit, path).await?;
            if inner.backend.unchanged(unit).await? {
                return Ok(snapshot);
            }
            retry.lost().await?;
        }
    }

    async fn restore(
        &self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        refuse_retention(&self.inner.backend, &snapshot.config.retention)?;
        refuse_compaction(&self.inner.backend, snapshot.config.compaction.as_ref())?;
        let call = Write::Restore {
            snapshot: snapshot.clone(),
            first,
            messages,
        };
        match self.write(&call).await? {
            Written::Restored(info) => {
                self.inner.notifier.publish(&info);
                Ok(info)
            }
            Written::Created(_) | Written::Deleted => {
                Err(StreamError::internal("a restore answered as another call"))
            }
        }
    }

    async fn writable(&self) -> Result<(), StreamError> {
        self.inner.backend.writable().await
    }

    fn documents(&self) -> Option<&dyn crate::Documents> {
        self.inner.backend.documents()
    }

    fn notifier(&self) -> &Notifier {
        &self.inner.notifier
    }

    async fn wait(
        &self,
        path: &StreamPath,
        after: Offset,
        timeout: Duration,
    ) -> Result<Wait, StreamError> {
        self.start_poller();
        wait_for(self, path, after, timeout).await
    }
}
