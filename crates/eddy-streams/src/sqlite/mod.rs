//! The SQLite backend: the embedded, durable default.
//!
//! See `DESIGN-sqlite.md` in the crate for the record layout and the commit
//! protocol.

mod documents;
mod heads;
mod marks;
mod options;
mod records;
mod savepoint;
mod schema;
mod transaction;
mod writer;

pub use options::{Durability, SqliteOptions, DEFAULT_CACHE_BYTES};
pub use transaction::SqliteTransaction;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{oneshot, Semaphore};

use crate::cache::Cache;
use crate::engine::{
    complete, steps_within_budget, whole_pass, Engine, COMPACTION_STEP, COMPACTION_STEP_BYTES,
};
use crate::marks::Markers;
use crate::payload::Split;
use crate::touches::Touches;
use crate::{
    Append, Appended, Created, Fork, Notifier, Payload, ReadChunk, ReadFrom, Storage, StreamConfig,
    StreamError, StreamInfo, StreamPath, StreamSnapshot,
};
use bytes::Bytes;
use records::SqliteRecords;
use writer::{Containment, Event, Job};

/// The writer's queue holds at most this many KiB of requests (each job
/// counts its payload, at least 1 KiB); a caller waits while it is full.
const QUEUE_KIB: u32 = 64 * 1024;

/// Read connections, and so reads running on SQLite at once.
const READERS: usize = 4;

/// The file name of the database inside the data directory.
pub const DATABASE_FILE: &str = "streams.db";

/// A stream store in one SQLite database file (WAL mode).
///
/// Writes go through one writer thread that commits concurrent requests
/// together (group commit); reads use a small pool of read connections and
/// never block writes.
pub struct SqliteStorage {
    jobs: Mutex<Option<Sender<Job>>>,
    /// Room in the writer's queue, in KiB.
    queue: Arc<Semaphore>,
    writer: Mutex<Option<JoinHandle<()>>>,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// One permit per read connection.
    reading: Arc<Semaphore>,
    file: PathBuf,
    notifier: Arc<Notifier>,
    engine: Engine,
    touches: Arc<Touches>,
    cache: Arc<Cache>,
    /// The markers of durable wake-ups, run in each commit.
    markers: Arc<Markers>,
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("file", &self.file)
            .finish()
    }
}

impl SqliteStorage {
    /// Opens (or creates) the store in directory `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StreamError> {
        SqliteStorage::open_with(dir, SqliteOptions::default())
    }

    /// Opens (or creates) the store in directory `dir`.
    pub fn open_with(dir: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StreamError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| {
            StreamError::internal_from(
                format!("cannot create the data directory {}", dir.display()),
                e,
            )
        })?;
        let file = dir.join(DATABASE_FILE);
        let conn = open_connection(&file, false)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let synchronous = match options.durability {
            Durability::Sync => "FULL",
            Durability::Process => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)?;
        schema::migrate(&conn, options.clock.now_ms())?;
        #[cfg(test)]
        {
            let fail = Arc::clone(&options.fail_commits);
            conn.commit_hook(Some(move || fail.load(std::sync::atomic::Ordering::SeqCst)));
        }
        let notifier = Arc::new(Notifier::default());
        let (tx, rx) = mpsc::channel();
        let engine = Engine {
            max_append_bytes: options.max_append_bytes,
            max_producers: options.max_producers_per_stream,
            producer_expiry_ms: crate::clock::duration_ms(options.producer_expiry),
            limits: options.limits,
            clock: options.clock,
            incarnations: Default::default(),
            passes: Default::default(),
        };
        let touches = Arc::new(Touches::default());
        let cache = Arc::new(Cache::new(options.cache_bytes));
        let markers = Arc::new(Markers::default());
        let writer = {
            let shared = writer::Owned {
                notifier: Arc::clone(&notifier),
                engine: engine.clone(),
                touches: Arc::clone(&touches),
                cache: Arc::clone(&cache),
                markers: Arc::clone(&markers),
            };
            std::thread::Builder::new()
                .name("eddy-streams-writer".into())
                .spawn(move || writer::run(conn, rx, shared))
        }
        .map_err(|e| StreamError::internal_from("cannot start the writer thread", e))?;
        Ok(SqliteStorage {
            jobs: Mutex::new(Some(tx)),
            queue: Arc::new(Semaphore::new(QUEUE_KIB as usize)),
            writer: Mutex::new(Some(writer)),
            readers: Arc::new(Mutex::new(Vec::new())),
            reading: Arc::new(Semaphore::new(READERS)),
            file,
            notifier,
            engine,
            touches,
            cache,
            markers,
        })
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Runs `op` in the writer's next group commit and waits for its
    /// answer. `bytes` is what the job holds, for the queue's bound.
    async fn submit<T: Send + 'static>(
        &self,
        bytes: usize,
        containment: Containment,
        op: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<(T, Option<Event>), StreamError>
            + Send
            + 'static,
    ) -> Result<T, StreamError> {
        let kib = u32::try_from(bytes / 1024 + 1).map_or(QUEUE_KIB, |kib| kib.min(QUEUE_KIB));
        let room = Arc::clone(&self.queue)
            .acquire_many_owned(kib)
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let (reply, answer) = oneshot::channel();
        self.send(Job::new(op, containment, reply, room))?;
        answer
            .await
            .map_err(|_| StreamError::internal("the stream store's writer thread stopped"))?
    }

    /// Runs `f` on the writer thread in a write transaction of its own:
    /// the caller's SQL ([`SqliteTransaction::sql`]) and its appends
    /// commit when `f` returns `Ok`, and roll back together when it
    /// returns `Err`. `f` holds the writer while it runs: keep it short
    /// and free of waits. A database another process holds busy answers
    /// `storage-failure` (retryable), as does a queue closed by
    /// [`close`](SqliteStorage::close).
    pub async fn transaction<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut SqliteTransaction<'_>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StreamError> + Send + 'static,
    {
        let room = Arc::clone(&self.queue)
            .acquire_owned()
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let (reply, answer) = oneshot::channel();
        let alone = transaction::Alone { op: f, reply, room };
        self.send(Job::Alone(Box::new(alone)))?;
        answer
            .await
            .map_err(|_| StreamError::internal("the stream store's writer thread stopped"))?
    }

    fn send(&self, job: Job) -> Result<(), StreamError> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let jobs = jobs
            .as_ref()
            .ok_or_else(|| StreamError::internal("the stream store is closed"))?;
        // Counted before it is sent, so the writer never takes it first.
        crate::metrics::queued();
        jobs.send(job).map_err(|_| {
            crate::metrics::dequeued(1);
            StreamError::internal("the stream store's writer thread stopped")
        })
    }

    /// One compaction step of the stream at `path`: decided on a reader,
    /// its drops written by the writer in a short write of their own, so
    /// that the writer holds appends back only while rows go.
    async fn compact_step(
        &self,
        path: String,
        budget: u64,
        max_bytes: u64,
        force: bool,
    ) -> Result<crate::engine::CompactStep, StreamError> {
        let plan = self
            .with_reader(move |engine, records| {
                complete(engine.compact_plan(records, &path, budget, max_bytes, force))
            })
            .await?;
        let Some(plan) = plan else {
            return Ok(crate::engine::CompactStep::NOTHING_DUE);
        };
        let mut step = plan.read_step();
        for write in plan.writes() {
            let done = self
                .submit(0, Containment::Savepoint, move |engine, records| {
                    Ok((complete(engine.compact_apply(records, &write))?, None))
                })
                .await?;
            step.add_write(done);
        }
        Ok(step)
    }

    /// Runs `f` on a read connection inside one read transaction, off the
    /// async runtime, with the messages the cache holds taken from it.
    async fn with_reader<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<T, StreamError> + Send + 'static,
    ) -> Result<T, StreamError> {
        let turn = Arc::clone(&self.reading)
            .acquire_owned()
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let readers = Arc::clone(&self.readers);
        let file = self.file.clone();
        let (engine, touches) = (self.engine.clone(), Arc::clone(&self.touches));
        let cache = Arc::clone(&self.cache);
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let pooled = readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => open_connection(&file, true)?,
            };
            let result = conn
                .transaction()
                .map_err(StreamError::from)
                .and_then(|tx| f(&engine, &mut SqliteRecords::cached(&tx, &touches, &cache)));
            // A connection whose transaction did not end is not reused.
            if conn.is_autocommit() {
                readers.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
            }
            result
        })
        .await
        .map_err(|e| StreamError::internal_from("a read task failed", e))?
    }

    /// Stops the writer after it has committed every queued job.
    pub fn close(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = writer {
            if writer.join().is_err() {
                tracing::error!("the stream store writer thread panicked");
            }
        }
    }
}

impl Drop for SqliteStorage {
    fn drop(&mut self) {
        self.close();
    }
}

fn open_connection(file: &Path, read_only: bool) -> Result<Connection, StreamError> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(file, flags)
        .map_err(|e| StreamError::unavailable_from(format!("cannot open {}", file.display()), e))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    if read_only {
        conn.pragma_update(None, "mmap_size", READER_MMAP_BYTES)?;
    }
    // Room for every statement the store prepares (rusqlite keeps 16): a
    // statement pushed out of the cache is parsed again on its next use.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// How much of the database file each read connection maps into memory.
const READER_MMAP_BYTES: i64 = 1 << 30;

/// How many prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 64;

/// The event of a call that created a stream (or found it).
fn created(created: &Created) -> Option<Event> {
    created
        .created
        .then(|| Event::Committed(created.info.clone()))
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let path = path.clone();
        self.submit(
            initial.len(),
            Containment::Savepoint,
            move |engine, records| {
                let outcome = complete(engine.create(records, &path, config, initial))?;
                let event = created(&outcome);
                Ok((outcome, event))
            },
        )
        .await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        // Split and validate here, not on the writer thread, when the
        // cache says what the stream holds.
        let split = self
            .cache
            .is_json(path.as_str())
            .and_then(|json| Split::ahead(&append.payload, json, self.engine.bounds()));
        let path = path.clone();
        // An append checks everything before it writes: no savepoint.
        self.submit(
            append.payload.len(),
            Containment::WritesLast,
            move |engine, records| {
                let (outcome, written) = complete(engine.append(records, &path, append, split))?;
                let info = written.map(|head| head.info(path.as_str()));
                Ok((outcome, info.map(Event::Committed)))
            },
        )
        .await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        // The head comes from SQLite even when the cache holds every
        // message: another process may have written since.
        let path = path.clone();
        let (chunk, touch) = self
            .with_reader(move |engine, records| {
                complete(engine.read(records, &path, from, max_bytes))
            })
            .await?;
        if let Some(touch) = touch {
            self.touches.record(touch.key, touch.at_ms);
        }
        Ok(chunk)
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let path = path.clone();
        self.with_reader(move |engine, records| complete(engine.head(records, &path)))
            .await
    }

    async fn release_producer(
        &self,
        path: &StreamPath,
        producer: &str,
    ) -> Result<bool, StreamError> {
        let (path, producer) = (path.clone(), producer.to_owned());
        self.submit(0, Containment::Savepoint, move |engine, records| {
            let released = complete(engine.release_producer(records, &path, &producer))?;
            Ok((released, None))
        })
        .await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let path = path.clone();
        self.submit(0, Containment::Savepoint, move |engine, records| {
            complete(engine.delete(records, &path))?;
            Ok(((), Some(Event::Deleted(path.to_string()))))
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        let prefix = prefix.to_owned();
        self.with_reader(move |engine, records| complete(engine.list(records, &prefix)))
            .await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let path = path.clone();
        self.submit(
            fork.initial.len(),
            Containment::Savepoint,
            move |engine, records| {
                let outcome = complete(engine.fork(records, &path, fork))?;
                let event = created(&outcome);
                Ok((outcome, event))
            },
        )
        .await
    }

    async fn sweep(&self, max: usize) -> Result<usize, StreamError> {
        // Found on a reader, so the writer only removes what it is given.
        let found = self
            .with_reader(move |engine, records| {
                let (now, below) = (engine.now_ms(), engine.sweep_floor());
                complete(crate::record::RecordReader::sweepable(
                    records, now, below, max,
                ))
            })
            .await?;
        // Expired producers are found by the writer, through their index.
        let retained = found.retained.clone();
        let swept = self
            .submit(0, Containment::Savepoint, move |engine, records| {
                let swept = complete(engine.sweep(records, &found, false))?.count();
                let producers = complete(engine.sweep_producers(records, max))?;
                Ok((swept + producers as usize, None))
            })
            .await?;
        // Then compaction, within the step's budgets.
        let examined = steps_within_budget(retained, |path, budget, bytes| {
            self.compact_step(path, budget, bytes, false)
        })
        .await?;
        Ok(swept + usize::try_from(examined).unwrap_or(usize::MAX))
    }

    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        whole_pass(|force| {
            self.compact_step(
                path.to_string(),
                COMPACTION_STEP,
                COMPACTION_STEP_BYTES,
                force,
            )
        })
        .await
    }

    async fn snapshot(&self, path: &StreamPath) -> Result<StreamSnapshot, StreamError> {
        let path = path.clone();
        self.with_reader(move |engine, records| complete(engine.snapshot(records, &path)))
            .await
    }

    async fn restore(
        &self,
        snapshot: &StreamSnapshot,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<StreamInfo, StreamError> {
        let snapshot = snapshot.clone();
        let size = messages.iter().map(Bytes::len).sum();
        self.submit(size, Containment::Savepoint, move |engine, records| {
            let info = complete(engine.restore(records, &snapshot, first, messages))?;
            Ok((info.clone(), Some(Event::Committed(info))))
        })
        .await
    }

    /// An empty job through the writer: it answers only once a group
    /// holding it committed.
    async fn writable(&self) -> Result<(), StreamError> {
        self.submit(0, Containment::Savepoint, |_, _| Ok(((), None)))
            .await
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    fn wake_marks(&self) -> Option<&dyn crate::WakeMarks> {
        Some(self)
    }

    fn documents(&self) -> Option<&dyn crate::Documents> {
        Some(self)
    }
}
