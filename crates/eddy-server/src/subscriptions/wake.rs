//! Waking subscriptions: following the store's commits, delivering
//! webhooks and pull-wake events, and applying acknowledgements.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use eddy_streams::{Append, Offset, StreamInfo, StreamPath};
use tokio::sync::broadcast::error::RecvError;

use super::{Delivery, Registry, SubscriptionError};
use crate::state::AppState;

/// Starts following the store's commits (once per server), until the
/// server shuts down.
pub(super) fn listen(registry: &Arc<Registry>, state: &AppState) {
    if registry.listening.set(()).is_err() {
        return;
    }
    let mut commits = state.store.committed();
    let registry = Arc::clone(registry);
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            let received = tokio::select! {
                received = commits.recv() => received,
                () = state.shutting_down() => return,
            };
            match received {
                Ok(commit) => observe(&registry, &commit.path, commit.tail),
                Err(RecvError::Lagged(missed)) => {
                    // The missed commits may be the only news of some
                    // subscription's streams: ask the store instead. Commits
                    // that arrive meanwhile wait in the feed (or lag again,
                    // and another re-scan follows).
                    tracing::warn!(
                        missed,
                        "subscriptions fell behind the commit feed; reading their streams again"
                    );
                    rescan(&registry).await;
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Records a commit on every subscription that watches the path, and wakes
/// those with pending data.
pub(super) fn observe(registry: &Arc<Registry>, full_path: &str, tail: Offset) {
    let seen = registry.observed.fetch_add(1, Ordering::Relaxed) + 1;
    let mut prune = Vec::new();
    let ids: Vec<String> = {
        let mut subscriptions = registry.lock();
        subscriptions
            .values_mut()
            .filter_map(|sub| {
                let relative = sub.relative(full_path)?.to_owned();
                let link = sub.watches(&relative)?;
                if !sub.track(relative, link, tail, seen, registry.max_matches) {
                    // Full: streams of the pattern that were deleted since
                    // may make room.
                    if sub.prune_due() {
                        prune.push(sub.id.clone());
                    }
                    return None;
                }
                Some(sub.id.clone())
            })
            .collect()
    };
    for id in ids {
        wake(registry, &id);
    }
    for id in prune {
        let registry = Arc::clone(registry);
        tokio::spawn(async move {
            refresh(&registry, &id).await;
            wake(&registry, &id);
        });
    }
}

/// The prefix of the store paths under a subscription base.
fn prefix(base_path: &str) -> String {
    if base_path.is_empty() {
        String::new()
    } else {
        format!("{base_path}/")
    }
}

/// Brings a subscription's view of its streams up to date from the store
/// (the commit feed may lag a request that just returned): the tails of
/// the streams it watches, and the streams of its pattern that were
/// deleted are dropped.
pub(super) async fn refresh(registry: &Arc<Registry>, id: &str) {
    let base = match registry.lock().get(id) {
        Some(sub) => prefix(&sub.base_path),
        None => return,
    };
    let since = registry.observed.load(Ordering::Relaxed);
    let infos = match registry.store.list(&base).await {
        Ok(infos) => infos,
        Err(err) => {
            tracing::warn!(error = %err, "cannot list streams for a subscription");
            return;
        }
    };
    if let Some(sub) = registry.lock().get_mut(id) {
        sub.record(&infos, since, registry.max_matches);
    }
}

/// Reads every subscription's streams again from the store and wakes
/// those with pending data; a failed read is retried (with backoff) until
/// it succeeds or the server stops, so no wake is lost.
async fn rescan(registry: &Arc<Registry>) {
    let bases: BTreeSet<String> = registry
        .lock()
        .values()
        .map(|sub| sub.base_path.clone())
        .collect();
    for base in bases {
        let since = registry.observed.load(Ordering::Relaxed);
        let Some(infos) = list_until_read(registry, &prefix(&base)).await else {
            return;
        };
        let ids: Vec<String> = registry
            .lock()
            .values_mut()
            .filter(|sub| sub.base_path == base)
            .map(|sub| {
                sub.record(&infos, since, registry.max_matches);
                sub.id.clone()
            })
            .collect();
        for id in ids {
            wake(registry, &id);
        }
    }
}

/// The streams under `prefix`, read again after each failure; `None` when
/// the server stops first.
async fn list_until_read(registry: &Registry, prefix: &str) -> Option<Vec<StreamInfo>> {
    let mut failures = 0;
    loop {
        match registry.store.list(prefix).await {
            Ok(infos) => return Some(infos),
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

/// Wakes a subscription after `delay` (unless the server stops first):
/// retries of failed wakes and lease ends.
pub(super) fn wake_later(registry: &Arc<Registry>, id: String, delay: std::time::Duration) {
    let registry = Arc::clone(registry);
    let mut stopping = registry.stopping.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(delay) => wake(&registry, &id),
            _ = stopping.wait_for(|stopping| *stopping) => {}
        }
    });
}

/// Wakes a subscription if it has pending data and no live wake.
pub(super) fn wake(registry: &Arc<Registry>, id: &str) {
    let mut subscriptions = registry.lock();
    let Some(sub) = subscriptions.get_mut(id) else {
        return;
    };
    let pending = sub.pending();
    if pending.is_empty() || sub.wake_active() {
        return;
    }
    match sub.delivery.clone() {
        #[cfg(feature = "webhooks")]
        Delivery::Webhook(target) => {
            match super::webhook::Notification::start(sub, &target, pending) {
                Ok(notification) => {
                    drop(subscriptions);
                    tokio::spawn(notification.deliver(Arc::clone(registry)));
                }
                Err(err) => {
                    tracing::error!(subscription = %id, error = %err, "no randomness for a wake id");
                    registry.webhooks.failed();
                    let retry = registry.retry.after_failure(sub);
                    drop(subscriptions);
                    wake_later(registry, id.to_owned(), retry);
                }
            }
        }
        Delivery::PullWake { wake_stream } => {
            if sub.wake_posted {
                return;
            }
            sub.wake_posted = true;
            let event = serde_json::json!({
                "subscription_id": sub.id,
                "streams": pending.iter().map(|(path, tail, _)| serde_json::json!({
                    "path": path,
                    "tail_offset": tail.to_string(),
                })).collect::<Vec<_>>(),
            });
            let target = sub.full_path(&wake_stream);
            drop(subscriptions);
            tokio::spawn(post_wake(
                Arc::clone(registry),
                id.to_owned(),
                target,
                event,
            ));
        }
    }
}

/// Appends a pull-wake event to the wake stream. When the append fails
/// the subscription is no longer marked as woken and is woken again after
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
    let retry = {
        let mut subscriptions = registry.lock();
        let Some(sub) = subscriptions.get_mut(&id) else {
            return;
        };
        match appended {
            Ok(()) => {
                sub.failures = 0;
                return;
            }
            Err(err) => {
                tracing::warn!(subscription = %id, error = %err, "cannot post a pull-wake event; trying again");
                sub.wake_posted = false;
                registry.retry.after_failure(sub)
            }
        }
    };
    wake_later(&registry, id, retry);
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
pub(super) fn acknowledge(
    registry: &Arc<Registry>,
    id: &str,
    token: Option<&str>,
    ack: Ack,
) -> Result<bool, SubscriptionError> {
    let next_wake = {
        let mut subscriptions = registry.lock();
        let sub = subscriptions
            .get_mut(id)
            .ok_or_else(|| SubscriptionError::not_found(id))?;
        let live = sub
            .wake
            .as_ref()
            .is_some_and(|w| w.is(&ack.wake_id, ack.generation, token));
        if !live {
            return Err(SubscriptionError::fenced());
        }
        for stream_ack in &ack.acks {
            let offset: Offset = stream_ack.offset.parse().map_err(|_| {
                SubscriptionError::bad_request(format!("bad offset `{}`", stream_ack.offset))
            })?;
            if let Some(watched) = sub.streams.get_mut(&stream_ack.stream) {
                watched.acked = watched.acked.max(offset.min(watched.tail));
            }
        }
        if ack.done {
            sub.wake = None;
            sub.wake_posted = false;
        }
        !sub.pending().is_empty()
    };
    if ack.done && next_wake {
        wake(registry, id);
    }
    Ok(next_wake)
}
