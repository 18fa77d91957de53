//! The SQLite backend: the embedded, durable default.
//!
//! See `DESIGN-sqlite.md` in the crate for the record layout and the commit
//! protocol.

mod records;
mod schema;
mod touches;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::engine::{complete, Engine};
use crate::payload::DEFAULT_MAX_APPEND_BYTES;
use crate::{
    Append, Appended, Clock, Committed, Created, Fork, Notifier, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath, SystemClock,
};
use records::SqliteRecords;
use touches::Touches;
use writer::{Event, Job};

/// The file name of the database inside the data directory.
pub const DATABASE_FILE: &str = "streams.db";

/// When a commit counts as done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Each group commit is fsynced before any caller is answered: an
    /// acknowledged append survives a power loss.
    #[default]
    Sync,
    /// Commits reach the operating system but are fsynced only at WAL
    /// checkpoints: an acknowledged append survives a crash of the process,
    /// not of the machine.
    Process,
}

/// Options for [`SqliteStorage::open_with`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// When a commit counts as done.
    pub durability: Durability,
    /// The largest append accepted, in bytes.
    pub max_append_bytes: usize,
    /// Where the store reads the time (for expiry).
    pub clock: Arc<dyn Clock>,
    /// While set, every `COMMIT` fails (through SQLite's commit hook).
    #[cfg(test)]
    pub(crate) fail_commits: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Sync,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            clock: Arc::new(SystemClock),
            #[cfg(test)]
            fail_commits: Arc::default(),
        }
    }
}

/// A stream store in one SQLite database file (WAL mode).
///
/// Writes go through one writer thread that commits concurrent requests
/// together (group commit); reads use a small pool of read connections and
/// never block writes.
pub struct SqliteStorage {
    jobs: Mutex<Option<Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    readers: Arc<Mutex<Vec<Connection>>>,
    file: PathBuf,
    notifier: Arc<Notifier>,
    engine: Engine,
    touches: Arc<Touches>,
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
        schema::migrate(&conn)?;
        #[cfg(test)]
        {
            let fail = Arc::clone(&options.fail_commits);
            conn.commit_hook(Some(move || fail.load(std::sync::atomic::Ordering::SeqCst)));
        }
        let notifier = Arc::new(Notifier::default());
        let (tx, rx) = mpsc::channel();
        let engine = Engine {
            max_append_bytes: options.max_append_bytes,
            clock: options.clock,
        };
        let touches = Arc::new(Touches::default());
        let writer = {
            let (notifier, engine, touches) =
                (Arc::clone(&notifier), engine.clone(), Arc::clone(&touches));
            std::thread::Builder::new()
                .name("eddy-streams-writer".into())
                .spawn(move || writer::run(conn, rx, notifier, engine, touches))
        }
        .map_err(|e| StreamError::internal_from("cannot start the writer thread", e))?;
        Ok(SqliteStorage {
            jobs: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            readers: Arc::new(Mutex::new(Vec::new())),
            file,
            notifier,
            engine,
            touches,
        })
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Runs `op` in the writer's next group commit and waits for its
    /// answer.
    async fn submit<T: Send + 'static>(
        &self,
        op: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<(T, Option<Event>), StreamError>
            + Send
            + 'static,
    ) -> Result<T, StreamError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::new(op, reply))?;
        answer
            .await
            .map_err(|_| StreamError::internal("the stream store's writer thread stopped"))?
    }

    fn send(&self, job: Job) -> Result<(), StreamError> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.as_ref()
            .ok_or_else(|| StreamError::internal("the stream store is closed"))?
            .send(job)
            .map_err(|_| StreamError::internal("the stream store's writer thread stopped"))
    }

    /// Runs `f` on a read connection inside one read transaction, off the
    /// async runtime.
    async fn with_reader<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Engine, &mut SqliteRecords<'_>) -> Result<T, StreamError> + Send + 'static,
    ) -> Result<T, StreamError> {
        let readers = Arc::clone(&self.readers);
        let file = self.file.clone();
        let (engine, touches) = (self.engine.clone(), Arc::clone(&self.touches));
        tokio::task::spawn_blocking(move || {
            let pooled = readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => open_connection(&file, true)?,
            };
            let result = conn
                .transaction()
                .map_err(StreamError::from)
                .and_then(|tx| f(&engine, &mut SqliteRecords::new(&tx, &touches)));
            readers.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
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
    Ok(conn)
}

impl From<rusqlite::Error> for StreamError {
    /// A busy, locked, full or unreadable database is unavailable (retry
    /// later); anything else is internal.
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match err.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StreamError::unavailable_from("the SQLite database is busy", err)
            }
            Some(
                ErrorCode::DiskFull
                | ErrorCode::OutOfMemory
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::OperationInterrupted,
            ) => StreamError::unavailable_from("the SQLite database cannot serve the call", err),
            _ => StreamError::internal_from("the SQLite database failed", err),
        }
    }
}

/// The event of a call that created a stream (or found it).
fn created(path: &StreamPath, created: &Created) -> Option<Event> {
    created
        .created
        .then(|| committed(path, created.info.tail, created.info.closed))
}

fn committed(path: &StreamPath, tail: crate::Offset, closed: bool) -> Event {
    Event::Committed(Committed {
        path: path.to_string(),
        tail,
        closed,
    })
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
        self.submit(move |engine, records| {
            let outcome = complete(engine.create(records, &path, config, initial))?;
            let event = created(&path, &outcome);
            Ok((outcome, event))
        })
        .await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let path = path.clone();
        self.submit(move |engine, records| {
            let outcome = complete(engine.append(records, &path, append))?;
            let event =
                (!outcome.duplicate).then(|| committed(&path, outcome.next_offset, outcome.closed));
            Ok((outcome, event))
        })
        .await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
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

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let path = path.clone();
        self.submit(move |engine, records| {
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
        self.submit(move |engine, records| {
            let outcome = complete(engine.fork(records, &path, fork))?;
            let event = created(&path, &outcome);
            Ok((outcome, event))
        })
        .await
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}
