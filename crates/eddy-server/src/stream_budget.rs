//! The cap on streams per server: creates and forks reserve a slot before
//! they reach the store and keep it only when they made a stream.
//!
//! The count starts from the store's count (`Storage::count`: a listing,
//! or on DynamoDB the directory's entries alone) and then follows this
//! server's creates and deletes. Streams that expire (or that another
//! writer of the store deletes) leave it too high, so a create that would
//! pass the cap counts the store again — at most once a second, so a
//! client hammering the cap does not make every request a full listing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use eddy_streams::Storage;
use tokio::sync::OnceCell;

use crate::error::ApiError;

/// How often a create at the cap may count the store again.
const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// The streams of one server against its cap.
pub(crate) struct StreamBudget {
    limit: usize,
    count: OnceCell<AtomicUsize>,
    last_recount: Mutex<Option<Instant>>,
}

/// A reserved slot: released on drop unless [`kept`](Slot::kept).
pub(crate) struct Slot<'a> {
    budget: &'a StreamBudget,
    kept: bool,
}

impl StreamBudget {
    pub(crate) fn new(limit: usize) -> Self {
        StreamBudget {
            limit,
            count: OnceCell::new(),
            last_recount: Mutex::new(None),
        }
    }

    /// Reserves a slot for one more stream, or refuses with the limit.
    pub(crate) async fn reserve(&self, store: &dyn Storage) -> Result<Slot<'_>, ApiError> {
        let count = self
            .count
            .get_or_try_init(|| async { Ok::<_, ApiError>(AtomicUsize::new(stored(store).await?)) })
            .await?;
        if count.fetch_add(1, Ordering::AcqRel) < self.limit {
            return Ok(Slot {
                budget: self,
                kept: false,
            });
        }
        count.fetch_sub(1, Ordering::AcqRel);
        if self.may_recount() {
            count.store(stored(store).await?, Ordering::Release);
            if count.fetch_add(1, Ordering::AcqRel) < self.limit {
                return Ok(Slot {
                    budget: self,
                    kept: false,
                });
            }
            count.fetch_sub(1, Ordering::AcqRel);
        }
        Err(ApiError::TooManyStreams { limit: self.limit })
    }

    /// A stream of this server was deleted.
    pub(crate) fn released(&self) {
        if let Some(count) = self.count.get() {
            let _ = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(1))
            });
        }
    }

    fn may_recount(&self) -> bool {
        let mut last = self.last_recount.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < RECOUNT_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }
}

impl Slot<'_> {
    /// The create made a stream: it keeps the slot.
    pub(crate) fn kept(mut self) {
        self.kept = true;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.budget.released();
        }
    }
}

async fn stored(store: &dyn Storage) -> Result<usize, ApiError> {
    Ok(store.count("").await?)
}
