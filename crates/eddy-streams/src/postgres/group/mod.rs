//! Group commit of appends and creates on PostgreSQL.
//!
//! Every append and create of a store goes to one writer task. It takes
//! every call waiting in its queue (up to [`MAX_GROUP`]), decides each
//! with the engine over its copy of the stream records (`copy.rs`, loading
//! in one statement the streams it does not hold, and the tombstones of
//! the paths that hold none), and writes the whole group in one statement
//! (`statement.rs`), which PostgreSQL runs as one transaction: one
//! `COMMIT`, one WAL flush, however many calls and streams. Each call is
//! answered only after that statement returned, and readers are woken
//! then. A stream the group creates is inserted by that statement where
//! its path is still free as the group saw it; a create that must first
//! collect a dead stream at its path goes back to its caller, whose
//! transaction removes rows (the group never does).
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::connections::{broken, Connections};
use super::error::{is_conflict, pg_error};
use super::transaction::Wiring;
use crate::cache::Change as CacheChange;
use crate::payload::Split;
use crate::{Append, Appended, Created, Payload, StreamConfig, StreamError, StreamPath};
use copy::Copy;
use records::{Absent, Draft, Drafts, GroupRecords};
pub(super) use stale::Stale;
use statement::Announce;

/// The most appends and creates one statement writes.
const MAX_GROUP: usize = 256;
/// How often a call is decided again after its stream changed under
/// it before it is handed back to its caller.
const MAX_TRIES: u32 = 4;
/// The writer's queue holds at most this much payload, in KiB.
const QUEUE_KIB: u32 = 64 * 1024;

/// A caller's answer from the writer.
pub(super) enum Outcome<T, W> {
    /// Decided and, when it wrote, committed.
    Done(Result<T, StreamError>),
    /// The group could not decide it: its stream kept changing under the
    /// group, an append is a new producer at the stream's cap, or a create
    /// must first collect a dead stream at its path. The caller runs it in
    /// a transaction of its own (which locks what it decides on, and may
    /// remove rows).
    Contended(W),
}

/// A create for the writer: the stream's configuration and first messages.
#[derive(Clone, Debug)]
pub(super) struct Create {
    pub config: StreamConfig,
    pub initial: Payload,
}

/// What a job asks for, and where its answer goes.
enum Work {
    Append {
        append: Append,
        split: Option<Split>,
        reply: oneshot::Sender<Outcome<Appended, Append>>,
    },
    Create {
        create: Create,
        reply: oneshot::Sender<Outcome<Created, Create>>,
    },
}

/// One append or create waiting for the writer.
struct Job {
    path: StreamPath,
    work: Work,
    tries: u32,
    /// Its room in the queue, given back once it is answered.
    _room: OwnedSemaphorePermit,
}

impl Job {
    /// Hands the job back to its caller, to run in a transaction.
    fn contended(self) {
        match self.work {
            Work::Append { append, reply, .. } => {
                let _ = reply.send(Outcome::Contended(append));
            }
            Work::Create { create, reply } => {
                let _ = reply.send(Outcome::Contended(create));
            }
        }
    }

    /// Answers the job with `err`.
    fn refuse(self, err: StreamError) {
        match self.work {
            Work::Append { reply, .. } => {
                let _ = reply.send(Outcome::Done(Err(err)));
            }
            Work::Create { reply, .. } => {
                let _ = reply.send(Outcome::Done(Err(err)));
            }
        }
    }

    /// Answers the job with what the group decided for it.
    fn answer(self, decision: Decision) {
        match (self.work, decision) {
            (Work::Append { reply, .. }, Decision::Appended(outcome)) => {
                let _ = reply.send(Outcome::Done(outcome));
            }
            (Work::Create { reply, .. }, Decision::Created(outcome)) => {
                let _ = reply.send(Outcome::Done(outcome));
            }
            (work, _) => Job { work, ..self }.refuse(StreamError::internal(
                "the group decided a job as another kind",
            )),
        }
    }
}

/// What the engine decided for a job.
enum Decision {
    Appended(Result<Appended, StreamError>),
    Created(Result<Created, StreamError>),
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
    ) -> Result<Outcome<Appended, Append>, StreamError> {
        let bytes = append.payload.len();
        self.submit(path, bytes, |reply| Work::Append {
            append,
            split,
            reply,
        })
        .await
    }

    /// Queues a create and waits for its answer.
    pub async fn create(
        &self,
        path: &StreamPath,
        create: Create,
    ) -> Result<Outcome<Created, Create>, StreamError> {
        let bytes = create.initial.len();
        self.submit(path, bytes, |reply| Work::Create { create, reply })
            .await
    }

    /// Queues the job `work` makes (of `bytes` of payload) and waits for
    /// its answer.
    async fn submit<T, W>(
        &self,
        path: &StreamPath,
        bytes: usize,
        work: impl FnOnce(oneshot::Sender<Outcome<T, W>>) -> Work,
    ) -> Result<Outcome<T, W>, StreamError> {
        let kib = u32::try_from(bytes / 1024 + 1).map_or(QUEUE_KIB, |kib| kib.min(QUEUE_KIB));
        let room = Arc::clone(&self.queue)
            .acquire_many_owned(kib)
            .await
            .map_err(|_| StreamError::internal("the stream store is closed"))?;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            path: path.clone(),
            work: work(reply),
            tries: 0,
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
    /// Its stream's key, when it was loaded or created.
    key: Option<i64>,
    decision: Decision,
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
        let absent = match self.prefetch(conn, &group).await {
            Ok(absent) => absent,
            Err(err) => {
                // Nothing was decided or written. On a connection the
                // database had ended, the group runs again on a fresh one;
                // otherwise it is answered as the database answered the load.
                self.copy.clear();
                if broken(&err) {
                    return group.into_iter().filter_map(again).collect();
                }
                refuse(group, &pg_error("cannot load the streams of a group", err));
                return Vec::new();
            }
        };
        let wiring = Arc::clone(&self.wiring);
        let mut drafts = Drafts::new(absent);
        let mut decided = Vec::with_capacity(group.len());
        for job in group {
            let mut records = GroupRecords {
                copy: &self.copy,
                drafts: &mut drafts,
                conn: &mut *conn,
                sql: &wiring.sql,
                touches: &wiring.touches,
                undecidable: false,
            };
            // The job keeps its request, for a caller that runs it again.
            let decision = match &job.work {
                Work::Append { append, split, .. } => Decision::Appended(
                    wiring
                        .engine
                        .append(&mut records, &job.path, append.clone(), split.clone())
                        .await
                        .map(|(appended, head)| {
                            records.wrote(job.path.as_str(), head.is_some());
                            appended
                        }),
                ),
                Work::Create { create, .. } => Decision::Created(
                    wiring
                        .engine
                        .create(
                            &mut records,
                            &job.path,
                            create.config.clone(),
                            create.initial.clone(),
                        )
                        .await
                        .inspect(|created| records.wrote(job.path.as_str(), created.created)),
                ),
            };
            let refused = match &decision {
                Decision::Appended(outcome) => outcome.as_ref().err(),
                Decision::Created(outcome) => outcome.as_ref().err(),
            };
            // A new producer at the stream's cap (its expired producers
            // must go first), or a dead stream to collect before a create:
            // writes that only the caller's own transaction makes.
            let undecidable = records.undecidable
                || matches!(refused, Some(StreamError::TooManyProducers { .. }));
            if refused.is_some() && undecidable {
                job.contended();
                continue;
            }
            let key = drafts.key(job.path.as_str());
            decided.push(Decided { job, key, decision });
        }
        let drafts = drafts.take();
        let announce = Announce {
            channel: &wiring.channel,
            prefix: &wiring.notice_prefix,
            markers: &wiring.markers,
        };
        let started = Instant::now();
        let committed = if drafts.is_empty() {
            Ok(HashMap::new())
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
                    "the group commit of this call failed, and wrote nothing of its group",
                    pg_error("a group commit failed", err),
                );
                tracing::error!(error = %err, "stream store group commit failed");
                for d in decided {
                    d.job.refuse(err.clone());
                }
                Vec::new()
            }
        }
    }

    /// Loads, in one statement, the streams of `group` that the copy does
    /// not hold or holds as not live (the database may say otherwise),
    /// with the producers its appends name. Returns the paths it found no
    /// stream at, with the incarnation of each one's tombstone (for the
    /// creates).
    ///
    /// A create's first try at a path the copy does not hold loads
    /// nothing: the path is taken as free (no row, no tombstone), which
    /// the statement's insert checks; a create that finds it taken is
    /// decided again on a load. So a group of new streams and appends to
    /// known ones is one statement.
    async fn prefetch(
        &mut self,
        conn: &mut sqlx::PgConnection,
        group: &[Job],
    ) -> Result<Absent, sqlx::Error> {
        let now = self.wiring.engine.now_ms();
        let touches = &self.wiring.touches;
        let mut paths: Vec<String> = Vec::new();
        let mut wanted = Vec::new();
        let mut guessed = Vec::new();
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
            let new = matches!(job.work, Work::Create { .. })
                && job.tries == 0
                && self.copy.get(path).is_none();
            if new {
                guessed.push(path);
                continue;
            }
            if !paths.iter().any(|p| p == path) {
                paths.push(path.to_owned());
            }
            if let Work::Append { append, .. } = &job.work {
                if let Some(producer) = &append.producer {
                    wanted.push((path.to_owned(), producer.id.clone()));
                }
            }
        }
        let mut absent = Absent::new();
        if !paths.is_empty() {
            for path in &paths {
                self.copy.remove(path);
            }
            let loaded = statement::load(conn, &self.wiring.sql, &paths, &wanted).await?;
            for (path, known) in loaded.streams {
                self.copy.insert(path, known);
            }
            absent = loaded.absent;
        }
        // What the load found for a path wins over the guess.
        for path in guessed {
            if !paths.iter().any(|p| p == path) {
                absent.entry(path.to_owned()).or_insert(None);
            }
        }
        Ok(absent)
    }

    /// After the statement: keeps what it confirmed, answers those
    /// appends and creates, wakes their readers; returns the others to
    /// decide again.
    fn confirm(
        &mut self,
        drafts: Vec<Draft>,
        confirmed: &HashMap<i64, i64>,
        decided: Vec<Decided>,
    ) -> Vec<Job> {
        let wiring = &self.wiring;
        let mut changes = Vec::new();
        let mut heads = Vec::new();
        for draft in drafts {
            // A stream the group created has its row id only now.
            let Some(&key) = confirmed.get(&draft.base.key) else {
                self.copy.remove(&draft.path);
                continue;
            };
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
            let (path, known) = draft.confirmed(key);
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
                Some(key) => confirmed.contains_key(&key),
                // Decided without a record of its stream (not found): the
                // database said so in this group.
                None => true,
            };
            if stands {
                d.job.answer(d.decision);
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
    job.contended();
    None
}

/// Answers every job of `group` with `err`.
fn refuse(group: Vec<Job>, err: &StreamError) {
    for job in group {
        job.refuse(err.clone());
    }
}
