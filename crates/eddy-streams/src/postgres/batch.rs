//! Reads that arrive together share one statement: a task takes every read
//! waiting and runs them as one [`Sql::read`](super::sql::Sql), a row per
//! read, on one of at most [`LANES`] connections at a time. While both
//! lanes are busy, reads queue and make the next statement bigger, so
//! concurrent readers (a burst of catch-up reads, long-poll readers woken
//! together) cost the database a fraction of a statement each.
//!
//! A read waits for a statement sent after it was asked for (it never joins
//! one in flight), so it sees every commit that finished before it began.

use std::sync::Arc;

use sqlx::postgres::PgRow;
use sqlx::Row;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::connections::{broken, Connections};
use super::error::statement_error;
use super::records::query;
use super::sql::{Sql, STREAM_COLUMN_COUNT};
use crate::StreamError;

/// How many read statements run at once.
const LANES: usize = 2;
/// The most reads one statement carries.
const MAX_BATCH: usize = 128;
/// How often a read statement runs on a fresh connection after its
/// connection turned out dead.
const MAX_TRIES: u32 = 3;

/// One read's part of a statement: where its messages start (`fetch`),
/// their byte budget, and whether the first counts whatever its size.
#[derive(Debug)]
pub(super) struct Ask {
    pub path: String,
    pub fetch: u64,
    pub budget: usize,
    pub first: bool,
}

/// A read waiting for its row.
struct Waiting {
    ask: Ask,
    reply: oneshot::Sender<Result<PgRow, StreamError>>,
}

/// The store's handle on its read task.
#[derive(Clone, Debug)]
pub(super) struct Batcher {
    asks: mpsc::UnboundedSender<Waiting>,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.ask.fmt(f)
    }
}

impl Batcher {
    /// Starts the task, reading on `connections` with `sql`. It stops once
    /// the batcher is dropped and the reads queued are answered.
    pub fn start(connections: Arc<Connections>, sql: Arc<Sql>) -> Self {
        let (asks, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, connections, sql));
        Batcher { asks }
    }

    /// The row of `ask`, from the next statement.
    pub async fn fetch(&self, ask: Ask) -> Result<PgRow, StreamError> {
        let (reply, row) = oneshot::channel();
        self.asks
            .send(Waiting { ask, reply })
            .map_err(|_| StreamError::internal("the stream store's reader stopped"))?;
        row.await
            .map_err(|_| StreamError::internal("the stream store's reader stopped"))?
    }
}

async fn run(
    mut queue: mpsc::UnboundedReceiver<Waiting>,
    connections: Arc<Connections>,
    sql: Arc<Sql>,
) {
    let lanes = Arc::new(Semaphore::new(LANES));
    while let Some(first) = queue.recv().await {
        // Taken before the batch is gathered: what queues while every
        // lane is busy joins it.
        let Ok(lane) = Arc::clone(&lanes).acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(waiting) => batch.push(waiting),
                Err(_) => break,
            }
        }
        let (connections, sql) = (Arc::clone(&connections), Arc::clone(&sql));
        tokio::spawn(async move {
            let _lane = lane;
            answer(batch, &connections, &sql).await;
        });
    }
}

/// Runs one statement for `batch` and hands each read its row.
async fn answer(batch: Vec<Waiting>, connections: &Arc<Connections>, sql: &Sql) {
    let rows = statement(&batch, connections, sql).await;
    match rows {
        Ok(mut rows) => {
            for (n, waiting) in batch.into_iter().enumerate() {
                let row = rows[n].take().ok_or_else(|| {
                    StreamError::internal("a read statement left out one of its reads")
                });
                let _ = waiting.reply.send(row);
            }
        }
        Err(err) => {
            for waiting in batch {
                let _ = waiting.reply.send(Err(err.clone()));
            }
        }
    }
}

/// The rows of `batch`, in its order.
async fn statement(
    batch: &[Waiting],
    connections: &Arc<Connections>,
    sql: &Sql,
) -> Result<Vec<Option<PgRow>>, StreamError> {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let paths: Vec<&str> = batch.iter().map(|w| w.ask.path.as_str()).collect();
    let fetches: Vec<i64> = batch.iter().map(|w| signed(w.ask.fetch)).collect();
    let budgets: Vec<i64> = batch.iter().map(|w| signed(w.ask.budget as u64)).collect();
    let firsts: Vec<bool> = batch.iter().map(|w| w.ask.first).collect();
    // A read writes nothing, so it runs again on another connection when
    // its own turned out dead (idle ones all are after the database
    // restarted); other failures are the reads' answer.
    let mut tries = 0;
    let rows = loop {
        let mut lease = connections.acquire().await?;
        let rows = query(&sql.read)
            .bind(&paths)
            .bind(&fetches)
            .bind(&budgets)
            .bind(&firsts)
            .fetch_all(lease.conn()?)
            .await;
        lease.finished(&rows);
        tries += 1;
        match rows {
            Err(err) if broken(&err) && tries < MAX_TRIES => {
                tracing::debug!(error = %err, "a read connection was dead; reading again");
            }
            rows => break rows.map_err(statement_error)?,
        }
    };
    let mut ordered: Vec<Option<PgRow>> = (0..batch.len()).map(|_| None).collect();
    for row in rows {
        let ord: i64 = row
            .try_get(STREAM_COLUMN_COUNT + 3)
            .map_err(statement_error)?;
        let slot = usize::try_from(ord - 1)
            .ok()
            .and_then(|n| ordered.get_mut(n));
        if let Some(slot) = slot {
            *slot = Some(row);
        }
    }
    Ok(ordered)
}
