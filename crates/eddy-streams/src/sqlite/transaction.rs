//! One SQLite write transaction handed to a caller's closure: the engine's
//! appends and the caller's own SQL, committed or rolled back together.

use std::panic::{self, AssertUnwindSafe};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::records::SqliteRecords;
use super::savepoint;
use super::writer::{AloneTask, Event, Failure, Shared};
use crate::cache::Change;
use crate::engine::{complete, Engine};
use crate::touches::Touches;
use crate::{Append, Appended, StreamError, StreamPath};

/// A write transaction on a [`SqliteStorage`](super::SqliteStorage)'s
/// database, given to the closure of
/// [`SqliteStorage::transaction`](super::SqliteStorage::transaction) on
/// the store's writer thread.
///
/// [`sql`](SqliteTransaction::sql) is rusqlite's own [`Transaction`] for
/// the application's statements; [`append`](SqliteTransaction::append)
/// keeps every rule of the store. Both commit when the closure returns
/// `Ok`, and roll back together when it returns `Err`. Readers are woken,
/// and the store's cache learns the appends, only after the commit.
pub struct SqliteTransaction<'t> {
    tx: &'t Transaction<'t>,
    engine: &'t Engine,
    touches: &'t Touches,
    /// Record writes for the cache, learnt after the commit.
    pub(super) log: Vec<Change>,
    /// Signals raised after the commit.
    pub(super) events: Vec<Event>,
}

impl std::fmt::Debug for SqliteTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTransaction")
            .field("changes", &self.log.len())
            .finish_non_exhaustive()
    }
}

impl<'t> SqliteTransaction<'t> {
    pub(super) fn new(tx: &'t Transaction<'t>, engine: &'t Engine, touches: &'t Touches) -> Self {
        SqliteTransaction {
            tx,
            engine,
            touches,
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    /// rusqlite's transaction, for SQL of the caller's own.
    pub fn sql(&self) -> &Transaction<'t> {
        self.tx
    }

    /// Appends (see [`Storage::append`](crate::Storage::append)) inside
    /// the transaction. A refused append writes nothing, and the
    /// transaction goes on.
    pub fn append(&mut self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        savepoint::APPEND.begin(self.tx)?;
        let mut records = SqliteRecords::logging(self.tx, self.touches);
        let result = complete(self.engine.append(&mut records, path, append, None));
        let log = records.take_log();
        match result {
            Ok((appended, written)) => {
                savepoint::APPEND.release(self.tx)?;
                self.log.extend(log);
                let info = written.map(|head| head.info(path.as_str()));
                self.events.extend(info.map(Event::Committed));
                Ok(appended)
            }
            Err(err) => {
                savepoint::APPEND.roll_back(self.tx)?;
                Err(err)
            }
        }
    }
}

/// A caller's closure, run alone in a transaction of the writer thread.
pub(super) struct Alone<F, T, E> {
    pub op: F,
    pub reply: oneshot::Sender<Result<T, E>>,
    /// Its room in the queue, given back once it ran.
    pub room: OwnedSemaphorePermit,
}

impl<F, T, E> AloneTask for Alone<F, T, E>
where
    F: FnOnce(&mut SqliteTransaction<'_>) -> Result<T, E> + Send,
    T: Send,
    E: From<StreamError> + Send,
{
    fn run(self: Box<Self>, conn: &mut Connection, shared: Shared<'_>) -> Result<(), Failure> {
        let Alone { op, reply, room } = *self;
        let _room = room;
        let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
            Ok(tx) => tx,
            Err(err) => {
                let err = StreamError::from(err);
                let _ = reply.send(Err(err.clone().into()));
                return Err(Failure::Transient(err));
            }
        };
        let mut handle = SqliteTransaction::new(&tx, shared.engine, shared.touches);
        // A panicking closure must not take the writer thread (and every
        // later write) down with it: it fails alone, rolled back.
        let result = panic::catch_unwind(AssertUnwindSafe(|| op(&mut handle)));
        let SqliteTransaction { log, events, .. } = handle;
        let result = result.unwrap_or_else(|panicked| {
            Err(StreamError::internal(format!(
                "a transaction's closure panicked: {}",
                panic_message(panicked.as_ref())
            ))
            .into())
        });
        let value = match result {
            Ok(value) => value,
            Err(err) => {
                // A caller that stopped waiting is not an error.
                let _ = reply.send(Err(err));
                return tx.rollback().map_err(|e| Failure::Transient(e.into()));
            }
        };
        let paths = events.iter().filter_map(Event::path);
        if let Err(err) = super::marks::write(&tx, &shared.markers.marks(paths)) {
            let _ = reply.send(Err(err.clone().into()));
            return tx.rollback().map_err(|e| Failure::Transient(e.into()));
        }
        if let Err(err) = tx.commit() {
            let err = StreamError::internal_from(
                "a commit failed, so the stream store refuses writes until it is reopened",
                err,
            );
            let _ = reply.send(Err(err.clone().into()));
            return Err(Failure::Commit(err));
        }
        shared.cache.apply(log);
        for event in events {
            event.raise(shared.notifier);
        }
        let _ = reply.send(Ok(value));
        Ok(())
    }

    fn refuse(self: Box<Self>, err: &StreamError) {
        let _ = self.reply.send(Err(err.clone().into()));
    }
}

/// The message a panic carried, if it is text.
fn panic_message(panicked: &(dyn std::any::Any + Send)) -> &str {
    panicked
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panicked.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}
