//! [`Storage::sweep`](crate::Storage::sweep) over a [`Backend`]: one step
//! is what the backend's `sweepable` finds, removed by the engine in one
//! unit, committed once.

use super::storage::Inner;
use super::{group, Backend, Commit, Unit};
use crate::record::RecordReader;
use crate::StreamError;

/// One sweep step of at most `max` streams and `max` tombstones; how
/// many it removed. A step that lost a race to another writer looks
/// again, as a write does.
pub(super) async fn step<B: Backend>(inner: &Inner<B>, max: usize) -> Result<usize, StreamError> {
    let mut pause = group::FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        let mut unit = inner.backend.open();
        let (now, below) = (inner.engine.now_ms(), inner.engine.sweep_floor());
        let found = unit.sweepable(now, below, max).await?;
        if found.is_empty() {
            return Ok(0);
        }
        let swept = inner.engine.sweep(&mut unit, &found).await?;
        if let Some(overflow) = unit.overflow() {
            return Err(overflow);
        }
        match inner.backend.commit(unit).await? {
            Commit::Done => {
                for path in &swept.streams {
                    inner.notifier.touch(path);
                }
                return Ok(swept.count());
            }
            Commit::Conflict if attempt < inner.options.max_attempts => {
                attempt += 1;
                pause = group::pause(pause).await;
            }
            Commit::Conflict => return Err(group::contended(attempt)),
        }
    }
}
