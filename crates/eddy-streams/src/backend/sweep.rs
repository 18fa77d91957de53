//! [`Storage::sweep`](crate::Storage::sweep) over a [`Backend`]: one step
//! is what the backend's `sweepable` finds and the expired producer
//! states its `sweep_expired_producers` drops, removed by the engine in
//! one unit, committed once (a unit that wrote nothing costs no commit).

use super::retry::Retry;
use super::storage::Inner;
use super::{Backend, Commit, Unit};
use crate::record::RecordReader;
use crate::StreamError;

/// One sweep step of at most `max` streams and `max` tombstones; how
/// many it removed. A step that lost a race to another writer looks
/// again, as a write does.
pub(super) async fn step<B: Backend>(inner: &Inner<B>, max: usize) -> Result<usize, StreamError> {
    let mut retry = Retry::start(inner.options.contention_timeout);
    loop {
        let mut unit = inner.backend.open();
        let (now, below) = (inner.engine.now_ms(), inner.engine.sweep_floor());
        let found = unit.sweepable(now, below, max).await?;
        let swept = inner.engine.sweep(&mut unit, &found, true).await?;
        let producers = inner.engine.sweep_producers(&mut unit, max).await?;
        if let Some(overflow) = unit.overflow() {
            return Err(overflow);
        }
        match inner.backend.commit(unit).await? {
            Commit::Done => {
                for path in &swept.streams {
                    inner.notifier.touch(path);
                }
                let producers = usize::try_from(producers).unwrap_or(usize::MAX);
                return Ok(swept.count().saturating_add(producers));
            }
            Commit::Conflict => retry.lost().await?,
        }
    }
}
