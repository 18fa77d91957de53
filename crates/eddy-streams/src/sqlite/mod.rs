//! The SQLite backend: the embedded, durable default.
//!
//! See `DESIGN-sqlite.md` in the crate for the record layout and the commit
//! protocol.

mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::payload::DEFAULT_MAX_APPEND_BYTES;
use crate::rules::expired;
use crate::{
    Append, Appended, Clock, Created, Expiry, Fork, Notifier, Payload, ReadChunk, ReadFrom,
    Storage, StreamConfig, StreamError, StreamInfo, StreamPath, SystemClock,
};
use writer::Job;

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
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Sync,
            max_append_bytes: DEFAULT_MAX_APPEND_BYTES,
            clock: Arc::new(SystemClock),
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
    clock: Arc<dyn Clock>,
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
            StreamError::Storage(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
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
        let notifier = Arc::new(Notifier::default());
        let (tx, rx) = mpsc::channel();
        let writer_notifier = Arc::clone(&notifier);
        let clock = Arc::clone(&options.clock);
        let writer = std::thread::Builder::new()
            .name("eddy-streams-writer".into())
            .spawn(move || {
                writer::run(
                    conn,
                    rx,
                    writer_notifier,
                    options.max_append_bytes,
                    &*options.clock,
                )
            })
            .map_err(|e| StreamError::Storage(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteStorage {
            jobs: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            readers: Arc::new(Mutex::new(Vec::new())),
            file,
            notifier,
            clock,
        })
    }

    /// The database file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Sends a job to the writer and waits for its answer.
    async fn submit<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, StreamError>>) -> Job,
    ) -> Result<T, StreamError> {
        let (reply, answer) = oneshot::channel();
        self.send(job(reply))?;
        answer
            .await
            .map_err(|_| StreamError::Storage("the writer thread stopped".into()))?
    }

    fn send(&self, job: Job) -> Result<(), StreamError> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.as_ref()
            .ok_or_else(|| StreamError::Storage("the store is closed".into()))?
            .send(job)
            .map_err(|_| StreamError::Storage("the writer thread stopped".into()))
    }

    /// Runs `f` on a read connection, off the async runtime.
    async fn with_reader<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StreamError> + Send + 'static,
    ) -> Result<T, StreamError> {
        let readers = Arc::clone(&self.readers);
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => open_connection(&file, true)?,
            };
            let result = f(&mut conn);
            readers.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
            result
        })
        .await
        .map_err(|e| StreamError::Storage(format!("read task failed: {e}")))?
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
        .map_err(|e| StreamError::Storage(format!("cannot open {}: {e}", file.display())))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

/// The live row at `path` as a reader sees it.
fn live_row(conn: &Connection, path: &str, now: i64) -> Result<schema::StreamRow, StreamError> {
    match schema::load(conn, path)? {
        Some(row) if row.soft_deleted => Err(StreamError::SoftDeleted {
            path: path.to_owned(),
        }),
        Some(row) if !expired(&row.head.config, row.accessed_ms, now) => Ok(row),
        Some(_) => Err(StreamError::NotFound {
            path: path.to_owned(),
        }),
        None if schema::is_tombstoned(conn, path)? => Err(StreamError::Gone {
            path: path.to_owned(),
        }),
        None => Err(StreamError::NotFound {
            path: path.to_owned(),
        }),
    }
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
        self.submit(|reply| Job::Create {
            path,
            config,
            initial,
            reply,
        })
        .await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let path = path.clone();
        self.submit(|reply| Job::Append {
            path,
            append,
            reply,
        })
        .await
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let key = path.to_string();
        let now = self.clock.now_ms();
        let (chunk, sliding) = self
            .with_reader(move |conn| {
                let tx = conn.transaction()?;
                let row = live_row(&tx, &key, now)?;
                let start = row.head.start_position(from)?;
                let messages = schema::read_messages(&tx, row.id, start, max_bytes)?;
                let sliding = matches!(row.head.config.expiry, Expiry::Ttl(_));
                Ok((row.head.chunk(start, messages), sliding))
            })
            .await?;
        if sliding {
            self.send(Job::Touch { path: path.clone() })?;
        }
        Ok(chunk)
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let key = path.to_string();
        let now = self.clock.now_ms();
        self.with_reader(move |conn| Ok(live_row(conn, &key, now)?.head.info(&key)))
            .await
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let path = path.clone();
        self.submit(|reply| Job::Delete { path, reply }).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        let prefix = prefix.to_owned();
        let now = self.clock.now_ms();
        self.with_reader(move |conn| {
            Ok(schema::list(conn, &prefix)?
                .into_iter()
                .filter(|(_, row)| {
                    !row.soft_deleted && !expired(&row.head.config, row.accessed_ms, now)
                })
                .map(|(path, row)| row.head.info(&path))
                .collect())
        })
        .await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let path = path.clone();
        self.submit(|reply| Job::Fork { path, fork, reply }).await
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}
