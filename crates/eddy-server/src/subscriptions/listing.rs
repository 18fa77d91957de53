//! Reading subscriptions' streams from the store without reading every
//! stream of their base: the paths of the base page by page
//! ([`Storage::list_paths_page`]: on DynamoDB the directory alone, no
//! record), and then the tails of the paths a subscription watches only,
//! one `head` each.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use eddy_streams::{Storage, StreamError, StreamInfo, StreamPath, MAX_LIST_PAGE};
use futures::{StreamExt, TryStreamExt};

use super::pattern::Pattern;

/// The most tails one slice reads: a base whose watched streams are more
/// is read over several slices, each going on where the last stopped.
pub(super) const SLICE_STREAMS: usize = 1_000;

/// The most paths one slice lists (ten pages).
pub(super) const SLICE_PATHS: usize = 10 * MAX_LIST_PAGE;

/// How many tails are read at once.
const HEADS_AT_ONCE: usize = 16;

/// What a slice does with a path it lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// Nothing: no subscription reading the slice watches it.
    Skip,
    /// Reads its tail: a stream a subscription watches.
    Read,
    /// Keeps it as a candidate: a match of a pattern whose subscription
    /// watches as many as it may, which the caller reads only if the
    /// slice makes room (so no more than the streams it found gone).
    Candidate,
}

/// One slice of a base's listing.
pub(super) struct Slice {
    /// The live streams it read (those wanted with [`Want::Read`]),
    /// sorted by path.
    pub(super) infos: Vec<StreamInfo>,
    /// The paths wanted as [`Want::Candidate`], sorted, not read.
    pub(super) candidates: Vec<String>,
    /// The last path it went over; `None` when it reached the end.
    pub(super) through: Option<String>,
}

/// Where each of several listings goes on: the `through` of its last
/// slice, by name (absent: from the start).
#[derive(Default)]
pub(super) struct Cursors(Mutex<HashMap<String, String>>);

impl Cursors {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where listing `name` goes on.
    pub(super) fn get(&self, name: &str) -> Option<String> {
        self.lock().get(name).cloned()
    }

    /// Sets where listing `name` goes on (`None`: from the start).
    pub(super) fn set(&self, name: &str, cursor: Option<String>) {
        match cursor {
            Some(cursor) => self.lock().insert(name.to_owned(), cursor),
            None => self.lock().remove(name),
        };
    }

    /// Drops the cursors of the listings `kept` says are over.
    pub(super) fn keep(&self, kept: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| kept(name));
    }
}

/// One slice of the paths under `prefix` after `after` (at most
/// [`SLICE_PATHS`]) and the tails of those `want` says to read (at most
/// [`SLICE_STREAMS`]), with the candidates it names: every path to read
/// in `(after, through]` is either read or gone.
pub(super) async fn slice(
    store: &dyn Storage,
    prefix: &str,
    after: Option<&str>,
    want: impl Fn(&str) -> Want,
) -> Result<Slice, StreamError> {
    let mut after = after.map(str::to_owned);
    let (mut read, mut candidates, mut listed) = (Vec::new(), Vec::new(), 0);
    let through = 'listing: loop {
        let page = store
            .list_paths_page(prefix, after.as_deref(), MAX_LIST_PAGE)
            .await?;
        listed += page.paths.len();
        for path in page.paths {
            match want(&path) {
                Want::Skip => {}
                Want::Candidate => candidates.push(path),
                Want::Read => {
                    read.push(path);
                    if read.len() == SLICE_STREAMS {
                        break 'listing read.last().cloned();
                    }
                }
            }
        }
        match page.next {
            Some(next) if listed < SLICE_PATHS => after = Some(next),
            next => break next,
        }
    };
    Ok(Slice {
        infos: live(store, &read, usize::MAX).await?,
        candidates,
        through,
    })
}

/// The streams under `prefix` that `pattern` matches (by their path
/// relative to `prefix`), with their tails; `None` as soon as more than
/// `max` of them are known to be live. Only the paths that start with
/// the pattern's literal prefix are listed, and only the matches are
/// read, at most `max + 1`.
pub(super) async fn matches(
    store: &dyn Storage,
    prefix: &str,
    pattern: &Pattern,
    max: usize,
) -> Result<Option<Vec<StreamInfo>>, StreamError> {
    let listed = format!("{prefix}{}", pattern.literal_prefix());
    let (mut found, mut after) = (Vec::new(), None);
    loop {
        let page = store
            .list_paths_page(&listed, after.as_deref(), MAX_LIST_PAGE)
            .await?;
        let matched: Vec<String> = page
            .paths
            .into_iter()
            .filter(|path| {
                path.strip_prefix(prefix)
                    .is_some_and(|relative| pattern.matches(relative))
            })
            .collect();
        // As many as could still be taken, and one more to know.
        let room = (max + 1).saturating_sub(found.len());
        found.extend(live(store, &matched, room).await?);
        if found.len() > max {
            return Ok(None);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(Some(found)),
        }
    }
}

/// The first `count` live streams at `paths`, in order, with their
/// tails: one `head` each, a few at once, reading no more than it needs
/// while they are live. A path whose stream is gone (it expired or was
/// deleted, and a store that lists paths alone may still list it) is
/// passed over.
pub(super) async fn live(
    store: &dyn Storage,
    paths: &[String],
    count: usize,
) -> Result<Vec<StreamInfo>, StreamError> {
    let (mut found, mut rest) = (Vec::new(), paths);
    while found.len() < count && !rest.is_empty() {
        let (now, later) = rest.split_at((count - found.len()).min(rest.len()));
        let reads: Vec<_> = now.iter().map(|path| head(store, path)).collect();
        let heads: Vec<Option<StreamInfo>> = futures::stream::iter(reads)
            .buffered(HEADS_AT_ONCE)
            .try_collect()
            .await?;
        found.extend(heads.into_iter().flatten());
        rest = later;
    }
    Ok(found)
}

/// The live stream at `path`, if there is one.
async fn head(store: &dyn Storage, path: &str) -> Result<Option<StreamInfo>, StreamError> {
    match store.head(&StreamPath::new(path)?).await {
        Ok(info) => Ok(Some(info)),
        Err(
            StreamError::NotFound { .. }
            | StreamError::Gone { .. }
            | StreamError::SoftDeleted { .. },
        ) => Ok(None),
        Err(err) => Err(err),
    }
}
