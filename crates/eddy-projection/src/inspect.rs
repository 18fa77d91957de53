//! Looking at bindings from outside: every binding whose checkpoint lives
//! in a store's checkpoint streams, what it committed, and how far each
//! input's tail is ahead of it. Reads only; for operators' tools (`eddy
//! status`, the console).

use std::sync::Arc;

use eddy_streams::{Offset, ReadFrom, Storage, StreamError, StreamPath};
use serde::{Deserialize, Serialize};

use crate::params::escape;
use crate::{
    wake_marks, Checkpoint, CheckpointStore, Failure, Pending, Result, StreamCheckpoints,
    WakeMarkReport, CHECKPOINT_PREFIX,
};

/// The input name [`inspect`] gives the marked input of a binding that
/// has a wake-up mark and no checkpoint (its input names are unknown).
pub const NOT_RUN_YET: &str = "(not run yet)";

/// The most bytes [`inspect`] reads to count one input's lag in bytes;
/// beyond it the count is a lower bound ([`InputLag::lag_bytes_exact`]).
pub const LAG_SCAN_BYTES: u64 = 16 << 20;

/// What one binding has committed, and how far behind its inputs it is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BindingReport {
    /// The projection id.
    pub projection: String,
    /// The declaration version.
    pub version: u32,
    /// The binding's parameter key (`_` for none).
    pub params: String,
    /// Where its checkpoint lives (in checkpoint streams below this path,
    /// or, with [`checkpoint_table`](Self::checkpoint_table), the path
    /// that names the binding).
    pub checkpoint_path: String,
    /// Its checkpoint lives in a SQL host's checkpoint table, not in
    /// streams.
    #[serde(default)]
    pub checkpoint_table: bool,
    /// Its state, as an operator would name it.
    pub state: BindingHealth,
    /// Units committed so far.
    pub units: u64,
    /// When the last unit settled, in unix milliseconds (checkpoints
    /// written before it was recorded have none).
    pub committed_at_ms: Option<u64>,
    /// The pinned unit that has not settled: its handler failed (an
    /// at-least-once unit waits to be retried) or its worker stopped
    /// mid-unit.
    pub pending: Option<Pending>,
    /// Each input's position against its tail.
    pub inputs: Vec<InputLag>,
    /// Why its last run failed (its handler's error, say), when no unit
    /// settled since.
    pub failure: Option<Failure>,
    /// Why the checkpoint or an input could not be read.
    pub error: Option<String>,
    /// The binding's durable wake-up mark, when its store keeps them
    /// (SQLite, PostgreSQL) and it has one: commits it has not caught up
    /// with (pending), or failed runs that wait (deferred).
    pub wake_mark: Option<WakeMarkReport>,
}

/// A binding's state, from what is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BindingHealth {
    /// Every input's committed offset is its tail.
    CaughtUp,
    /// Some input has messages the binding has not committed.
    Behind,
    /// A unit is pinned and has not settled (see [`BindingReport::pending`]).
    Pinned,
    /// Its last run failed (see [`BindingReport::failure`]; its wake-up
    /// mark may be deferred), or its checkpoint cannot be read (see
    /// [`BindingReport::error`]).
    Failed,
}

/// One input of a binding against its tail.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InputLag {
    /// The input's name in the declaration.
    pub name: String,
    /// The input stream, when the checkpoint records it.
    pub path: Option<String>,
    /// The offset after the last committed item.
    pub offset: Offset,
    /// The input's tail now (`None` when its path is unknown or it is gone).
    pub tail: Option<Offset>,
    /// Messages between the committed offset and the tail.
    pub lag_messages: u64,
    /// Their size in bytes (a lower bound when not
    /// [`lag_bytes_exact`](Self::lag_bytes_exact)).
    pub lag_bytes: u64,
    /// Whether `lag_bytes` counts every lagging message.
    pub lag_bytes_exact: bool,
    /// The input's close is committed.
    pub closed: bool,
    /// The input's deletion is committed.
    pub gone: bool,
}

/// Every binding whose checkpoint lives in `storage`'s checkpoint streams
/// ([`StreamCheckpoints`]) or that has a durable wake-up mark there
/// ([`wake_marks`]), sorted by checkpoint path. A binding whose checkpoint
/// cannot be read is reported as [`BindingHealth::Failed`] rather than
/// failing the whole look. A binding with a mark and no checkpoint has
/// never committed: it is [`Behind`](BindingHealth::Behind) on the input
/// of its mark from the start (or failed, when its mark is deferred).
pub async fn inspect(storage: &Arc<dyn Storage>) -> Result<Vec<BindingReport>> {
    inspect_with(storage, None).await
}

/// [`inspect()`], and the bindings whose checkpoints live in `table` as
/// well: a SQL host's checkpoint table in the same database
/// ([`SqliteCheckpoints`](crate::SqliteCheckpoints), `PgCheckpoints`),
/// whose bindings are marked [`BindingReport::checkpoint_table`].
pub async fn inspect_with(
    storage: &Arc<dyn Storage>,
    table: Option<&dyn CheckpointStore>,
) -> Result<Vec<BindingReport>> {
    let streams = StreamCheckpoints::new(Arc::clone(storage));
    let mut stores: Vec<(&dyn CheckpointStore, bool)> = vec![(&streams, false)];
    stores.extend(table.map(|table| (table, true)));
    let mut marks = wake_marks(storage.as_ref()).await?;
    let mut reports = Vec::new();
    for (checkpoints, in_table) in stores {
        for key in checkpoints.keys().await? {
            let loaded = checkpoints.load(&key).await;
            if matches!(&loaded, Ok(loaded) if in_table && loaded.checkpoint.is_none()) {
                continue; // A forgotten row.
            }
            let mut report = BindingReport::new(
                &key.projection,
                key.version,
                &key.params,
                key.path.to_string(),
            );
            report.checkpoint_table = in_table;
            let mark = marks.iter().position(|m| {
                (m.projection.as_str(), m.version, m.params.as_str())
                    == (key.projection.as_str(), key.version, key.params.as_str())
            });
            report.wake_mark = mark.map(|at| marks.swap_remove(at));
            match loaded {
                Ok(loaded) => {
                    if let Some(checkpoint) = loaded.checkpoint {
                        fill(storage.as_ref(), &mut report, checkpoint).await;
                    }
                }
                Err(err) => {
                    report.state = BindingHealth::Failed;
                    report.error = Some(err.to_string());
                }
            }
            if report
                .wake_mark
                .as_ref()
                .is_some_and(|m| m.deferred_until_ms.is_some())
            {
                report.state = BindingHealth::Failed;
            }
            reports.push(report);
        }
    }
    for mark in marks {
        reports.push(never_committed(storage.as_ref(), mark).await);
    }
    reports.sort_by(|a, b| a.checkpoint_path.cmp(&b.checkpoint_path));
    Ok(reports)
}

impl BindingReport {
    /// The report of a binding before anything is known of it.
    fn new(projection: &str, version: u32, params: &str, checkpoint_path: String) -> Self {
        BindingReport {
            projection: projection.to_owned(),
            version,
            params: params.to_owned(),
            checkpoint_path,
            checkpoint_table: false,
            state: BindingHealth::CaughtUp,
            units: 0,
            committed_at_ms: None,
            pending: None,
            inputs: Vec::new(),
            failure: None,
            error: None,
            wake_mark: None,
        }
    }
}

/// The report of a binding that has a wake-up mark but no checkpoint:
/// its lag on the marked input counts from the start.
async fn never_committed(storage: &dyn Storage, mark: WakeMarkReport) -> BindingReport {
    let path = format!(
        "{CHECKPOINT_PREFIX}/{}/{}/{}",
        escape(&mark.projection),
        mark.version,
        mark.params
    );
    let mut report = BindingReport::new(&mark.projection, mark.version, &mark.params, path);
    report.state = if mark.deferred_until_ms.is_some() {
        BindingHealth::Failed
    } else {
        BindingHealth::Behind
    };
    let mut lag = InputLag {
        name: NOT_RUN_YET.to_owned(),
        path: Some(mark.path.clone()),
        offset: Offset::ZERO,
        tail: None,
        lag_messages: 0,
        lag_bytes: 0,
        lag_bytes_exact: true,
        closed: false,
        gone: false,
    };
    if let Err(err) = measure(storage, &mark.path, &mut lag).await {
        report.error = Some(format!("input {}: {err}", mark.path));
    }
    report.inputs.push(lag);
    report.wake_mark = Some(mark);
    report
}

/// Fills `report` from a loaded checkpoint and its inputs' tails.
async fn fill(storage: &dyn Storage, report: &mut BindingReport, checkpoint: Checkpoint) {
    report.units = checkpoint.units;
    report.committed_at_ms = checkpoint.committed_at_ms;
    let mut behind = false;
    for (name, mark) in checkpoint.inputs {
        let mut lag = InputLag {
            name,
            path: mark.path.clone(),
            offset: mark.offset,
            tail: None,
            lag_messages: 0,
            lag_bytes: 0,
            lag_bytes_exact: true,
            closed: mark.closed,
            gone: mark.gone,
        };
        if let (Some(path), false) = (&mark.path, mark.gone) {
            if let Err(err) = measure(storage, path, &mut lag).await {
                report.error = Some(format!("input `{}` ({path}): {err}", lag.name));
            }
        }
        behind |= lag.lag_messages > 0;
        report.inputs.push(lag);
    }
    report.state = if checkpoint.failure.is_some() {
        BindingHealth::Failed
    } else if checkpoint.pending.is_some() {
        BindingHealth::Pinned
    } else if behind {
        BindingHealth::Behind
    } else {
        BindingHealth::CaughtUp
    };
    report.pending = checkpoint.pending;
    report.failure = checkpoint.failure;
}

/// Reads the input's tail and counts the messages (and, up to
/// [`LAG_SCAN_BYTES`], the bytes) after the committed offset.
async fn measure(storage: &dyn Storage, path: &str, lag: &mut InputLag) -> Result<(), StreamError> {
    let path = StreamPath::new(path)?;
    let info = match storage.head(&path).await {
        Ok(info) => info,
        Err(
            StreamError::NotFound { .. }
            | StreamError::Gone { .. }
            | StreamError::SoftDeleted { .. },
        ) => return Ok(()),
        Err(err) => return Err(err),
    };
    lag.tail = Some(info.tail);
    lag.lag_messages = info.tail.position().saturating_sub(lag.offset.position());
    let mut from = lag.offset;
    while from < info.tail {
        if lag.lag_bytes >= LAG_SCAN_BYTES {
            lag.lag_bytes_exact = false;
            break;
        }
        let chunk = storage.read(&path, ReadFrom::Offset(from), 1 << 20).await?;
        let upto = chunk.next_offset.min(info.tail);
        let take =
            usize::try_from(upto.position().saturating_sub(from.position())).unwrap_or(usize::MAX);
        lag.lag_bytes += chunk
            .messages
            .iter()
            .take(take)
            .map(|m| m.len() as u64)
            .sum::<u64>();
        if chunk.next_offset <= from {
            break;
        }
        from = upto;
    }
    Ok(())
}
