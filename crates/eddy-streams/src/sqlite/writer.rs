//! The single writer thread and its group commit.
//!
//! Every change goes through one thread that owns the write connection.
//! It takes every job waiting in its queue, applies them one by one in a
//! single transaction (each under a savepoint, so a failing job leaves the
//! others intact), commits once, and only then answers the callers and
//! raises the change signals. Concurrent appenders therefore share one
//! fsync, and no caller hears "written" before its data is on disk.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::schema;
use crate::fork::{check_refork, plan, ForkOrigin};
use crate::payload::split;
use crate::rules::{decide, expired, Decision, Head};
use crate::{
    Append, Appended, Clock, Committed, Created, Fork, Notifier, Payload, StreamConfig,
    StreamError, StreamPath,
};

/// The most jobs one transaction takes.
const MAX_GROUP: usize = 256;

/// A change for the writer thread.
pub(super) enum Job {
    Create {
        path: StreamPath,
        config: StreamConfig,
        initial: Payload,
        reply: oneshot::Sender<Result<Created, StreamError>>,
    },
    Append {
        path: StreamPath,
        append: Append,
        reply: oneshot::Sender<Result<Appended, StreamError>>,
    },
    Delete {
        path: StreamPath,
        reply: oneshot::Sender<Result<(), StreamError>>,
    },
    Fork {
        path: StreamPath,
        fork: Fork,
        reply: oneshot::Sender<Result<Created, StreamError>>,
    },
    /// Slides a TTL after a read; nobody waits for it.
    Touch { path: StreamPath },
}

/// A job's answer, held until the transaction commits.
enum Answer {
    Created(
        oneshot::Sender<Result<Created, StreamError>>,
        Result<Created, StreamError>,
    ),
    Appended(
        oneshot::Sender<Result<Appended, StreamError>>,
        Result<Appended, StreamError>,
    ),
    Deleted(
        oneshot::Sender<Result<(), StreamError>>,
        Result<(), StreamError>,
    ),
    None,
}

/// Runs the writer until every sender is dropped.
pub(super) fn run(
    mut conn: Connection,
    jobs: Receiver<Job>,
    notifier: Arc<Notifier>,
    max_append_bytes: usize,
    clock: &dyn Clock,
) {
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        commit_group(
            &mut conn,
            group,
            &notifier,
            max_append_bytes,
            clock.now_ms(),
        );
    }
}

fn commit_group(
    conn: &mut Connection,
    group: Vec<Job>,
    notifier: &Notifier,
    max_append_bytes: usize,
    now: i64,
) {
    let mut answers = Vec::with_capacity(group.len());
    let mut events = Vec::new();
    let outcome = (|| -> Result<(), StreamError> {
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for job in group {
            let mut savepoint = tx.savepoint()?;
            let (answer, event, ok) = apply(&savepoint, job, max_append_bytes, now);
            if ok {
                savepoint.commit()?;
                events.extend(event);
            } else {
                savepoint.rollback()?;
                savepoint.commit()?;
            }
            answers.push(answer);
        }
        tx.commit()?;
        Ok(())
    })();
    if let Err(err) = outcome {
        tracing::error!(error = %err, "stream store commit failed");
        for answer in answers.iter_mut() {
            answer.fail(&err);
        }
        events.clear();
    }
    // Signal first, so the `committed` feed never lags a caller that has
    // already heard its answer.
    for event in events {
        match event {
            Event::Committed(committed) => notifier.commit(committed),
            Event::Deleted(path) => notifier.touch(&path),
        }
    }
    for answer in answers {
        answer.send();
    }
}

enum Event {
    Committed(Committed),
    Deleted(String),
}

impl Answer {
    /// Replaces a success with the commit failure: nothing was written.
    fn fail(&mut self, err: &StreamError) {
        match self {
            Answer::Created(_, r) => *r = Err(err.clone()),
            Answer::Appended(_, r) => *r = Err(err.clone()),
            Answer::Deleted(_, r) => *r = Err(err.clone()),
            Answer::None => {}
        }
    }

    fn send(self) {
        // A caller that stopped waiting is not an error.
        match self {
            Answer::Created(tx, r) => drop(tx.send(r)),
            Answer::Appended(tx, r) => drop(tx.send(r)),
            Answer::Deleted(tx, r) => drop(tx.send(r)),
            Answer::None => {}
        }
    }
}

/// Applies one job; returns its answer, its change event, and whether its
/// writes are to be kept.
fn apply(
    conn: &Connection,
    job: Job,
    max_append_bytes: usize,
    now: i64,
) -> (Answer, Option<Event>, bool) {
    match job {
        Job::Create {
            path,
            config,
            initial,
            reply,
        } => {
            let result = create(conn, &path, config, initial, max_append_bytes, now);
            let event = result.as_ref().ok().filter(|c| c.created).map(|c| {
                Event::Committed(Committed {
                    path: path.to_string(),
                    tail: c.info.tail,
                    closed: c.info.closed,
                })
            });
            let ok = result.is_ok();
            (Answer::Created(reply, result), event, ok)
        }
        Job::Append {
            path,
            append,
            reply,
        } => {
            let result = append_to(conn, &path, append, max_append_bytes, now);
            let event = result.as_ref().ok().filter(|a| !a.duplicate).map(|a| {
                Event::Committed(Committed {
                    path: path.to_string(),
                    tail: a.next_offset,
                    closed: a.closed,
                })
            });
            let ok = result.is_ok();
            (Answer::Appended(reply, result), event, ok)
        }
        Job::Fork { path, fork, reply } => {
            let result = fork_to(conn, &path, &fork, max_append_bytes, now);
            let event = result.as_ref().ok().filter(|c| c.created).map(|c| {
                Event::Committed(Committed {
                    path: path.to_string(),
                    tail: c.info.tail,
                    closed: c.info.closed,
                })
            });
            let ok = result.is_ok();
            (Answer::Created(reply, result), event, ok)
        }
        Job::Delete { path, reply } => {
            let result = delete(conn, &path, now);
            let ok = result.is_ok();
            (
                Answer::Deleted(reply, result),
                ok.then(|| Event::Deleted(path.to_string())),
                ok,
            )
        }
        Job::Touch { path } => {
            let ok = touch(conn, &path, now).is_ok();
            (Answer::None, None, ok)
        }
    }
}

/// The live row at `path`; an expired row is removed and reads as absent.
fn live(conn: &Connection, path: &StreamPath, now: i64) -> Result<schema::StreamRow, StreamError> {
    match schema::load(conn, path.as_str())? {
        Some(row) if row.soft_deleted => Err(StreamError::SoftDeleted {
            path: path.to_string(),
        }),
        Some(row) if !expired(&row.head.config, row.accessed_ms, now) => Ok(row),
        Some(row) => {
            schema::remove(conn, row.id, path.as_str(), false, now)?;
            release(conn, row.origin, now)?;
            Err(StreamError::NotFound {
                path: path.to_string(),
            })
        }
        None if schema::is_tombstoned(conn, path.as_str())? => Err(StreamError::Gone {
            path: path.to_string(),
        }),
        None => Err(StreamError::NotFound {
            path: path.to_string(),
        }),
    }
}

fn create(
    conn: &Connection,
    path: &StreamPath,
    config: StreamConfig,
    initial: Payload,
    max_append_bytes: usize,
    now: i64,
) -> Result<Created, StreamError> {
    let messages = split(initial, config.is_json(), max_append_bytes, true)?;
    match live(conn, path, now) {
        Ok(row) => {
            row.head.check_recreate(path.as_str(), &config)?;
            return Ok(Created {
                created: false,
                info: row.head.info(path.as_str()),
            });
        }
        Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => {}
        Err(other) => return Err(other),
    }
    let mut head = Head::new(config);
    let id = schema::insert(conn, path.as_str(), &head, now)?;
    schema::insert_messages(conn, id, 0, &messages)?;
    head.push(&messages);
    schema::update(conn, id, &head, now)?;
    Ok(Created {
        created: true,
        info: head.info(path.as_str()),
    })
}

fn append_to(
    conn: &Connection,
    path: &StreamPath,
    mut append: Append,
    max_append_bytes: usize,
    now: i64,
) -> Result<Appended, StreamError> {
    let row = live(conn, path, now)?;
    let mut head = row.head;
    // The rules read the append's conditions, never its payload.
    let payload = std::mem::replace(&mut append.payload, Payload::empty());
    let messages: Vec<Bytes> = split(payload, head.config.is_json(), max_append_bytes, false)?;
    let stored = match &append.producer {
        Some(p) => schema::producer(conn, row.id, &p.id)?,
        None => None,
    };
    let (producer, close) = match decide(path.as_str(), &head, stored, &append, messages.len())? {
        Decision::Acknowledge(outcome) => {
            // Even a duplicate slides the TTL.
            schema::update(conn, row.id, &head, now)?;
            return Ok(outcome);
        }
        Decision::Write { producer, close } => (producer, close),
    };
    schema::insert_messages(conn, row.id, head.count, &messages)?;
    head.apply(&messages, &append, close);
    schema::update(conn, row.id, &head, now)?;
    if let (Some(position), Some(state)) = (&append.producer, producer) {
        schema::save_producer(conn, row.id, &position.id, state)?;
    }
    Ok(head.appended(producer))
}

fn delete(conn: &Connection, path: &StreamPath, now: i64) -> Result<(), StreamError> {
    let row = live(conn, path, now)?;
    if row.forks > 0 {
        return schema::soft_delete(conn, row.id);
    }
    schema::remove(conn, row.id, path.as_str(), true, now)?;
    release(conn, row.origin, now)
}

/// Drops a removed fork's reference to its source, removing sources that
/// were soft-deleted and have no forks left (up the chain).
fn release(conn: &Connection, mut origin: Option<ForkOrigin>, now: i64) -> Result<(), StreamError> {
    while let Some(ForkOrigin { source, .. }) = origin.take() {
        let Some(row) = schema::load(conn, &source)? else {
            return Ok(());
        };
        schema::add_forks(conn, row.id, -1)?;
        if row.soft_deleted && row.forks <= 1 {
            schema::remove(conn, row.id, &source, true, now)?;
            origin = row.origin;
        }
    }
    Ok(())
}

fn fork_to(
    conn: &Connection,
    path: &StreamPath,
    fork: &Fork,
    max_append_bytes: usize,
    now: i64,
) -> Result<Created, StreamError> {
    let source = live(conn, &fork.source, now)?;
    let planned = plan(fork, &source.head.config, source.head.tail(), |p| {
        schema::message_at(conn, source.id, p)
    })?;
    match live(conn, path, now) {
        Ok(row) => {
            check_refork(
                path.as_str(),
                &row.head.config,
                row.origin.as_ref(),
                &planned,
            )?;
            return Ok(Created {
                created: false,
                info: row.head.info(path.as_str()),
            });
        }
        Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => {}
        Err(other) => return Err(other),
    }
    let initial = split(
        fork.initial.clone(),
        planned.config.is_json(),
        max_append_bytes,
        true,
    )?;
    let mut head = Head::new(planned.config);
    let id = schema::insert(conn, path.as_str(), &head, now)?;
    schema::copy_messages(conn, source.id, id, planned.inherit)?;
    let mut next = planned.inherit;
    if let Some(partial) = &planned.partial {
        schema::insert_messages(conn, id, next, std::slice::from_ref(partial))?;
        next += 1;
    }
    schema::insert_messages(conn, id, next, &initial)?;
    (head.count, head.bytes) = schema::size(conn, id)?;
    schema::update(conn, id, &head, now)?;
    schema::set_origin(conn, id, &planned.origin)?;
    schema::add_forks(conn, source.id, 1)?;
    Ok(Created {
        created: true,
        info: head.info(path.as_str()),
    })
}

fn touch(conn: &Connection, path: &StreamPath, now: i64) -> Result<(), StreamError> {
    let row = live(conn, path, now)?;
    schema::update(conn, row.id, &row.head, now)
}
