//! Shared fixtures: backends, a fault-injecting storage, test streams.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eddy_streams::{
    Append, Appended, Committed, Created, JsonStream, MemoryStorage, Notifier, Offset, Payload,
    ReadChunk, ReadFrom, SqliteStorage, Storage, StreamConfig, StreamError, StreamInfo, StreamPath,
    Wait,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

pub type Case = fn(Arc<dyn Storage>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// A runtime like the tests': two workers, time and I/O enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs `case` on a fresh store of every backend.
pub fn on_every_backend(name: &str, case: Case) {
    let runtime = runtime();
    for (backend, store, _dir) in backends() {
        eprintln!("case `{name}` on {backend}");
        runtime.block_on(case(store));
    }
}

/// The admin token of the in-process `eddy serve` of [`remote`].
pub const ADMIN_TOKEN: &str = "test-admin";

/// An in-process `eddy serve` over a SQLite store, and a remote client of
/// it with the admin token (checkpoints live under the reserved prefix).
pub async fn remote(dir: &std::path::Path) -> (Arc<dyn Storage>, eddy_server::RunningServer) {
    served(Arc::new(SqliteStorage::open(dir).expect("open sqlite"))).await
}

/// An in-process `eddy serve` over `store`, and a remote client of it
/// with the admin token.
pub async fn served(store: Arc<dyn Storage>) -> (Arc<dyn Storage>, eddy_server::RunningServer) {
    let config = eddy_server::ServerConfig {
        long_poll_timeout: Duration::from_millis(300),
        admin_token: Some(ADMIN_TOKEN.into()),
        ..eddy_server::ServerConfig::default()
    };
    let server = eddy_server::Server::bind(([127, 0, 0, 1], 0).into(), store, config)
        .await
        .expect("bind")
        .spawn();
    let client = eddy_server::RemoteStorage::new(&server.url())
        .expect("client")
        .with_token(ADMIN_TOKEN);
    (Arc::new(client), server)
}

pub fn backends() -> Vec<(&'static str, Arc<dyn Storage>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStorage::open(dir.path()).expect("open sqlite");
    vec![
        ("memory", Arc::new(MemoryStorage::new()), None),
        ("sqlite", Arc::new(sqlite), Some(dir)),
    ]
}

/// Declares a `#[test]` per case, each run on every backend.
#[macro_export]
macro_rules! on_backends {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::support::on_every_backend(stringify!($name), |store| Box::pin(cases::$name(store)));
            }
        )*
    };
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    pub order_id: String,
    pub amount: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    pub order_id: String,
    pub total: f64,
}

/// The parameters of bindings per workspace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    pub workspace_id: String,
}

/// The parameters of workspace `id`.
pub fn workspace(id: &str) -> Workspace {
    Workspace {
        workspace_id: id.into(),
    }
}

/// The database of the PostgreSQL tests (`DATABASE_URL`), or `None` once
/// it has said that `name` was skipped there: a failure instead when
/// `EDDY_REQUIRE_POSTGRES` is set, so that the test command never skips
/// them silently.
#[cfg(feature = "postgres")]
pub fn postgres_url(name: &str) -> Option<String> {
    let url = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
    if url.is_none() {
        let required = std::env::var_os("EDDY_REQUIRE_POSTGRES").is_some();
        assert!(!required, "`{name}`: DATABASE_URL is not set");
        eprintln!("`{name}` on postgres: skipped, DATABASE_URL is not set");
    }
    url
}

/// A schema no other test uses (nor a test of another process): `prefix`,
/// the process id and a counter.
#[cfg(feature = "postgres")]
pub fn fresh_schema(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{n}", std::process::id())
}

/// Drops the PostgreSQL schema of a test, with everything in it.
#[cfg(feature = "postgres")]
pub async fn drop_pg_schema(url: &str, schema: &str) {
    use eddy_streams::sqlx::{self, Executor};
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    pool.execute(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .await
    .expect("drop the schema");
    pool.close().await;
}

/// The total an order contributes on its own.
pub fn total_of(order: &Order) -> Total {
    Total {
        order_id: order.order_id.clone(),
        total: order.amount,
    }
}

pub fn order(id: usize, amount: f64) -> Order {
    Order {
        order_id: format!("o{id}"),
        amount,
    }
}

pub fn orders() -> JsonStream<Order> {
    JsonStream::new("Shop/Orders", "orders").expect("route")
}

pub fn totals() -> JsonStream<Total> {
    JsonStream::new("Shop/Totals", "totals").expect("route")
}

pub fn numbers() -> JsonStream<i64> {
    JsonStream::new("Test/Numbers", "numbers").expect("route")
}

/// Unsigned numbers, for folds whose sums are checked exactly.
pub fn counts() -> JsonStream<u64> {
    JsonStream::new("Test/Counts", "counts").expect("route")
}

/// The running sums of `counts`.
pub fn sums() -> JsonStream<u64> {
    JsonStream::new("Test/Sums", "sums").expect("route")
}

/// `running-sum`: the running sum of `counts`, one item per number on
/// `sums`, with the producer commit.
pub fn running_sum() -> eddy_projection::Projection<(), u64> {
    let declare = eddy_projection::Declare::<()>::new("running-sum");
    let input = declare.input("counts", &counts());
    let output = declare.output("sums", &sums());
    declare
        .map_accum(eddy_projection::Commit::producer(), 0u64)
        .on(input, move |sum, entry, _, emits| {
            let next = sum + entry.item;
            emits.push(output, next);
            next
        })
        .build()
        .expect("declare")
}

/// The running sums of `numbers`, as one sequential fold gives them.
pub fn prefix_sums(numbers: &[u64]) -> Vec<u64> {
    numbers
        .iter()
        .scan(0, |sum, n| {
            *sum += n;
            Some(*sum)
        })
        .collect()
}

pub async fn read_all<T: Serialize + serde::de::DeserializeOwned>(
    store: &dyn Storage,
    stream: &JsonStream<T>,
    params: &impl Serialize,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut from = ReadFrom::Beginning;
    loop {
        let chunk = stream.read(store, params, from).await.expect("read");
        out.extend(chunk.items);
        if chunk.up_to_date {
            return out;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

/// Which calls a [`Faulty`] store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Append,
    Read,
    Head,
    Delete,
}

/// Whether a failure happens before the call reaches the store or after
/// (the call took effect, but the caller sees a failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Before,
    After,
}

/// A storage that fails chosen calls with `storage-failure`, and can hold
/// back its `committed` feed to release it in one burst.
pub struct Faulty {
    inner: Arc<dyn Storage>,
    plan: Mutex<Vec<Fault>>,
    /// Work to run, once, before the first call of an op on a path.
    hooks: Mutex<Vec<(Op, StreamPath, Hook)>>,
    held: Option<HeldFeed>,
    deaf: bool,
}

/// What a hook runs: another writer's moves, say.
pub type Hook = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One planned failure: the `nth` call of `op` (any op with `None`) on a
/// path starting with `path` (any path with `None`).
struct Fault {
    op: Option<Op>,
    path: Option<String>,
    nth: usize,
    when: When,
}

/// A `committed` feed of two slots whose events wait for
/// [`Faulty::release_commits`]: releasing more than two at once makes
/// every subscriber lag, on any backend.
struct HeldFeed {
    sender: broadcast::Sender<Committed>,
    waiting: Mutex<Vec<Committed>>,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        Faulty {
            inner,
            plan: Mutex::new(Vec::new()),
            hooks: Mutex::new(Vec::new()),
            held: None,
            deaf: false,
        }
    }

    /// A store whose live waits never hear a commit: each one runs to its
    /// timeout (a lost wake-up, as for a commit made by another process).
    pub fn deaf(inner: Arc<dyn Storage>) -> Self {
        Faulty {
            deaf: true,
            ..Faulty::new(inner)
        }
    }

    /// A store whose commits are reported only by
    /// [`release_commits`](Faulty::release_commits).
    pub fn holding_commits(inner: Arc<dyn Storage>) -> Self {
        Faulty {
            held: Some(HeldFeed {
                sender: broadcast::channel(2).0,
                waiting: Mutex::new(Vec::new()),
            }),
            ..Faulty::new(inner)
        }
    }

    /// Reports every held commit at once.
    pub fn release_commits(&self) {
        if let Some(held) = &self.held {
            for event in held.waiting.lock().expect("held").drain(..) {
                let _ = held.sender.send(event);
            }
        }
    }

    fn hold(&self, path: &StreamPath, tail: Offset, closed: bool) {
        if let Some(held) = &self.held {
            held.waiting.lock().expect("held").push(Committed {
                path: path.to_string(),
                tail,
                closed,
            });
        }
    }

    /// Fails the `nth` (from 0) call of `op` (of any op with `None`)
    /// counted from now.
    pub fn fail_nth(&self, op: Option<Op>, nth: usize, when: When) {
        self.plan.lock().expect("plan").push(Fault {
            op,
            path: None,
            nth,
            when,
        });
    }

    /// Fails the `nth` (from 0) call of `op` on a path that starts with
    /// `path`, counted from now.
    pub fn fail_nth_on(&self, path: &str, op: Op, nth: usize, when: When) {
        self.plan.lock().expect("plan").push(Fault {
            op: Some(op),
            path: Some(path.to_owned()),
            nth,
            when,
        });
    }

    /// Runs `hook` before the next call of `op` on `path` reaches the
    /// store: an interleaving of another writer, at an exact point.
    pub fn before(&self, op: Op, path: &StreamPath, hook: Hook) {
        self.hooks
            .lock()
            .expect("hooks")
            .push((op, path.clone(), hook));
    }

    fn hook(&self, op: Op, path: &StreamPath) -> Option<Hook> {
        let mut hooks = self.hooks.lock().expect("hooks");
        let at = hooks.iter().position(|(o, p, _)| *o == op && p == path)?;
        Some(hooks.remove(at).2)
    }

    fn check(&self, op: Op, path: &StreamPath) -> Option<When> {
        let mut plan = self.plan.lock().expect("plan");
        let mut fired = None;
        plan.retain_mut(|fault| {
            let other_path = fault
                .path
                .as_ref()
                .is_some_and(|p| !path.as_str().starts_with(p.as_str()));
            if fault.op.is_some_and(|o| o != op) || other_path || fired.is_some() {
                return true;
            }
            if fault.nth == 0 {
                fired = Some(fault.when);
                return false;
            }
            fault.nth -= 1;
            true
        });
        fired
    }

    async fn guard<T>(
        &self,
        op: Op,
        path: &StreamPath,
        call: impl Future<Output = Result<T, StreamError>>,
    ) -> Result<T, StreamError> {
        if let Some(hook) = self.hook(op, path) {
            hook.await;
        }
        match self.check(op, path) {
            None => call.await,
            Some(When::Before) => Err(StreamError::unavailable(format!("injected {op:?} failure"))),
            Some(When::After) => {
                call.await?;
                Err(StreamError::unavailable(format!(
                    "injected {op:?} failure after the call"
                )))
            }
        }
    }
}

#[async_trait]
impl Storage for Faulty {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let created = self
            .guard(Op::Create, path, self.inner.create(path, config, initial))
            .await?;
        self.hold(path, created.info.tail, created.info.closed);
        Ok(created)
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let appended = self
            .guard(Op::Append, path, self.inner.append(path, append))
            .await?;
        self.hold(path, appended.next_offset, appended.closed);
        Ok(appended)
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.guard(Op::Read, path, self.inner.read(path, from, max_bytes))
            .await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.guard(Op::Head, path, self.inner.head(path)).await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.guard(Op::Delete, path, self.inner.delete(path)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.inner.list(prefix).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<eddy_streams::ListPage, StreamError> {
        self.inner.list_page(prefix, after, limit).await
    }

    async fn list_paths_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<eddy_streams::PathPage, StreamError> {
        self.inner.list_paths_page(prefix, after, limit).await
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
        if self.deaf {
            tokio::time::sleep(timeout).await;
            return Ok(Wait::TimedOut(self.inner.head(path).await?));
        }
        self.inner.wait(path, after, timeout).await
    }

    fn committed(&self) -> broadcast::Receiver<Committed> {
        match &self.held {
            Some(held) => held.sender.subscribe(),
            None => self.inner.committed(),
        }
    }
}

/// Waits until the stream at `path` holds at least `count` messages, on
/// the store's own change signal (at most 10 s).
pub async fn wait_for_tail(store: &dyn Storage, path: &StreamPath, count: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let tail = store.head(path).await.expect("head").tail;
        if tail.position() >= count {
            return;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(
            !left.is_zero(),
            "`{path}` holds {tail}, not {count} messages"
        );
        store.wait(path, tail, left).await.expect("wait");
    }
}

/// What the child workers of the process tests say about their runner.
pub mod child {
    use std::time::Duration;

    use eddy_projection::{AttachError, Attached, BindingState, Progress, ProjectionError};
    use futures::{Stream, StreamExt};

    /// `child: committed`, or `child: <code> <error>`.
    pub fn said(outcome: Result<(), &ProjectionError>) -> String {
        match outcome {
            Ok(()) => "child: committed".to_owned(),
            Err(e) => format!("child: {} {e}", e.code()),
        }
    }

    /// What the first element of a follow stream says.
    pub async fn first_of(
        mut follow: impl Stream<Item = eddy_projection::Result<Progress<()>>> + Unpin,
    ) -> String {
        let first = follow.next().await.expect("a first element");
        said(first.as_ref().map(drop))
    }

    /// What an attachment's run after `commit` says: its failure, or
    /// `committed` once a binding is idle.
    pub async fn attached_after(
        attached: &Attached<(), ()>,
        commit: impl std::future::Future<Output = ()>,
    ) -> String {
        let mut errors = Box::pin(attached.errors());
        commit.await;
        tokio::select! {
            Some(error) = errors.next() => match error {
                AttachError::Run { error, .. } => said(Err(&error)),
                other => format!("child: {other}"),
            },
            _ = until_idle(attached) => said(Ok(())),
        }
    }

    /// Waits (at most a minute) until a binding of the attachment is idle.
    pub async fn until_idle(attached: &Attached<(), ()>) {
        let idle = attached.wait_for(|status| {
            status
                .values()
                .any(|b| matches!(b.state, BindingState::Idle))
        });
        tokio::time::timeout(Duration::from_secs(60), idle)
            .await
            .expect("a binding is idle within a minute")
            .expect("attached");
    }
}
