//! Waking subscriptions: recording the commits made through this server on
//! the subscriptions that watch them, beginning wakes (one server at a
//! time: the one whose write of the wake wins), delivering pull-wake
//! events, and applying acknowledgements.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use eddy_streams::{Append, Offset, StreamInfo, StreamPath};
use tokio::sync::broadcast::error::RecvError;

use super::listing;
use super::subscription::Covered;
use super::{now_ms, Delivery, Post, Registry, Subscription, SubscriptionError, Watch};
use crate::state::AppState;

/// How long a server has to append a pull-wake event it began before
/// another server may append it instead (the first may have died).
const POST_LEASE_MS: u64 = 10_000;

/// How many subscriptions the recorder writes at once.
const RECORDERS: usize = 16;

/// What a server does after a write of a subscription that began a wake.
pub(super) enum Action {
    /// Send a webhook notification.
    #[cfg(feature = "webhooks")]
    Notify(super::webhook::Notification),
    /// Append a pull-wake event to the wake stream at `target`.
    Post {
        id: String,
        target: String,
        event: serde_json::Value,
    },
}

/// Begins a wake of `sub` when it has pending data, no live wake, and no
/// retry to wait for: the caller stores the change, and only if that write
/// wins does it run the returned action.
pub(super) fn plan(registry: &Registry, sub: &mut Subscription, now: u64) -> Option<Action> {
    if !due(sub, now) {
        return None;
    }
    match sub.delivery.clone() {
        #[cfg(feature = "webhooks")]
        Delivery::Webhook(target) => {
            let pending = sub.pending();
            match super::webhook::Notification::start(sub, &target, pending) {
                Ok(notification) => Some(Action::Notify(notification)),
                Err(err) => {
                    tracing::error!(subscription = %sub.id, error = %err, "no randomness for a wake id");
                    registry.webhooks.failed();
                    let delay = registry.retry.after_failure(sub);
                    sub.retry_at_ms = now.saturating_add(millis(delay));
                    None
                }
            }
        }
        #[cfg(not(feature = "webhooks"))]
        Delivery::Webhook(_) => {
            let _ = registry;
            None
        }
        Delivery::PullWake { wake_stream } => {
            sub.post = Post::Posting {
                until_ms: now.saturating_add(POST_LEASE_MS),
            };
            let event = serde_json::json!({
                "subscription_id": sub.id,
                "streams": sub.pending().iter().map(|(path, tail, _)| serde_json::json!({
                    "path": path,
                    "tail_offset": tail.to_string(),
                })).collect::<Vec<_>>(),
            });
            Some(Action::Post {
                id: sub.id.clone(),
                target: sub.full_path(&wake_stream),
                event,
            })
        }
    }
}

/// Whether a wake of `sub` is due now (see [`plan`]).
pub(super) fn due(sub: &Subscription, now: u64) -> bool {
    if !sub.has_pending() || sub.wake_active(now) || now < sub.retry_at_ms {
        return false;
    }
    match sub.delivery {
        Delivery::Webhook(_) => cfg!(feature = "webhooks"),
        Delivery::PullWake { .. } => match sub.post {
            Post::None => true,
            Post::Posting { until_ms } => until_ms <= now,
            Post::Posted => false,
        },
    }
}

/// Runs what a stored change began.
pub(super) fn run(registry: &Arc<Registry>, action: Option<Action>) {
    match action {
        None => {}
        #[cfg(feature = "webhooks")]
        Some(Action::Notify(notification)) => {
            tokio::spawn(notification.deliver(Arc::clone(registry)));
        }
        Some(Action::Post { id, target, event }) => {
            tokio::spawn(post_wake(Arc::clone(registry), id, target, event));
        }
    }
}

/// Wakes subscription `id` if a wake is due (see [`plan`]).
pub(super) async fn try_wake(registry: &Arc<Registry>, id: &str) {
    let now = now_ms();
    match registry
        .update(id, |sub| Ok(plan(registry, sub, now)))
        .await
    {
        Ok(action) => run(registry, action),
        Err(err) if err.is_not_found() => {}
        Err(err) => {
            tracing::warn!(subscription = %id, error = %err.body, "cannot wake a subscription; the sweep tries again");
        }
    }
}

/// Tries to wake a subscription after `delay` (unless the server stops
/// first): retries of failed wakes and lease ends.
pub(super) fn wake_later(registry: &Arc<Registry>, id: String, delay: Duration) {
    let registry = Arc::clone(registry);
    let mut stopping = registry.stopping.clone();
    tokio::spawn(async move {
        let stopped = tokio::select! {
            () = tokio::time::sleep(delay) => false,
            _ = stopping.wait_for(|stopping| *stopping) => true,
        };
        if !stopped {
            try_wake(&registry, &id).await;
        }
    });
}

/// A duration in whole milliseconds.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Starts following the store's commits (once per server, when it first
/// knows of a subscription: a server with none pays nothing per commit),
/// until the server shuts down: each commit is noted for the
/// subscriptions that watch its stream, and a recorder task writes the
/// notes.
pub(super) fn listen(registry: &Arc<Registry>, state: &AppState) {
    if registry.listening.set(()).is_err() {
        return;
    }
    let mut commits = state.store.committed();
    let listener = Arc::clone(registry);
    let stopping = state.clone();
    tokio::spawn(async move {
        loop {
            let received = tokio::select! {
                received = commits.recv() => received,
                () = stopping.shutting_down() => return,
            };
            match received {
                Ok(commit) => observe(&listener, &commit.path, commit.tail),
                Err(RecvError::Lagged(missed)) => {
                    // The missed commits may be the only news of some
                    // subscription's streams: ask the store instead.
                    tracing::warn!(
                        missed,
                        "subscriptions fell behind the commit feed; reading their streams again"
                    );
                    rescan(&listener).await;
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
    let recorder = Arc::clone(registry);
    tokio::spawn(async move { record_commits(recorder).await });
}

/// Notes a commit for every subscription that watches the path; the
/// recorder writes it.
pub(super) fn observe(registry: &Registry, full_path: &str, tail: Offset) {
    let concerned: Vec<(String, String)> = registry
        .known()
        .iter()
        .filter_map(|(id, watch)| Some((id.clone(), watch.concerns(full_path)?.to_owned())))
        .collect();
    if concerned.is_empty() {
        return;
    }
    let mut unrecorded = registry.unrecorded();
    for (id, relative) in concerned {
        let noted = unrecorded
            .entry(id)
            .or_default()
            .entry(relative)
            .or_insert(tail);
        *noted = (*noted).max(tail);
    }
    drop(unrecorded);
    registry.recorder.notify_one();
}

/// The recorder: writes the noted commits on their subscriptions, one
/// write per subscription for all the commits noted since the last, and
/// wakes those with pending data. A write that fails keeps its notes for
/// the next round, after a backoff.
async fn record_commits(registry: Arc<Registry>) {
    let mut stopping = registry.stopping.clone();
    let mut failures = 0;
    loop {
        tokio::select! {
            () = registry.recorder.notified() => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
        let noted = std::mem::take(&mut *registry.unrecorded());
        let failed = AtomicBool::new(false);
        futures::stream::iter(noted)
            .for_each_concurrent(RECORDERS, |(id, tails)| {
                let (registry, failed) = (&registry, &failed);
                async move {
                    if let Err(err) = record_tails(registry, &id, &tails).await {
                        tracing::warn!(subscription = %id, error = %err.body, "cannot record commits on a subscription; trying again");
                        let mut unrecorded = registry.unrecorded();
                        let kept = unrecorded.entry(id).or_default();
                        for (path, tail) in tails {
                            let noted = kept.entry(path).or_insert(tail);
                            *noted = (*noted).max(tail);
                        }
                        failed.store(true, Ordering::Relaxed);
                    }
                }
            })
            .await;
        let failed = failed.into_inner();
        if failed {
            failures += 1;
            tokio::select! {
                () = tokio::time::sleep(registry.retry.delay(failures)) => {}
                _ = stopping.wait_for(|stopping| *stopping) => return,
            }
            registry.recorder.notify_one();
        } else {
            failures = 0;
        }
    }
}

/// Records new tails of some of a subscription's streams and wakes it if
/// that makes a wake due. A subscription deleted meanwhile is no error.
async fn record_tails(
    registry: &Arc<Registry>,
    id: &str,
    tails: &BTreeMap<String, Offset>,
) -> Result<(), SubscriptionError> {
    let now = now_ms();
    let recorded = registry
        .update(id, |sub| {
            let mut left_out = 0;
            for (relative, tail) in tails {
                if let Some(link) = sub.watches(relative) {
                    if !sub.track(relative, link, *tail, now, registry.max_matches) {
                        left_out += 1;
                    }
                }
            }
            Ok((left_out, plan(registry, sub, now)))
        })
        .await;
    match recorded {
        Ok((left_out, action)) => {
            if left_out > 0 {
                warn_left_out(id, left_out, registry.max_matches);
            }
            run(registry, action);
            Ok(())
        }
        Err(err) if err.is_not_found() => Ok(()),
        Err(err) => Err(err),
    }
}

fn warn_left_out(id: &str, left_out: usize, max_matches: usize) {
    tracing::warn!(
        subscription = %id,
        left_out,
        max_matches,
        "a subscription's pattern matches more streams than it may watch (--max-subscription-matches); the rest wake nobody until deleted ones make room"
    );
}

/// Brings a subscription's view of its streams up to date from the store
/// (a commit may not have been recorded yet, or at all if the server that
/// made it died first): the tails of the streams it watches, new streams
/// of its pattern, and streams of its pattern that were deleted are
/// dropped; then wakes it if that makes a wake due. It reads one
/// [`slice`](listing::slice) of its base, from where the subscription's
/// last refresh stopped: the paths, and the tails of the streams it
/// watches among them and of its pattern's other matches, as many of
/// those as it has room for (once the streams found gone are dropped).
pub(super) async fn refresh(registry: &Arc<Registry>, id: &str) -> Result<(), SubscriptionError> {
    let Some((sub, _)) = registry.load(id).await? else {
        return Err(SubscriptionError::not_found(id));
    };
    let max = registry.max_matches;
    let room = sub.matched() < max;
    let listed_ms = now_ms();
    let start = registry.refresh_cursors.get(id);
    let store_failed = |e| SubscriptionError::store(&e);
    let slice = listing::slice(
        &*registry.store,
        &super::prefix(&sub.base_path),
        start.as_deref(),
        |path| sub.wants(path, room),
    )
    .await
    .map_err(store_failed)?;
    registry.refresh_cursors.set(id, slice.through.clone());
    let covered = Covered {
        after: start,
        through: slice.through,
    };
    let mut infos = slice.infos;
    if !slice.candidates.is_empty() {
        // The room the streams found gone make.
        let mut after = sub;
        after.record(&infos, &covered, listed_ms, max);
        let room = max.saturating_sub(after.matched());
        let more = listing::live(&*registry.store, &slice.candidates, room).await;
        infos.extend(more.map_err(store_failed)?);
    }
    record_listing(registry, id, &infos, &covered, listed_ms).await
}

/// Records a listing of a subscription's base on it (see [`refresh`]).
async fn record_listing(
    registry: &Arc<Registry>,
    id: &str,
    infos: &[StreamInfo],
    covered: &Covered,
    listed_ms: u64,
) -> Result<(), SubscriptionError> {
    let now = now_ms();
    let (left_out, action) = registry
        .update(id, |sub| {
            let left_out = sub.record(infos, covered, listed_ms, registry.max_matches);
            Ok((left_out, plan(registry, sub, now)))
        })
        .await?;
    if left_out > 0 {
        warn_left_out(id, left_out, registry.max_matches);
    }
    run(registry, action);
    Ok(())
}

/// Reads the streams of every subscription this server knows again from
/// the store and wakes those with pending data: per base, one
/// [`slice`](listing::slice) from where the last rescan of that base
/// stopped (the paths, and the tails of the streams any of its
/// subscriptions watches), recorded on each of them. A base larger than a
/// slice is read over several rescans, so a commit no server recorded is
/// found within as many. A failed slice is read again (with backoff)
/// until it succeeds or the server stops, so no wake is lost.
pub(super) async fn rescan(registry: &Arc<Registry>) {
    let watches: Vec<(String, Watch)> = registry
        .known()
        .iter()
        .map(|(id, watch)| (id.clone(), watch.clone()))
        .collect();
    let bases: BTreeSet<&str> = watches
        .iter()
        .map(|(_, watch)| watch.base_path.as_str())
        .collect();
    registry.rescan_cursors.keep(|base| bases.contains(base));
    for base in bases {
        let on_base: Vec<&(String, Watch)> = watches
            .iter()
            .filter(|(_, watch)| watch.base_path == base)
            .collect();
        let listed_ms = now_ms();
        let start = registry.rescan_cursors.get(base);
        let wanted = |path: &str| {
            if on_base.iter().any(|(_, w)| w.concerns(path).is_some()) {
                listing::Want::Read
            } else {
                listing::Want::Skip
            }
        };
        let Some(slice) = slice_until_read(registry, base, start.as_deref(), wanted).await else {
            return;
        };
        registry.rescan_cursors.set(base, slice.through.clone());
        let covered = Covered {
            after: start,
            through: slice.through,
        };
        for (id, _) in on_base {
            match record_listing(registry, id, &slice.infos, &covered, listed_ms).await {
                Ok(()) => {}
                Err(err) if err.is_not_found() => {}
                Err(err) => {
                    tracing::warn!(subscription = %id, error = %err.body, "cannot record a listing on a subscription; the next sweep tries again");
                }
            }
        }
    }
}

/// A slice of the streams under `base` (see [`listing::slice`]), read
/// again after each failure; `None` when the server stops first.
async fn slice_until_read(
    registry: &Registry,
    base: &str,
    after: Option<&str>,
    wanted: impl Fn(&str) -> listing::Want,
) -> Option<listing::Slice> {
    let prefix = super::prefix(base);
    let mut failures = 0;
    loop {
        match listing::slice(&*registry.store, &prefix, after, &wanted).await {
            Ok(slice) => return Some(slice),
            Err(err) => {
                failures += 1;
                tracing::warn!(error = %err, prefix, "cannot list streams for the subscriptions; trying again");
                let delay = registry.retry.delay(failures);
                let mut stopping = registry.stopping.clone();
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stopping.wait_for(|stopping| *stopping) => return None,
                }
            }
        }
    }
}

/// Appends a pull-wake event to the wake stream. When the append fails
/// the subscription is no longer marked as posted and is woken again after
/// a backoff (with the streams pending then): a wake event that was never
/// written must not keep its workers asleep.
async fn post_wake(registry: Arc<Registry>, id: String, target: String, event: serde_json::Value) {
    let appended = match StreamPath::new(target) {
        Ok(path) => registry
            .store
            .append(&path, Append::body(event.to_string()))
            .await
            .map(drop),
        Err(err) => Err(err),
    };
    if let Err(err) = &appended {
        tracing::warn!(subscription = %id, error = %err, "cannot post a pull-wake event; trying again");
    }
    let now = now_ms();
    let retry = registry
        .update(&id, |sub| {
            if !matches!(sub.post, Post::Posting { .. }) {
                // Claimed (or taken over) meanwhile.
                return Ok(None);
            }
            match &appended {
                Ok(()) => {
                    sub.post = Post::Posted;
                    sub.failures = 0;
                    Ok(None)
                }
                Err(_) => {
                    sub.post = Post::None;
                    let delay = registry.retry.after_failure(sub);
                    sub.retry_at_ms = now.saturating_add(millis(delay));
                    Ok(Some(delay))
                }
            }
        })
        .await;
    match retry {
        Ok(Some(delay)) => wake_later(&registry, id, delay),
        Ok(None) => {}
        Err(err) if err.is_not_found() => {}
        // The post's lease ends and the sweep posts again.
        Err(err) => {
            tracing::warn!(subscription = %id, error = %err.body, "cannot record a pull-wake post");
        }
    }
}

/// An acknowledgement from a webhook callback or a pull-wake worker.
#[derive(serde::Deserialize)]
pub(super) struct Ack {
    wake_id: String,
    generation: u64,
    #[serde(default)]
    acks: Vec<StreamAck>,
    #[serde(default)]
    done: bool,
}

#[derive(serde::Deserialize)]
struct StreamAck {
    stream: String,
    offset: String,
}

/// Applies an acknowledgement to the live wake it names; returns whether
/// data is still pending (a next wake follows).
pub(super) async fn acknowledge(
    registry: &Arc<Registry>,
    id: &str,
    token: Option<&str>,
    ack: Ack,
) -> Result<bool, SubscriptionError> {
    let mut offsets = Vec::with_capacity(ack.acks.len());
    for stream_ack in &ack.acks {
        let offset: Offset = stream_ack.offset.parse().map_err(|_| {
            SubscriptionError::bad_request(format!("bad offset `{}`", stream_ack.offset))
        })?;
        offsets.push((stream_ack.stream.as_str(), offset));
    }
    let now = now_ms();
    let (next_wake, action) = registry
        .update(id, |sub| {
            let live = sub
                .wake
                .as_ref()
                .is_some_and(|w| w.is(&ack.wake_id, ack.generation, token));
            if !live {
                return Err(SubscriptionError::fenced());
            }
            for (stream, offset) in &offsets {
                if let Some(watched) = sub.streams.get_mut(*stream) {
                    watched.acked = watched.acked.max((*offset).min(watched.tail));
                }
            }
            let mut action = None;
            if ack.done {
                sub.wake = None;
                sub.post = Post::None;
                action = plan(registry, sub, now);
            }
            Ok((sub.has_pending(), action))
        })
        .await?;
    run(registry, action);
    Ok(next_wake)
}
