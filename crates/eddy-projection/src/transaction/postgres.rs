//! The PostgreSQL transaction host: [`PgHost`] runs
//! [`TransactionProjection`](crate::TransactionProjection)s on a
//! [`PgStorage`], with their checkpoints in a table of the same database
//! ([`PgCheckpoints`]) so that the handler's SQL and the checkpoint commit
//! in one transaction.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use eddy_streams::sqlx::{self, PgConnection, PgPool, Postgres};
use eddy_streams::{PgStorage, StreamError};
use futures::future::BoxFuture;

use super::{output_writes, Failed, Handler, Handlers, TransactionBound, UnitTransaction, Work};
use crate::attach::attach_on;
use crate::checkpoint::{Checkpoint, CheckpointKey, CheckpointStore, Loaded, Token};
use crate::declare::Params;
use crate::follow::follow_on;
use crate::runner::{run_on, InTransaction};
use crate::{
    AttachOptions, Attached, Batch, Bound, Emits, FollowOptions, Host, Progress, ProjectionError,
    Result, RunOptions, TransactionProjection, Unit,
};

/// The transaction a [`PgHost`] hands to a `process_transaction` handler:
/// sqlx's own. Run statements on it with `.execute(&mut **tx)`.
pub type PgTx = sqlx::Transaction<'static, Postgres>;

/// SQLSTATEs of a transaction that lost a race and can run again:
/// serialization failure and deadlock detected.
const RACES: [&str; 2] = ["40001", "40P01"];

/// Checkpoints in one table of a PostgreSQL database, one row per binding,
/// moved by compare-and-set on a save counter (the [`Token`]'s
/// [`version`](Token::version)). A [`PgHost`] saves them inside the unit's
/// transaction; as a plain [`CheckpointStore`] each call is its own
/// statement.
///
/// The table, `projection_checkpoints` in the store's schema, is created
/// by the store's versioned migrations. Its size is one row per binding,
/// whatever the number of units.
#[derive(Clone)]
pub struct PgCheckpoints {
    pool: PgPool,
    table: String,
}

impl fmt::Debug for PgCheckpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgCheckpoints")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl PgCheckpoints {
    /// The checkpoints table in `store`'s schema (the store's migrations
    /// create it).
    pub fn open(store: &PgStorage) -> Self {
        PgCheckpoints {
            pool: store.pool().clone(),
            table: format!("\"{}\".projection_checkpoints", store.schema()),
        }
    }

    /// Saves `checkpoint` over `expected` on `conn` (a transaction's
    /// connection when the save is part of a unit); `None` when the stored
    /// token moved.
    pub(crate) async fn save_on(
        &self,
        conn: &mut PgConnection,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: Option<&Checkpoint>,
    ) -> Result<Option<Token>, SaveError> {
        let body = checkpoint
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| {
                SaveError::Fault(ProjectionError::InvalidCheckpoint {
                    checkpoint: key.path.to_string(),
                    reason: e.to_string(),
                })
            })?;
        let saves = i64::try_from(expected.version()).map_err(|_| {
            SaveError::Fault(ProjectionError::InvalidCheckpoint {
                checkpoint: key.path.to_string(),
                reason: "the save counter overflowed".into(),
            })
        })?;
        let statement = if saves == 0 {
            format!(
                "INSERT INTO {} (projection, version, params, saves, checkpoint) \
                 VALUES ($1, $2, $3, $4 + 1, $5) ON CONFLICT DO NOTHING",
                self.table
            )
        } else {
            format!(
                "UPDATE {} SET saves = saves + 1, checkpoint = $5 \
                 WHERE projection = $1 AND version = $2 AND params = $3 AND saves = $4",
                self.table
            )
        };
        let done = sqlx::query(sqlx::AssertSqlSafe(statement))
            .bind(&key.projection)
            .bind(i64::from(key.version))
            .bind(&key.params)
            .bind(saves)
            .bind(body)
            .execute(&mut *conn)
            .await
            .map_err(SaveError::Sql)?;
        Ok((done.rows_affected() == 1).then(|| Token::from_version(expected.version() + 1)))
    }

    async fn exists(&self, key: &CheckpointKey) -> Result<bool> {
        let row: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT saves FROM {} WHERE projection = $1 AND version = $2 AND params = $3",
            self.table
        )))
        .bind(&key.projection)
        .bind(i64::from(key.version))
        .bind(&key.params)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sql_error("cannot load a checkpoint", e))?;
        Ok(row.is_some())
    }

    async fn save_alone(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: Option<&Checkpoint>,
    ) -> Result<Token> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| sql_error("cannot save a checkpoint", e))?;
        match self.save_on(&mut conn, key, expected, checkpoint).await {
            Ok(Some(token)) => Ok(token),
            Ok(None) => Err(conflict(key)),
            Err(SaveError::Sql(e)) => Err(sql_error("cannot save a checkpoint", e)),
            Err(SaveError::Fault(e)) => Err(e),
        }
    }
}

#[async_trait]
impl CheckpointStore for PgCheckpoints {
    /// The rows of `projection_checkpoints` that hold a checkpoint.
    async fn keys(&self) -> Result<Vec<CheckpointKey>> {
        let rows: Vec<(String, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT projection, version, params FROM {} WHERE checkpoint IS NOT NULL",
            self.table
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| sql_error("cannot list the checkpoints", e))?;
        let mut keys = Vec::with_capacity(rows.len());
        for (projection, version, params) in rows {
            let version = u32::try_from(version).map_err(|_| {
                ProjectionError::invalid(format!(
                    "projection `{projection}` has a checkpoint of version {version}"
                ))
            })?;
            keys.push(CheckpointKey::from_stored(projection, version, params)?);
        }
        keys.sort_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
        Ok(keys)
    }

    async fn load(&self, key: &CheckpointKey) -> Result<Loaded> {
        let row: Option<(i64, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT saves, checkpoint FROM {} \
             WHERE projection = $1 AND version = $2 AND params = $3",
            self.table
        )))
        .bind(&key.projection)
        .bind(i64::from(key.version))
        .bind(&key.params)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| sql_error("cannot load a checkpoint", e))?;
        let Some((saves, body)) = row else {
            return Ok(Loaded {
                checkpoint: None,
                token: Token::NONE,
            });
        };
        let checkpoint = body
            .map(|body| serde_json::from_str(&body))
            .transpose()
            .map_err(|e| ProjectionError::InvalidCheckpoint {
                checkpoint: key.path.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Loaded {
            checkpoint,
            token: Token::from_version(u64::try_from(saves).unwrap_or_default()),
        })
    }

    async fn save(
        &self,
        key: &CheckpointKey,
        expected: Token,
        checkpoint: &Checkpoint,
    ) -> Result<Token> {
        self.save_alone(key, expected, Some(checkpoint)).await
    }

    async fn forget(&self, key: &CheckpointKey, expected: Token) -> Result<Token> {
        if expected == Token::NONE {
            // Nothing to forget, unless a checkpoint appeared meanwhile.
            return if self.exists(key).await? {
                Err(conflict(key))
            } else {
                Ok(Token::NONE)
            };
        }
        self.save_alone(key, expected, None).await
    }
}

/// Why a save on a connection failed.
pub(crate) enum SaveError {
    /// The statement failed (possibly a lost race).
    Sql(sqlx::Error),
    /// The checkpoint cannot be written.
    Fault(ProjectionError),
}

fn conflict(key: &CheckpointKey) -> ProjectionError {
    ProjectionError::CheckpointConflict {
        checkpoint: key.path.to_string(),
    }
}

/// A failed statement: retryable (`storage-failure`) unless the database
/// refused it for good.
fn sql_error(context: &str, err: sqlx::Error) -> ProjectionError {
    let refused = matches!(&err, sqlx::Error::Database(db) if !db.code().is_some_and(|c| {
        c.starts_with("08") || c.starts_with("53") || c.starts_with("57P0") || RACES.contains(&&*c)
    }));
    if refused {
        StreamError::internal_from(context, err).into()
    } else {
        StreamError::unavailable_from(context, err).into()
    }
}

/// Whether `err`, or an error it was caused by, is a PostgreSQL
/// serialization failure or deadlock.
fn lost_race(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        let code = err
            .downcast_ref::<sqlx::Error>()
            .and_then(|e| e.as_database_error())
            .and_then(|db| db.code().map(|c| c.into_owned()));
        if code.is_some_and(|c| RACES.contains(&c.as_str())) {
            return true;
        }
        next = err.source();
    }
    false
}

/// A host for [`TransactionProjection`](crate::TransactionProjection)s on
/// PostgreSQL: the store, its [`PgCheckpoints`], and a [`Host`] over both
/// for everything that does not run a transaction handler
/// ([`Host::read`], [`Host::forget`], plain projections).
///
/// Each unit: read the inputs, run `prepare` (outside any transaction),
/// begin a transaction, run the handler on it, append what it wrote to
/// the declared outputs in it, move the checkpoint by compare-and-set in
/// it, commit. A failure anywhere before the commit rolls back the
/// handler's SQL and the outputs' items with the checkpoint. A serialization
/// failure or deadlock runs the unit again after a short jittered pause,
/// reading the inputs again: with unchanged ranges the unit key is the
/// same, and new input that extends a range changes it. A second writer of
/// the binding is refused by the checkpoint's compare-and-set with
/// `checkpoint/conflict`, its SQL rolled back.
#[derive(Clone, Debug)]
pub struct PgHost {
    store: Arc<PgStorage>,
    checkpoints: Arc<PgCheckpoints>,
    host: Host,
}

impl PgHost {
    /// A host on `store`.
    pub fn open(store: Arc<PgStorage>) -> Self {
        let checkpoints = Arc::new(PgCheckpoints::open(&store));
        let host = Host::new(store.clone()).with_checkpoints(checkpoints.clone());
        PgHost {
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
    pub fn checkpoints(&self) -> &Arc<PgCheckpoints> {
        &self.checkpoints
    }

    transaction_runners!(PgTx);

    /// The sessions of a transaction projection with `handlers`.
    fn opener<P: Params, T: Send + Sync + 'static>(
        &self,
        handlers: &Handlers<P, PgTx, T>,
    ) -> InTransaction<P> {
        let (store, checkpoints) = (Arc::clone(&self.store), Arc::clone(&self.checkpoints));
        let (handlers, append_limit) = (handlers.clone(), self.host.append_limit);
        InTransaction {
            host: self.host.clone(),
            unit: Arc::new(move |bound| {
                Arc::new(PgUnit {
                    store: Arc::clone(&store),
                    append_limit,
                    checkpoints: Arc::clone(&checkpoints),
                    handlers: handlers.clone(),
                    projection: bound.projection().id().to_owned(),
                    bound,
                })
            }),
        }
    }
}

struct PgUnit<P, T> {
    store: Arc<PgStorage>,
    append_limit: usize,
    checkpoints: Arc<PgCheckpoints>,
    handlers: Handlers<P, PgTx, T>,
    projection: String,
    bound: Bound<P, ()>,
}

impl<P: Params, T: Send + Sync + 'static> UnitTransaction<P> for PgUnit<P, T> {
    fn commit<'a>(
        &'a self,
        batch: Batch,
        unit: &'a Unit<P>,
        key: &'a CheckpointKey,
        expected: Token,
        next: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<Token, Failed>> {
        let handler = |source: crate::HandlerError| {
            let race = lost_race(source.as_ref());
            let error = ProjectionError::Handler {
                projection: self.projection.clone(),
                source,
            };
            if race {
                Failed::Race(error)
            } else {
                Failed::Fault(error)
            }
        };
        let stream = |error: StreamError| {
            let race = lost_race(&error);
            if race {
                Failed::Race(error.into())
            } else {
                Failed::Fault(error.into())
            }
        };
        Box::pin(async move {
            let Handler::Async(process) = &self.handlers.process else {
                return Err(Failed::Fault(ProjectionError::invalid(format!(
                    "projection `{}` has a SQLite handler: run it on a SqliteHost",
                    self.projection
                ))));
            };
            let batch = &batch;
            let prepared = (self.handlers.prepare)(batch, unit)
                .await
                .map_err(handler)?;
            let mut tx = self.store.begin().await.map_err(stream)?;
            let mut emits = Emits::new(self.bound.projection.inner.number);
            let work = Work {
                batch,
                unit,
                prepared: &prepared,
                emits: &mut emits,
            };
            process(tx.sql(), work).await.map_err(handler)?;
            if let Some(misuse) = batch.misuse() {
                return Err(Failed::Fault(ProjectionError::invalid(format!(
                    "projection `{}`: {misuse}",
                    self.projection
                ))));
            }
            let writes =
                output_writes(&self.bound, &emits, self.append_limit).map_err(Failed::Fault)?;
            for write in &writes {
                for append in write.appends() {
                    if let Err(e) = tx.append(&write.path, append).await {
                        return Err(if lost_race(&e) {
                            Failed::Race(e.into())
                        } else {
                            Failed::Fault(write.failed(e))
                        });
                    }
                }
            }
            let saved = self
                .checkpoints
                .save_on(tx.sql(), key, expected, Some(next))
                .await;
            let token = match saved {
                Ok(Some(token)) => token,
                Ok(None) => return Err(Failed::Fault(conflict(key))),
                Err(SaveError::Sql(e)) if lost_race(&e) => {
                    return Err(Failed::Race(sql_error("cannot save the checkpoint", e)))
                }
                Err(SaveError::Sql(e)) => {
                    return Err(Failed::Fault(sql_error("cannot save the checkpoint", e)))
                }
                Err(SaveError::Fault(e)) => return Err(Failed::Fault(e)),
            };
            tx.commit().await.map_err(stream)?;
            Ok(token)
        })
    }
}
