//! One PostgreSQL transaction over the store: the engine's calls, the
//! caller's own SQL, and the wake-ups it sends when it commits.

use std::sync::Arc;

use sqlx::{PgPool, Postgres, Transaction};

use super::batch::Batcher;
use super::connections::Connections;
use super::error::{is_conflict, pg_error};
use super::group::Stale;
use super::listen::{notices, Change};
use super::records::PgRecords;
use super::sql::Sql;
use crate::cache::Cache;
use crate::engine::Engine;
use crate::marks::Markers;
use crate::record::{RecordReader, Sweepable};
use crate::touches::Touches;
use crate::{
    Append, Appended, Created, Fork, Notifier, Payload, ReadChunk, ReadFrom, StreamConfig,
    StreamError, StreamInfo, StreamPath, StreamSnapshot,
};
use bytes::Bytes;

/// What a transaction needs from its store to commit and wake readers.
#[derive(Clone, Debug)]
pub(super) struct Wiring {
    pub pool: PgPool,
    pub sql: Arc<Sql>,
    pub engine: Engine,
    pub notifier: Arc<Notifier>,
    /// The notification channel of the store's schema.
    pub channel: String,
    /// This store's id in notification payloads.
    pub instance: u64,
    /// The markers of durable wake-ups, run in each commit.
    pub markers: Arc<Markers>,
    /// The statement that writes a commit's wake-up marks.
    pub mark: Arc<str>,
    /// The TTL touches of this process's reads not stored yet.
    pub touches: Arc<Touches>,
    /// Connections for reads of one statement.
    pub reads: Arc<Connections>,
    /// Runs the reads that arrive together in one statement.
    pub batcher: Batcher,
    /// Messages this store wrote lately, for reads.
    pub cache: Arc<Cache>,
    /// The start of this store's notifications.
    pub notice_prefix: String,
    /// Streams the group writer's copy should load again.
    pub stale: Arc<Stale>,
}

/// A transaction on a [`PgStorage`](super::PgStorage)'s database that
/// appends to streams, reads them, and runs SQL of the caller's own, all
/// committed or rolled back together.
///
/// Projection hosts use it to commit a unit's rows, outputs and checkpoint
/// atomically: [`sql`](PgTransaction::sql) gives sqlx's own
/// [`Transaction`] for the application's statements, and the stream calls
/// keep every rule of the store. Writes lock the stream rows they touch
/// until the commit (other writers of those streams wait; readers do not);
/// reads lock nothing. Readers in every process are woken when
/// [`commit`](PgTransaction::commit) returns, never before.
///
/// A call that fails because a concurrent transaction won a race (a
/// deadlock, a serialization failure, two creates of one path) returns a
/// retryable error ([`StreamError::is_retryable`]), and PostgreSQL has
/// aborted the transaction: roll back and run the whole unit again.
/// Dropping the transaction without committing rolls it back.
///
/// ```no_run
/// # async fn example(store: &eddy_streams::PgStorage) -> Result<(), Box<dyn std::error::Error>> {
/// use eddy_streams::{sqlx, Append, StreamPath};
///
/// let mut tx = store.begin().await?;
/// sqlx::query("INSERT INTO order_totals (id, total) VALUES ($1, $2)")
///     .bind("o-1")
///     .bind(42_i64)
///     .execute(&mut **tx.sql())
///     .await?;
/// tx.append(&StreamPath::new("totals")?, Append::body(r#"{"id":"o-1","total":42}"#))
///     .await?;
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub struct PgTransaction {
    records: PgRecords,
    wiring: Arc<Wiring>,
    /// Changes to announce once committed.
    changes: Vec<Change>,
    /// Streams whose producers it released (announced to no one, but the
    /// group writer's copy must load them again).
    released: Vec<String>,
    /// Stream write calls made in this transaction: a commit with any is
    /// measured (the store's metrics).
    calls: usize,
}

impl std::fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction")
            .field("changes", &self.changes)
            .finish_non_exhaustive()
    }
}

/// A commit that failed, and whether it lost a race (and may run again).
pub(super) struct CommitFailed {
    pub error: StreamError,
    pub conflict: bool,
}

impl PgTransaction {
    /// Begins a transaction on `wiring`'s pool: read committed, or a
    /// read-only snapshot (`read_only`) for the store's own reads.
    pub(super) async fn begin(wiring: Arc<Wiring>, read_only: bool) -> Result<Self, StreamError> {
        // sqlx's `begin` is not cancel-safe on PostgreSQL: dropped between
        // sending BEGIN and reading its answer (a reader that hung up), it
        // hands the connection back to the pool inside the transaction, and
        // the next caller's statements run in it. On a task of its own the
        // begin always finishes; a transaction its caller no longer takes
        // is dropped there, which rolls it back as usual.
        // The writer-queue gauge counts a write waiting for its connection
        // on that task too, so a caller that hangs up never leaves it high.
        let pool = wiring.pool.clone();
        let tx = tokio::spawn(async move {
            if read_only {
                pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .await
            } else {
                crate::metrics::queued();
                let begun = pool.begin().await;
                crate::metrics::dequeued(1);
                begun
            }
        })
        .await
        .map_err(|e| StreamError::internal_from("a transaction's begin did not finish", e))?
        .map_err(|e| pg_error("cannot begin a transaction", e))?;
        Ok(PgTransaction {
            records: PgRecords::new(
                tx,
                Arc::clone(&wiring.sql),
                Arc::clone(&wiring.touches),
                false,
            ),
            wiring,
            changes: Vec::new(),
            released: Vec::new(),
            calls: 0,
        })
    }

    /// The driver's transaction, for SQL of the caller's own: use
    /// `&mut **tx.sql()` as a sqlx executor.
    pub fn sql(&mut self) -> &mut Transaction<'static, Postgres> {
        self.records.transaction()
    }

    /// Whether a call of this transaction failed because a concurrent
    /// transaction won a race: the unit should run again.
    pub fn lost_race(&self) -> bool {
        self.records.conflicted()
    }

    /// Creates a stream (see [`Storage::create`](crate::Storage::create)).
    pub async fn create(
        &mut self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let created = self
            .wiring
            .engine
            .create(&mut self.records, path, config, initial)
            .await?;
        if created.created {
            self.changes.push(Change::Committed(created.info.clone()));
        }
        Ok(created)
    }

    /// Appends (see [`Storage::append`](crate::Storage::append)).
    pub async fn append(
        &mut self,
        path: &StreamPath,
        append: Append,
    ) -> Result<Appended, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let (appended, written) = self
            .wiring
            .engine
            .append(&mut self.records, path, append, None)
            .await?;
        if let Some(head) = written {
            self.changes
                .push(Change::Committed(head.info(path.as_str())));
        }
        Ok(appended)
    }

    /// Forks a stream (see [`Storage::fork`](crate::Storage::fork)).
    pub async fn fork(&mut self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let created = self
            .wiring
            .engine
            .fork(&mut self.records, path, fork)
            .await?;
        if created.created {
            self.changes.push(Change::Committed(created.info.clone()));
        }
        Ok(created)
    }

    /// Releases a producer (see
    /// [`Storage::release_producer`](crate::Storage::release_producer)).
    pub async fn release_producer(
        &mut self,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let engine = &self.wiring.engine;
        let released = engine
            .release_producer(&mut self.records, path, producer)
            .await?;
        self.released.push(path.to_string());
        Ok(released)
    }

    /// Deletes a stream (see [`Storage::delete`](crate::Storage::delete)).
    pub async fn delete(&mut self, path: &StreamPath) -> Result<(), StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        self.wiring.engine.delete(&mut self.records, path).await?;
        self.changes.push(Change::Deleted(path.to_string()));
        Ok(())
    }

    /// What may be swept, up to `max` of each kind (see
    /// [`Storage::sweep`](crate::Storage::sweep)).
    pub(crate) async fn sweepable(&mut self, max: usize) -> Result<Sweepable, StreamError> {
        self.records.set_locking(false);
        let engine = &self.wiring.engine;
        let (now, below) = (engine.now_ms(), engine.sweep_floor());
        self.records.sweepable(now, below, max).await
    }

    /// Whether any producer has expired (a sweep then has work to do even
    /// when no stream or tombstone is due).
    pub(crate) async fn producers_expired(&mut self) -> Result<bool, StreamError> {
        self.records.set_locking(false);
        let cutoff = self.wiring.engine.producer_cutoff_ms();
        self.records.any_expired_producer(cutoff).await
    }

    /// Removes what may go of `found`, and up to `max` expired producer
    /// states; how many things it removed.
    pub(crate) async fn sweep(
        &mut self,
        found: &Sweepable,
        max: usize,
    ) -> Result<usize, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let engine = &self.wiring.engine;
        // Compaction goes apart (`PgStorage::compact_step`): its reads
        // need not hold the streams' rows.
        let swept = engine.sweep(&mut self.records, found, false).await?;
        let producers = engine.sweep_producers(&mut self.records, max).await?;
        let count = swept.count() + producers as usize;
        self.changes
            .extend(swept.streams.into_iter().map(Change::Deleted));
        Ok(count)
    }

    /// What one step of a compaction pass of the stream at `path` drops,
    /// read without locking the stream (see
    /// [`Storage::compact`](crate::Storage::compact)).
    pub(crate) async fn compact_plan(
        &mut self,
        path: &str,
        budget: u64,
        max_bytes: u64,
        force: bool,
    ) -> Result<Option<crate::engine::CompactPlan>, StreamError> {
        self.records.set_locking(false);
        self.wiring
            .engine
            .compact_plan(&mut self.records, path, budget, max_bytes, force)
            .await
    }

    /// Drops what `plan` decided, the stream locked only for that.
    pub(crate) async fn compact_apply(
        &mut self,
        plan: &crate::engine::CompactPlan,
    ) -> Result<crate::engine::CompactStep, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        self.wiring
            .engine
            .compact_apply(&mut self.records, plan)
            .await
    }

    /// Reads, seeing this transaction's own writes (see
    /// [`Storage::read`](crate::Storage::read)).
    pub async fn read(
        &mut self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        self.records.set_locking(false);
        let (chunk, touch) = self
            .wiring
            .engine
            .read(&mut self.records, path, from, max_bytes)
            .await?;
        // Debounced: the store's flusher writes it (see `flusher.rs`), and
        // this process's loads see it meanwhile.
        if let Some(touch) = touch {
            self.wiring.touches.record(touch.key, touch.at_ms);
        }
        Ok(chunk)
    }

    /// Describes a live stream (see [`Storage::head`](crate::Storage::head)).
    pub async fn head(&mut self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        self.records.set_locking(false);
        self.wiring.engine.head(&mut self.records, path).await
    }

    /// A stream's state for a backup (see
    /// [`Storage::snapshot`](crate::Storage::snapshot)).
    pub(crate) async fn snapshot(
        &mut self,
        path: &StreamPath,
    ) -> Result<StreamSnapshot, StreamError> {
        self.records.set_locking(false);
        self.wiring.engine.snapshot(&mut self.records, path).await
    }

    /// Restores a chunk of a snapshot (see
    /// [`Storage::restore`](crate::Storage::restore)).
    pub(crate) async fn restore(
        &mut self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        self.records.set_locking(true);
        self.calls += 1;
        let info = self
            .wiring
            .engine
            .restore(&mut self.records, snapshot, first, messages)
            .await?;
        self.changes.push(Change::Committed(info.clone()));
        Ok(info)
    }

    /// Lists live streams (see [`Storage::list`](crate::Storage::list)).
    pub async fn list(&mut self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        self.records.set_locking(false);
        self.wiring.engine.list(&mut self.records, prefix).await
    }

    /// Commits; then wakes the readers of every stream it changed, in
    /// every process.
    pub async fn commit(self) -> Result<(), StreamError> {
        self.finish().await.map_err(|failed| failed.error)
    }

    /// Rolls back everything the transaction did.
    pub async fn rollback(self) -> Result<(), StreamError> {
        self.records
            .into_transaction()
            .rollback()
            .await
            .map_err(|e| pg_error("cannot roll back", e))
    }

    /// Commits, telling whether a failure lost a race.
    pub(super) async fn finish(mut self) -> Result<(), CommitFailed> {
        let failed = |error: sqlx::Error, context: &str| CommitFailed {
            conflict: is_conflict(&error),
            error: pg_error(context, error),
        };
        let paths = self.changes.iter().filter_map(Change::committed_path);
        let marks = self.wiring.markers.marks(paths);
        super::marks::write(self.records.transaction(), &self.wiring.mark, &marks)
            .await
            .map_err(|e| failed(e, "cannot write the wake-up marks"))?;
        if !self.changes.is_empty() {
            let payloads = notices(
                &self.wiring.notice_prefix,
                self.changes.iter().map(Change::line),
            );
            sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
                .bind(&self.wiring.channel)
                .bind(payloads)
                .execute(&mut **self.records.transaction())
                .await
                .map_err(|e| failed(e, "cannot send the wake-ups"))?;
        }
        let started = std::time::Instant::now();
        self.records
            .into_transaction()
            .commit()
            .await
            .map_err(|e| failed(e, "cannot commit"))?;
        if self.calls > 0 {
            crate::metrics::committed(self.calls, started.elapsed());
        }
        for path in &self.released {
            self.wiring.stale.mark(path);
        }
        for change in self.changes {
            let (Change::Committed(StreamInfo { path, .. }) | Change::Deleted(path)) = &change;
            self.wiring.stale.mark(path);
            change.raise(&self.wiring.notifier);
        }
        Ok(())
    }
}
