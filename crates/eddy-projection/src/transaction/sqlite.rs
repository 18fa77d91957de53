//! The SQLite transaction host: [`SqliteHost`] runs
//! [`TransactionProjection`](crate::TransactionProjection)s on a
//! [`SqliteStorage`], each unit one transaction of the store's writer
//! thread that holds the handler's SQL and the binding's checkpoint
//! ([`SqliteCheckpoints`]).

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use async_trait::async_trait;
use eddy_streams::rusqlite::{self, Connection, ErrorCode, OptionalExtension};
use eddy_streams::{SqliteStorage, StreamError};
use futures::future::BoxFuture;

use super::{output_writes, Failed, Handler, Handlers, TransactionBound, UnitTransaction, Work};
use crate::attach::attach_on;
use crate::checkpoint::{Checkpoint, CheckpointKey, CheckpointStore, Loaded, Token};
use crate::declare::Params;
use crate::follow::follow_on;
use crate::runner::{run_on, InTransaction};
use crate::{
    AttachOptions, Attached, Batch, Bound, Emits, FollowOptions, HandlerError, Host, Progress,
    ProjectionError, Result, RunOptions, TransactionProjection, Unit,
};

/// Names SQLite as the host of a
/// [`TransactionProjection`](crate::TransactionProjection) declared with
/// [`Declare::process_sqlite`](crate::Declare::process_sqlite): its handler
/// gets rusqlite's own `&rusqlite::Transaction`. No value of it exists.
#[derive(Debug)]
pub enum SqliteTx {}

/// Checkpoints in the `projection_checkpoints` table of a
/// [`SqliteStorage`]'s database (created by its migrations), one row per
/// binding, moved by compare-and-set on a save counter (the [`Token`]'s
/// [`version`](Token::version)). A [`SqliteHost`] saves them inside the
/// unit's transaction; as a plain [`CheckpointStore`] each call is a
/// transaction of its own on the store's writer.
#[derive(Clone)]
pub struct SqliteCheckpoints {
    store: Arc<SqliteStorage>,
}

impl fmt::Debug for SqliteCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteCheckpoints")
            .field("file", &self.store.file())
            .finish()
    }
}

impl SqliteCheckpoints {
    /// The checkpoints of `store`.
    pub fn new(store: Arc<SqliteStorage>) -> Self {
        SqliteCheckpoints { store }
    }

    async fn save_alone(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: Option<Checkpoint>,
    ) -> Result<Token> {
        let key = key.clone();
        self.store
            .transaction(move |tx| {
                save_on(tx.sql(), &key, expected, checkpoint.as_ref())?
                    .ok_or_else(|| conflict(&key))
            })
            .await
    }
}

#[async_trait]
impl CheckpointStore for SqliteCheckpoints {
    /// The rows of `projection_checkpoints` that hold a checkpoint.
    async fn keys(&self) -> Result<Vec<CheckpointKey>> {
        let rows = self
            .store
            .transaction(|tx| -> Result<Vec<(String, u32, String)>, StreamError> {
                let mut stmt = tx.sql().prepare(
                    "SELECT projection, version, params FROM projection_checkpoints \
                     WHERE checkpoint IS NOT NULL",
                )?;
                let rows = stmt
                    .query_map((), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .await?;
        let mut keys = rows
            .into_iter()
            .map(|(projection, version, params)| {
                CheckpointKey::from_stored(projection, version, params)
            })
            .collect::<Result<Vec<_>>>()?;
        keys.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
        Ok(keys)
    }

    async fn load(&self, key: &CheckpointKey) -> Result<Loaded> {
        let key = key.clone();
        self.store
            .transaction(move |tx| load_on(tx.sql(), &key))
            .await
    }

    async fn save(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: &Checkpoint,
    ) -> Result<Token> {
        self.save_alone(key, expected, Some(checkpoint.clone()))
            .await
    }

    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<Token> {
        if expected == Token::NONE {
            // Nothing to forget, unless a checkpoint appeared meanwhile.
            let loaded = self.load(key).await?;
            return if loaded.token == Token::NONE {
                Ok(Token::NONE)
            } else {
                Err(conflict(key))
            };
        }
        self.save_alone(key, expected, None).await
    }
}

const SELECT: &str = "SELECT saves, checkpoint FROM projection_checkpoints \
                      WHERE projection = ?1 AND version = ?2 AND params = ?3";

fn load_on(conn: &Connection, key: &CheckpointKey) -> Result<Loaded> {
    let row: Option<(i64, Option<String>)> = conn
        .prepare_cached(SELECT)
        .and_then(|mut stmt| {
            stmt.query_row((&key.projection, key.version, &key.params), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(StreamError::from)?;
    let Some((saves, body)) = row else {
        return Ok(Loaded {
            checkpoint: None,
            token: Token::NONE,
        });
    };
    let checkpoint = body
        .map(|body| serde_json::from_str(&body))
        .transpose()
        .map_err(|e| invalid(key, e.to_string()))?;
    Ok(Loaded {
        checkpoint,
        token: Token::from_version(u64::try_from(saves).unwrap_or_default()),
    })
}

/// Saves `checkpoint` (`None`: forgets it) over `expected`; `None` when
/// the stored token moved.
fn save_on(
    conn: &Connection,
    key: &CheckpointKey,
    expected: Token,
    checkpoint: Option<&Checkpoint>,
) -> Result<Option<Token>> {
    let body = checkpoint
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| invalid(key, e.to_string()))?;
    let saves = i64::try_from(expected.version())
        .map_err(|_| invalid(key, "the save counter overflowed".into()))?;
    let statement = if saves == 0 {
        "INSERT INTO projection_checkpoints (projection, version, params, saves, checkpoint) \
         VALUES (?1, ?2, ?3, ?4 + 1, ?5) ON CONFLICT DO NOTHING"
    } else {
        "UPDATE projection_checkpoints SET saves = saves + 1, checkpoint = ?5 \
         WHERE projection = ?1 AND version = ?2 AND params = ?3 AND saves = ?4"
    };
    let changed = conn
        .prepare_cached(statement)
        .and_then(|mut stmt| stmt.execute((&key.projection, key.version, &key.params, saves, body)))
        .map_err(StreamError::from)?;
    Ok((changed == 1).then(|| Token::from_version(expected.version() + 1)))
}

fn invalid(key: &CheckpointKey, reason: String) -> ProjectionError {
    ProjectionError::InvalidCheckpoint {
        checkpoint: key.path.to_string(),
        reason,
    }
}

fn conflict(key: &CheckpointKey) -> ProjectionError {
    ProjectionError::CheckpointConflict {
        checkpoint: key.path.to_string(),
    }
}

/// Whether `err`, or an error it was caused by, is SQLite's "database is
/// busy or locked" (another process holds the write lock).
fn busy(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        let code = err
            .downcast_ref::<rusqlite::Error>()
            .and_then(rusqlite::Error::sqlite_error_code);
        if matches!(
            code,
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        ) {
            return true;
        }
        next = err.source();
    }
    false
}

/// The handler error of a handler that panicked, with its message.
fn panic_error(panicked: &(dyn std::any::Any + Send)) -> HandlerError {
    let message = panicked
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panicked.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    format!("the handler panicked: {message}").into()
}

/// A host for [`TransactionProjection`](crate::TransactionProjection)s on
/// SQLite: the store, its [`SqliteCheckpoints`], and a [`Host`] over both
/// for everything that does not run a transaction handler
/// ([`Host::read`], [`Host::forget`], plain projections).
///
/// Each unit: read the inputs, run `prepare` on the async runtime
/// (outside any transaction), then on the store's writer thread, in one
/// transaction of its own: run the handler with rusqlite's `Transaction`,
/// append what it wrote to the declared outputs, move the checkpoint by
/// compare-and-set, commit. A failure anywhere before the commit (a panic
/// of the handler included) rolls back the handler's SQL and the outputs'
/// items with the checkpoint. A
/// database that another process holds busy runs the unit again after a
/// short jittered pause, reading the inputs again. A second writer of the
/// binding is refused by the checkpoint's compare-and-set with
/// `checkpoint/conflict`, its SQL rolled back.
#[derive(Clone, Debug)]
pub struct SqliteHost {
    store: Arc<SqliteStorage>,
    checkpoints: Arc<SqliteCheckpoints>,
    host: Host,
}

impl SqliteHost {
    /// A host on `store`.
    pub fn new(store: Arc<SqliteStorage>) -> Self {
        let checkpoints = Arc::new(SqliteCheckpoints::new(Arc::clone(&store)));
        let host = Host::new(store.clone()).with_checkpoints(checkpoints.clone());
        SqliteHost {
            store,
            checkpoints,
            host,
        }
    }

    /// The plain host over the same storage and checkpoints.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The checkpoint store.
    pub fn checkpoints(&self) -> &Arc<SqliteCheckpoints> {
        &self.checkpoints
    }

    transaction_runners!(SqliteTx);

    /// The sessions of a transaction projection with `handlers`.
    fn opener<P: Params, T: Send + Sync + 'static>(
        &self,
        handlers: &Handlers<P, SqliteTx, T>,
    ) -> InTransaction<P> {
        let (store, handlers) = (Arc::clone(&self.store), handlers.clone());
        let append_limit = self.host.append_limit;
        InTransaction {
            host: self.host.clone(),
            unit: Arc::new(move |bound| {
                Arc::new(SqliteUnit {
                    store: Arc::clone(&store),
                    append_limit,
                    handlers: handlers.clone(),
                    bound,
                })
            }),
        }
    }
}

struct SqliteUnit<P, T> {
    store: Arc<SqliteStorage>,
    append_limit: usize,
    handlers: Handlers<P, SqliteTx, T>,
    bound: Bound<P, ()>,
}

/// Why a unit's transaction on the writer thread did not commit.
enum Outcome {
    Store(StreamError),
    Handler(HandlerError),
    Fault(ProjectionError),
}

impl From<StreamError> for Outcome {
    fn from(err: StreamError) -> Self {
        Outcome::Store(err)
    }
}

impl<P: Params, T: Send + Sync + 'static> UnitTransaction<P> for SqliteUnit<P, T> {
    fn commit<'a>(
        &'a self,
        batch: Batch,
        unit: &'a Unit<P>,
        key: &'a CheckpointKey,
        expected: Token,
        next: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<Token, Failed>> {
        let projection = self.bound.projection().id().to_owned();
        let handler = move |source: HandlerError| {
            let race = busy(source.as_ref());
            let error = ProjectionError::Handler { projection, source };
            if race {
                Failed::Race(error)
            } else {
                Failed::Fault(error)
            }
        };
        Box::pin(async move {
            let id = self.bound.projection().id();
            let Handler::Sync(process) = &self.handlers.process else {
                return Err(Failed::Fault(ProjectionError::invalid(format!(
                    "projection `{id}` has an asynchronous handler: declare it with \
                     process_sqlite to run it on a SqliteHost"
                ))));
            };
            let prepared = (self.handlers.prepare)(&batch, unit)
                .await
                .map_err(handler.clone())?;
            let process = Arc::clone(process);
            let (unit, key, next) = (unit.clone(), key.clone(), next.clone());
            let bound = self.bound.clone();
            let limit = self.append_limit;
            let committed = self
                .store
                .transaction(move |tx| {
                    let mut emits = Emits::new(bound.projection.inner.number);
                    // A panic must not take the store's writer thread down
                    // with it: it fails this unit, which rolls back.
                    let ran = panic::catch_unwind(AssertUnwindSafe(|| {
                        let work = Work {
                            batch: &batch,
                            unit: &unit,
                            prepared: &prepared,
                            emits: &mut emits,
                        };
                        process(tx.sql(), work)
                    }));
                    ran.unwrap_or_else(|panicked| Err(panic_error(panicked.as_ref())))
                        .map_err(Outcome::Handler)?;
                    if let Some(misuse) = batch.misuse() {
                        return Err(Outcome::Fault(ProjectionError::invalid(format!(
                            "projection `{}`: {misuse}",
                            bound.projection.id()
                        ))));
                    }
                    let writes = output_writes(&bound, &emits, limit).map_err(Outcome::Fault)?;
                    for write in &writes {
                        for append in write.appends() {
                            tx.append(&write.path, append).map_err(|e| {
                                if e.is_retryable() {
                                    Outcome::Store(e)
                                } else {
                                    Outcome::Fault(write.failed(e))
                                }
                            })?;
                        }
                    }
                    save_on(tx.sql(), &key, expected, Some(&next))
                        .map_err(Outcome::Fault)?
                        .ok_or_else(|| Outcome::Fault(conflict(&key)))
                })
                .await;
            committed.map_err(|outcome| match outcome {
                Outcome::Store(err) if err.is_retryable() => Failed::Race(err.into()),
                Outcome::Store(err) => Failed::Fault(err.into()),
                Outcome::Handler(source) => handler(source),
                Outcome::Fault(err) => Failed::Fault(err),
            })
        })
    }
}
