//! Group commit of appends on PostgreSQL.
//!
//! Every append of a store goes to one writer task. It takes every append
//! waiting in its queue (up to [`MAX_GROUP`]), decides each with the
//! engine over its copy of the stream records (`copy.rs`, loading in one
//! statement the streams it does not hold), and writes the whole group in
//! one statement (`statement.rs`), which PostgreSQL runs as one
//! transaction: one `COMMIT`, one WAL flush, however many appends and
//! streams. Each append is answered only after that statement returned,
//! and readers are woken then.
//!
//! The statement writes a stream only if its row is still at the version
//! the group decided on, and locks the rows it writes in id order: writers
//! in other processes (or this store's own transactions) take turns with
//! it, and a stream another writer changed meanwhile is not written. Its
//! appends are decided again on a fresh load in the next group; an append
//! that lost that race [`MAX_TRIES`] times is handed back to its caller,
//! which appends in a transaction of its own that locks the row first.
//!
//! A statement that fails writes nothing (it is one transaction): every
//! append of the group is answered with a retryable error, and the copy
//! is forgotten (after a lost connection the outcome is unknown; a
//! producer's retry is deduplicated either way). A statement that lost a
//! race PostgreSQL detected (a deadlock with a host's transaction, say)
//! runs its appends again instead.

mod copy;
mod records;
mod stale;
mod statement;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::connections::{broken, Connections};
use super::error::{is_conflict, pg_error};
use super::transaction::Wiring;
use crate::cache::Change as CacheChange;
use crate::payload::Split;
use crate::{Append, Appended, StreamError, StreamPath};
use copy::Copy;
use records::{Draft, Drafts, GroupRecords};
pub(super) use stale::Stale;
use statement::Announce;

/// The most appends one statement writes.
const MAX_GROUP: usize = 256;
/// How often an append is decided again after its stream changed under
/// it before it is handed back to its caller.
const MAX_TRIES: u32 = 4;
/// The writer's queue holds at most this much payload, in KiB.
const QUEUE_KIB: u32 = 64 * 1024;

/// An append's answer from the writer.
pub(super) enum Outcome {
    /// Decided and, when it wrote, committed.
    Done(Result<Appended, StreamError>),
    /// Its stream kept changing under the group, or it is a new producer
    /// at the stream's cap: the caller appends in a transaction of its own
    /// (which drops the stream's expired producers first).
    Contended(Append),
}

/// One append waiting for the writer.
struct Job {
    path: StreamPath,
    append: Append,
    split: Option<Split>,
    tries: u32,
    reply: oneshot::Sender<Outcome>,
    /// Its room in the queue, given back once it is answered.
    _room: OwnedSemaphorePermit,
}

/// The store's handle on its writer task.
#[derive(Debug)]
pub(super) struct Writer {
    jobs: std::sync::Mutex<Option<mpsc::UnboundedSender<Job>>>,
    queue: Arc<Semaphore>,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts the writer of `wiring`'s store, on a connection of its own
    /// from `connection`.
    pub fn start(wiring: Arc<Wiring>, connection: Arc<Connections>) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(receiver, wiring, connection));
        Writer {
            jobs: std::sync::Mutex::new(Some(sender)),
            queue: Arc::new(Semaphore::new(QUEUE_KIB as usize)),
            task: std::sync::Mutex::new(Some(task)),
        }
    }

    /// Queues an append and waits for its answer.
    pub async fn append(
        &self,
        path: &StreamPath,
        append: Append,
        split: Option<Split>,
    ) -> Result<Outcome, StreamError> {
        let kib = u32::try_from(append.payload.len() / 1024 + 1)
            .map_or(QUEUE_KIB, |kib| kib.min(QUEUE_KIB));
        let room = Arc::clone(&self.queue)
            .acquire_many_owned(kib)
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            path: path.clone(),
            append,
            split,
            tries: 0,
            reply,
            _room: room,
        };
        {
            let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let jobs = jobs
                .as_ref()
                .ok_or_else(|| StreamError::internal("the stream store is closed"))?;
            // Counted before it is sent, so the writer never takes it first.
            crate::metrics::queued();
            if jobs.send(job).is_err() {
                crate::metrics::dequeued(1);
                return Err(StreamError::internal("the stream store's writer stopped"));
            }
        }
        answer
            .await
            .map_err(|_| StreamError::internal("the stream store's writer stopped"))
    }

    /// Stops taking appends and waits until the queued ones are answered.
    pub async fn close(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "the stream store's writer failed");
            }
        }
    }
}

/// The writer task: one group at a time until the store is closed and its
/// queue is empty.
///
/// A group waits a little for the callers the previous group answered:
/// with one statement in flight, callers otherwise split into two cohorts
/// that take turns (one waits for the statement while the other's next
/// appends queue), each group carrying half of them, and every group
/// costs a WAL flush. So when fewer appends are queued than the previous
/// group answered plus those that queued meanwhile, the writer waits for
/// the rest at most a quarter of the previous statement's time (and at
/// most [`MAX_GATHER`]): a caller appending alone never waits, as the
/// estimate is then its own append.
async fn run(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    wiring: Arc<Wiring>,
    connection: Arc<Connections>,
) {
    let mut writer = GroupWriter {
        wiring,
        connection,
        copy: Copy::default(),
    };
    let mut again = Vec::new();
    // How many appends the next group may expect, and for how long.
    let (mut expected, mut gather) = (0, Duration::ZERO);
    loop {
        let mut group: Vec<Job> = std::mem::take(&mut again);
        if group.is_empty() {
            match jobs.recv().await {
                Some(job) => {
                    crate::metrics::dequeued(1);
                    group.push(job);
                }
                None => return,
            }
        }
        take_queued(&mut jobs, &mut group);
        let until = tokio::time::Instant::now() + gather;
        while group.len() < expected.min(MAX_GROUP) {
            match tokio::time::timeout_at(until, jobs.recv()).await {
                Ok(Some(job)) => {
                    crate::metrics::dequeued(1);
                    group.push(job);
                    take_queued(&mut jobs, &mut group);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let size = group.len();
        let started = Instant::now();
        again = writer.write(group).await;
        expected = size - again.len() + jobs.len();
        gather = (started.elapsed() / 4).min(MAX_GATHER);
    }
}

/// The longest a group waits for appends to join it.
const MAX_GATHER: Duration = Duration::from_millis(1);

/// Moves the appends waiting in the queue into `group`, up to its bound.
fn take_queued(jobs: &mut mpsc::UnboundedReceiver<Job>, group: &mut Vec<Job>) {
    while group.len() < MAX_GROUP {
        match jobs.try_recv() {
            Ok(job) => {
                crate::metrics::dequeued(1);
                group.push(job);
            }
            Err(_) => break,
        }
    }
}

/// What the writer task keeps between groups.
struct GroupWriter {
    wiring: Arc<Wiring>,
    connection: Arc<Connections>,
    copy: Copy,
}

/// A job after the engine decided it.
struct Decided {
    job: Job,
    /// Its stream's key, when it was loaded.
    key: Option<i64>,
    outcome: Result<Appended, StreamError>,
}

impl GroupWriter {
    /// Decides and commits one group; returns the appends to decide again.
    async fn write(&mut self, group: Vec<Job>) -> Vec<Job> {
        let stale = self.wiring.stale.take();
        if stale.all {
            self.copy.clear();
        }
        for path in &stale.paths {
            self.copy.remove(path);
        }
        let mut lease = match self.connection.acquire().await {
            Ok(lease) => lease,
            Err(err) => {
                refuse(group, &err);
                return Vec::new();
            }
        };
        let conn = match lease.conn() {
            Ok(conn) => conn,
            Err(err) => {
                refuse(group, &err);
                return Vec::new();
            }
        };
        if let Err(err) = self.prefetch(conn, &group).await {
            // Nothing was decided or written. On a connection the database
            // had ended, the group runs again on a fresh one; otherwise it
            // is answered as the database answered the load.
            self.copy.clear();
            if broken(&err) {
                return group.into_iter().filter_map(again).collect();
            }
            refuse(group, &pg_error("cannot load the streams of a group", err));
            return Vec::new();
        }
        let wiring = Arc::clone(&self.wiring);
        let mut drafts = Drafts::default();
        let mut decided = Vec::with_capacity(group.len());
        for job in group {
            let mut records = GroupRecords {
                copy: &self.copy,
                drafts: &mut drafts,
                conn: &mut *conn,
                sql: &wiring.sql,
                touches: &wiring.touches,
            };
            // The job keeps its append, for a caller that appends again.
            let outcome = wiring
                .engine
                .append(
                    &mut records,
                    &job.path,
                    job.append.clone(),
                    job.split.clone(),
                )
                .await;
            if let Err(StreamError::TooManyProducers { .. }) = &outcome {
                // The group cannot drop the stream's expired producers to
                // make room: the caller's own transaction decides.
                let Job { append, reply, .. } = job;
                let _ = reply.send(Outcome::Contended(append));
                continue;
            }
            let key = drafts.key(job.path.as_str());
            let outcome = outcome.map(|(appended, head)| {
                if let (Some(_), Some(key)) = (head, key) {
                    if let Some(draft) = drafts.by_key.get_mut(&key) {
                        draft.changes += 1;
                    }
                }
                appended
            });
            decided.push(Decided { job, key, outcome });
        }
        let drafts = drafts.take();
        let announce = Announce {
            channel: &wiring.channel,
            prefix: &wiring.notice_prefix,
            markers: &wiring.markers,
        };
        let started = Instant::now();
        let committed = if drafts.is_empty() {
            Ok(HashSet::new())
        } else {
            statement::commit(conn, &wiring.sql, &drafts, &announce).await
        };
        lease.finished(&committed);
        match committed {
            Ok(confirmed) => {
                if drafts.iter().any(|d| d.written) {
                    crate::metrics::committed(decided.len(), started.elapsed());
                }
                self.confirm(drafts, &confirmed, decided)
            }
            Err(err) if is_conflict(&err) => {
                for draft in &drafts {
                    self.copy.remove(&draft.path);
                }
                decided.into_iter().filter_map(|d| again(d.job)).collect()
            }
            Err(err) => {
                self.copy.clear();
                let err = StreamError::unavailable_from(
                    "the group commit of this append failed, and wrote nothing of its group",
                    pg_error("a group commit failed", err),
                );
                tracing::error!(error = %err, "stream store group commit failed");
                for d in decided {
                    let _ = d.job.reply.send(Outcome::Done(Err(err.clone())));
                }
                Vec::new()
            }
        }
    }

    /// Loads, in one statement, the streams of `group` that the copy does
    /// not hold or holds as not live (the database may say otherwise),
    /// with the producers its appends name.
    async fn prefetch(
        &mut self,
        conn: &mut sqlx::PgConnection,
        group: &[Job],
    ) -> Result<(), sqlx::Error> {
        let now = self.wiring.engine.now_ms();
        let touches = &self.wiring.touches;
        let mut paths: Vec<String> = Vec::new();
        let mut wanted = Vec::new();
        for job in group {
            let path = job.path.as_str();
            let fresh = self.copy.get(path).is_some_and(|known| {
                let mut record = known.record.clone();
                record.accessed_ms = touches.accessed(known.key, record.accessed_ms);
                record.is_live(now)
            });
            if fresh {
                continue;
            }
            if !paths.iter().any(|p| p == path) {
                paths.push(path.to_owned());
            }
            if let Some(producer) = &job.append.producer {
                wanted.push((path.to_owned(), producer.id.clone()));
            }
        }
        if paths.is_empty() {
            return Ok(());
        }
        for path in &paths {
            self.copy.remove(path);
        }
        for (path, known) in statement::load(conn, &self.wiring.sql, &paths, &wanted).await? {
            self.copy.insert(path, known);
        }
        Ok(())
    }

    /// After the statement: keeps what it confirmed, answers those
    /// appends, wakes their readers; returns the others to decide again.
    fn confirm(
        &mut self,
        drafts: Vec<Draft>,
        confirmed: &HashSet<i64>,
        decided: Vec<Decided>,
    ) -> Vec<Job> {
        let wiring = &self.wiring;
        let mut changes = Vec::new();
        let mut heads = Vec::new();
        for draft in drafts {
            if !confirmed.contains(&draft.base.key) {
                self.copy.remove(&draft.path);
                continue;
            }
            let key = draft.base.key;
            if !draft.messages.is_empty() {
                changes.push(CacheChange::Messages {
                    key,
                    path: draft.path.clone(),
                    first: draft.base.record.head.count,
                    messages: draft.messages.clone(),
                });
            }
            if draft.written {
                changes.push(CacheChange::Record {
                    key,
                    path: draft.path.clone(),
                    record: draft.record.clone(),
                });
            }
            if draft.changes > 0 {
                heads.push((draft.path.clone(), draft.record.head.clone()));
            }
            let (path, known) = draft.confirmed();
            self.copy.insert(path, known);
        }
        wiring.cache.apply(changes);
        // Readers first, so the `committed` feed never lags a caller that
        // has already heard its answer.
        for (path, head) in &heads {
            wiring.notifier.publish_head(path, head);
        }
        let mut retry = Vec::new();
        for d in decided {
            let stands = match d.key {
                Some(key) => confirmed.contains(&key),
                // Decided without a record of its stream (not found): the
                // database said so in this group.
                None => true,
            };
            if stands {
                let _ = d.job.reply.send(Outcome::Done(d.outcome));
            } else {
                retry.extend(again(d.job));
            }
        }
        retry
    }
}

/// The job to decide again, unless it lost too often: then it goes back
/// to its caller.
fn again(mut job: Job) -> Option<Job> {
    job.tries += 1;
    if job.tries < MAX_TRIES {
        return Some(job);
    }
    let Job { append, reply, .. } = job;
    let _ = reply.send(Outcome::Contended(append));
    None
}

/// Answers every job of `group` with `err`.
fn refuse(group: Vec<Job>, err: &StreamError) {
    for job in group {
        let _ = job.reply.send(Outcome::Done(Err(err.clone())));
    }
}
