//! The PostgreSQL backend: one database shared by many processes.
//!
//! See `DESIGN-postgres.md` in the crate for the record layout, the commit
//! protocol and its crash cases.

mod batch;
mod connections;
mod documents;
mod error;
mod flusher;
mod group;
mod listen;
mod marks;
mod read;
mod records;
mod schema;
mod sql;
mod transaction;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};
use tokio::task::JoinHandle;

use crate::cache::Cache;
use crate::engine::{
    steps_within_budget, whole_pass, Engine, COMPACTION_STEP, COMPACTION_STEP_BYTES,
};
use crate::payload::{Split, DEFAULT_MAX_APPEND_BYTES};
use crate::{
    Append, Appended, Clock, Created, Durability, Fork, Notifier, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath, StreamSnapshot, SystemClock,
};
use crate::{Limits, DEFAULT_MAX_PRODUCERS_PER_STREAM, DEFAULT_PRODUCER_EXPIRY};
use batch::Batcher;
use connections::Connections;
use error::pg_error;
use group::{Create, Outcome, Writer};
use sql::Sql;
pub use transaction::PgTransaction;
use transaction::Wiring;

/// The schema a store's tables live in unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "eddy";

/// The memory a store keeps for recently written messages by default.
const DEFAULT_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Options for [`PgStorage::open`].
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The database, as a `postgres://user:password@host:port/database`
    /// URL (libpq's parameters, such as `sslmode`, are understood).
    pub url: String,
    /// The schema that holds the store's tables (created when missing).
    /// Stores on different schemas of one database are independent.
    pub schema: String,
    /// The most connections the store opens for reads, and as many for
    /// transactions (deletes, forks, host transactions, and the creates
    /// and appends its writer hands back); besides them it keeps one for
    /// the writer of its appends and creates and one for its listener.
    pub max_connections: u32,
    /// When a commit counts as done: [`Durability::Sync`] waits for
    /// PostgreSQL's WAL flush (`synchronous_commit = on`);
    /// [`Durability::Process`] does not (`synchronous_commit = off`: a
    /// crash of the database server may lose the last moments of
    /// acknowledged commits, never consistency).
    pub durability: Durability,
    /// The largest append accepted, in bytes.
    pub max_append_bytes: usize,
    /// The most idempotent producers whose state one stream keeps; a new
    /// producer beyond it is refused ([`StreamError::TooManyProducers`]).
    pub max_producers_per_stream: usize,
    /// How long an idle producer's state is kept after its last accepted
    /// write: retries within it are deduplicated, and after it the
    /// producer's next append starts it afresh.
    pub producer_expiry: Duration,
    /// What one write may do: messages per append, bytes a fork copies.
    pub limits: Limits,
    /// Where the store reads the time (for expiry). Processes that share a
    /// database should have their clocks in sync.
    pub clock: Arc<dyn Clock>,
    /// How often the store reads the heads of the streams its live
    /// readers wait on, in one statement, in case a notification was lost:
    /// the longest a lost notification can delay a reader.
    pub recheck: Duration,
    /// The most bytes of recently written messages the store keeps in
    /// memory for reads (it writes them, so a read of recent data fetches
    /// only its head).
    pub cache_bytes: usize,
}

impl PgOptions {
    /// The default options for the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: 16,
            durability: Durability::Sync,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            max_producers_per_stream: DEFAULT_MAX_PRODUCERS_PER_STREAM,
            producer_expiry: DEFAULT_PRODUCER_EXPIRY,
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            recheck: Duration::from_secs(1),
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }

    /// These options with the tables in `schema`.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    fn check(&self) -> Result<(), StreamError> {
        let plain = self.schema.len() <= 48
            && self
                .schema
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && self
                .schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return Err(StreamError::InvalidArgument(format!(
                "schema `{}`: use at most 48 lower-case letters, digits and `_`, \
                 not starting with a digit",
                self.schema
            )));
        }
        if self.max_connections == 0 || self.recheck.is_zero() {
            return Err(StreamError::InvalidArgument(
                "max_connections and recheck must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// A stream store in a PostgreSQL database, shared by any number of
/// processes.
///
/// The rules are the engine's, as for every backend. Appends go to one
/// writer task that commits every append waiting, to one stream or to
/// many, in one statement (group commit: one `COMMIT`, one WAL flush),
/// deciding each from its copy of the stream records and writing a stream
/// only where its row has not changed since (another process's writes take
/// turns with it). Creates join the same groups: a group inserts the
/// streams it creates where their paths are still free. Reads are one
/// statement each, and take the messages the store wrote lately from
/// memory. Deletes and forks are one transaction each, which locks the
/// rows it decides on. Live waits wake up
/// across processes through `LISTEN`/`NOTIFY` on a dedicated connection:
/// one notification per commit, and one query per notification for all the
/// readers waiting in this process; the store also reads the heads of the
/// waited-on streams every [`PgOptions::recheck`], in case a notification
/// was lost.
///
/// A read of a stream with a sliding TTL moves its expiry at once for this
/// store, and a task of the store writes the touches of all reads to the
/// database at most a second later, one statement for them all ([`close`]
/// and dropping the store write what is left). That statement never waits
/// for a row lock: the touch of a stream whose row another transaction
/// holds is written by the first flush after it ends. Other processes see
/// a touch once it is written.
///
/// [`close`]: PgStorage::close
///
/// [`PgStorage::begin`] opens a [`PgTransaction`]: stream calls and SQL
/// of the caller's own, committed together.
pub struct PgStorage {
    wiring: Arc<Wiring>,
    schema: String,
    /// Writes appends in group commits.
    writer: Writer,
    listener: JoinHandle<()>,
    /// Reads the heads of waited-on streams every `recheck`.
    rechecker: JoinHandle<()>,
    /// Stores the TTL touches of reads, debounced.
    flusher: JoinHandle<()>,
}

impl std::fmt::Debug for PgStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStorage")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// How often a call that lost a race runs again before it fails.
const MAX_ATTEMPTS: u32 = 10;

impl PgStorage {
    /// Connects, creates or upgrades the schema (refusing one written by a
    /// newer build), and starts listening for other processes' changes.
    pub async fn open(options: PgOptions) -> Result<Self, StreamError> {
        options.check()?;
        let connect: PgConnectOptions = options
            .url
            .parse()
            .map_err(|e| StreamError::InvalidArgument(format!("invalid PostgreSQL URL: {e}")))?;
        let synchronous = match options.durability {
            Durability::Sync => "on",
            Durability::Process => "off",
        };
        let connect = connect
            .options([("synchronous_commit", synchronous)])
            .application_name("eddy");
        let mut conn = connect
            .connect()
            .await
            .map_err(|e| pg_error("cannot connect to PostgreSQL", e))?;
        let migrated = schema::migrate(&mut conn, &options.schema).await;
        schema::close(conn).await;
        migrated?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .connect_lazy_with(connect.clone());
        let notifier = Arc::new(Notifier::default());
        let channel = format!("{}.changes", options.schema);
        let instance = instance_id();
        let listen_pool = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(connect.clone());
        let listener = listen::listen(&listen_pool, &channel)
            .await
            .map_err(|e| pg_error("cannot LISTEN for other processes' changes", e))?;
        let reads = Arc::new(Connections::new(
            connect.clone(),
            options.max_connections as usize,
        ));
        let sql = Arc::new(Sql::new(&options.schema));
        let wiring = Wiring {
            pool,
            batcher: Batcher::start(Arc::clone(&reads), Arc::clone(&sql)),
            sql,
            engine: Engine {
                max_append_bytes: options.max_append_bytes,
                max_producers: options.max_producers_per_stream,
                producer_expiry_ms: crate::clock::duration_ms(options.producer_expiry),
                limits: options.limits,
                clock: options.clock,
                incarnations: Default::default(),
                passes: Default::default(),
            },
            notifier,
            channel,
            instance,
            markers: Arc::default(),
            mark: marks::upsert(&options.schema).into(),
            touches: Arc::default(),
            reads,
            cache: Arc::new(Cache::new(options.cache_bytes)),
            notice_prefix: listen::notice_prefix(instance),
            stale: Arc::default(),
        };
        let wiring = Arc::new(wiring);
        let listener = tokio::spawn(listen::run(listener, listen_pool, Arc::clone(&wiring)));
        let rechecker = tokio::spawn(recheck(Arc::clone(&wiring), options.recheck));
        let flusher = tokio::spawn(flusher::run(Arc::clone(&wiring)));
        // The writer's statements find every row by a key it holds. Their
        // plans are cached per connection, and a plan made while the
        // tables were small (a new database) chose scans of whole tables,
        // whose cost then grew with them (4.4 ms a group after 20 000
        // creates, from 1.4): without scans, every plan looks rows up by
        // index, whatever the tables' size when it was made.
        let writer_connect = connect.options([("enable_seqscan", "off")]);
        let writer = Writer::start(
            Arc::clone(&wiring),
            Arc::new(Connections::new(writer_connect, 1)),
        );
        Ok(PgStorage {
            wiring,
            schema: options.schema,
            writer,
            listener,
            rechecker,
            flusher,
        })
    }

    /// Begins a transaction in which stream calls and SQL of the caller's
    /// own commit or roll back together (see [`PgTransaction`]).
    pub async fn begin(&self) -> Result<PgTransaction, StreamError> {
        PgTransaction::begin(Arc::clone(&self.wiring), false).await
    }

    /// The store's connection pool (for the application's own schema
    /// migrations, say).
    pub fn pool(&self) -> &PgPool {
        &self.wiring.pool
    }

    /// The schema that holds the store's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Answers the appends queued, stores the pending TTL touches, then
    /// closes every connection, waiting for calls in flight.
    pub async fn close(&self) {
        self.writer.close().await;
        self.listener.abort();
        self.rechecker.abort();
        // A flush the abort interrupts is repeated by this one: its touches
        // were not forgotten, and storing one twice changes nothing.
        self.flusher.abort();
        flusher::flush(&self.wiring).await;
        self.wiring.reads.close().await;
        self.wiring.pool.close().await;
    }

    /// Runs `call` in a write transaction and commits it; runs it again,
    /// after a jittered pause, when it lost a race with a concurrent
    /// transaction.
    async fn write<T, F, Fut>(&self, mut call: F) -> Result<T, StreamError>
    where
        F: FnMut(PgTransaction) -> Fut,
        Fut: Future<Output = (PgTransaction, Result<T, StreamError>)>,
    {
        let mut pause = Duration::from_millis(1);
        let mut attempt = 1;
        loop {
            let (tx, outcome) = call(self.begin().await?).await;
            let error = match outcome {
                Ok(value) => match tx.finish().await {
                    Ok(()) => return Ok(value),
                    Err(failed) if failed.conflict => failed.error,
                    Err(failed) => return Err(failed.error),
                },
                Err(error) => {
                    let lost = tx.lost_race();
                    if let Err(e) = tx.rollback().await {
                        tracing::debug!(error = %e, "rolling back a failed call");
                    }
                    if !lost {
                        return Err(error);
                    }
                    error
                }
            };
            if attempt == MAX_ATTEMPTS {
                return Err(error);
            }
            attempt += 1;
            tokio::time::sleep(pause.mul_f64(0.5 + fastrand::f64())).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Runs `call` in a read-only snapshot.
    /// One compaction step of the stream at `path`: decided in a
    /// read-only transaction, its drops written in a short one of their
    /// own, so that appends to the stream wait for its row only while
    /// the rows go (not while the step reads).
    async fn compact_step(
        &self,
        path: &str,
        budget: u64,
        max_bytes: u64,
        force: bool,
    ) -> Result<crate::engine::CompactStep, StreamError> {
        let plan = self
            .read_only(|mut tx| async move {
                let plan = tx.compact_plan(path, budget, max_bytes, force).await;
                (tx, plan)
            })
            .await?;
        let Some(plan) = plan else {
            return Ok(crate::engine::CompactStep::NOTHING_DUE);
        };
        let mut step = plan.read_step();
        // One write for the step's drops: on PostgreSQL each write is a
        // transaction that appends to the stream wait for, and fewer,
        // longer ones measured better than writes of 256 rows.
        if let Some(write) = plan.whole() {
            let write = &write;
            let done = self
                .write(|mut tx| async move {
                    let step = tx.compact_apply(write).await;
                    (tx, step)
                })
                .await?;
            step.add_write(done);
        }
        Ok(step)
    }

    async fn read_only<T, F, Fut>(&self, call: F) -> Result<T, StreamError>
    where
        F: FnOnce(PgTransaction) -> Fut,
        Fut: Future<Output = (PgTransaction, Result<T, StreamError>)>,
    {
        let tx = PgTransaction::begin(Arc::clone(&self.wiring), true).await?;
        let (tx, outcome) = call(tx).await;
        let value = outcome?;
        tx.commit().await?;
        Ok(value)
    }
}

impl Drop for PgStorage {
    /// Stops the store's tasks; pending TTL touches are stored by a last
    /// flush when a runtime is there to run it and the store was not
    /// closed (otherwise they are lost: their streams may expire earlier
    /// than their reads said, never later).
    fn drop(&mut self) {
        self.listener.abort();
        self.rechecker.abort();
        self.flusher.abort();
        if self.wiring.pool.is_closed() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let wiring = Arc::clone(&self.wiring);
            runtime.spawn(async move { flusher::flush(&wiring).await });
        }
    }
}

/// Every `period`, reads the heads of the streams with waiting readers
/// (in case a notification was lost), until aborted.
async fn recheck(wiring: Arc<Wiring>, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        listen::recheck(&wiring).await;
    }
}

/// An id for this store's notifications, so that it skips its own.
fn instance_id() -> u64 {
    use std::hash::BuildHasher;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    std::collections::hash_map::RandomState::new().hash_one((std::process::id(), now))
}

#[async_trait]
impl Storage for PgStorage {
    /// In the writer's next group commit, with the appends and creates
    /// queued beside it; a create the group cannot decide (a dead stream
    /// to collect at its path first, a path that kept changing) runs in a
    /// transaction of its own.
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let create = match self.writer.create(path, Create { config, initial }).await? {
            Outcome::Done(created) => return created,
            Outcome::Contended(create) => create,
        };
        let create = &create;
        self.write(|mut tx| async move {
            let created = tx
                .create(path, create.config.clone(), create.initial.clone())
                .await;
            (tx, created)
        })
        .await
    }

    /// In the writer's next group commit; an append whose stream kept
    /// changing under the group runs in a transaction of its own, which
    /// locks the stream's row before it decides.
    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        // Split and validated here, not on the writer, when the cache
        // says what the stream holds.
        let bounds = self.wiring.engine.bounds();
        let split = self
            .wiring
            .cache
            .is_json(path.as_str())
            .and_then(|json| Split::ahead(&append.payload, json, bounds));
        let append = match self.writer.append(path, append, split).await? {
            Outcome::Done(appended) => return appended,
            Outcome::Contended(append) => append,
        };
        let append = &append;
        self.write(|mut tx| async move {
            let appended = tx.append(path, append.clone()).await;
            (tx, appended)
        })
        .await
    }

    /// In one statement (the messages this store wrote lately come from
    /// memory); in a read-only transaction when the stream needs more
    /// (one that is not live, say).
    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        if let Some((chunk, touch)) = read::read(&self.wiring, path, from, max_bytes).await? {
            // Debounced: the store's flusher writes it (see `flusher.rs`),
            // and this process's loads see it meanwhile.
            if let Some(touch) = touch {
                self.wiring.touches.record(touch.key, touch.at_ms);
            }
            return Ok(chunk);
        }
        self.read_only(|mut tx| async move {
            let chunk = tx.read(path, from, max_bytes).await;
            (tx, chunk)
        })
        .await
    }

    async fn sweep(&self, max: usize) -> Result<usize, StreamError> {
        let (found, producers) = self
            .read_only(|mut tx| async move {
                let found = match tx.sweepable(max).await {
                    Ok(found) => tx.producers_expired().await.map(|any| (found, any)),
                    Err(e) => Err(e),
                };
                (tx, found)
            })
            .await?;
        if found.is_empty() && !producers {
            // Nothing is due: no write transaction.
            return Ok(0);
        }
        // Expired producers are found in the write, through their index.
        let found = &found;
        let swept = self
            .write(|mut tx| async move {
                let swept = tx.sweep(found, max).await;
                (tx, swept)
            })
            .await?;
        // Then compaction, within the step's budgets.
        let examined = steps_within_budget(&found.retained, |path, budget, bytes| {
            self.compact_step(path, budget, bytes, false)
        })
        .await?;
        Ok(swept + usize::try_from(examined).unwrap_or(usize::MAX))
    }

    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        whole_pass(|force| {
            self.compact_step(path.as_str(), COMPACTION_STEP, COMPACTION_STEP_BYTES, force)
        })
        .await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let fork = &fork;
        self.write(|mut tx| async move {
            let created = tx.fork(path, fork.clone()).await;
            (tx, created)
        })
        .await
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        if let Some(info) = read::head(&self.wiring, path).await? {
            return Ok(info);
        }
        self.read_only(|mut tx| async move {
            let info = tx.head(path).await;
            (tx, info)
        })
        .await
    }

    async fn release_producer(
        &self,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        self.write(|mut tx| async move {
            let released = tx.release_producer(path, producer).await;
            (tx, released)
        })
        .await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        self.write(|mut tx| async move {
            let deleted = tx.delete(path).await;
            (tx, deleted)
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.read_only(|mut tx| async move {
            let listed = tx.list(prefix).await;
            (tx, listed)
        })
        .await
    }

    async fn snapshot(&self, path: &StreamPath) -> Result<StreamSnapshot, StreamError> {
        self.read_only(|mut tx| async move {
            let snapshot = tx.snapshot(path).await;
            (tx, snapshot)
        })
        .await
    }

    async fn restore(
        &self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        let messages = &messages;
        self.write(|mut tx| async move {
            // Each try of the transaction writes the chunk anew.
            let info = tx.restore(snapshot, first, messages.clone()).await;
            (tx, info)
        })
        .await
    }

    /// A read-write transaction that commits, on a server that is not a
    /// read-only standby.
    async fn writable(&self) -> Result<(), StreamError> {
        let mut tx = self.begin().await?;
        let read_only: String =
            sqlx::query_scalar("SELECT current_setting('transaction_read_only')")
                .fetch_one(&mut **tx.sql())
                .await
                .map_err(|e| pg_error("cannot ask whether the database takes writes", e))?;
        if read_only == "on" {
            // Dropping the transaction rolls it back.
            return Err(StreamError::unavailable(
                "the database is read-only (a standby, or default_transaction_read_only)",
            ));
        }
        tx.commit().await
    }

    fn wake_marks(&self) -> Option<&dyn crate::WakeMarks> {
        Some(self)
    }

    fn documents(&self) -> Option<&dyn crate::Documents> {
        Some(self)
    }

    fn notifier(&self) -> &Notifier {
        &self.wiring.notifier
    }
}
