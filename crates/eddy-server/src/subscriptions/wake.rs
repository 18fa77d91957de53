//! Waking subscriptions: following the store's commits, delivering
//! webhooks and pull-wake events, and applying acknowledgements.

use std::sync::Arc;

use eddy_streams::{Append, Offset, StreamPath};
use tokio::sync::broadcast::error::RecvError;

use super::{Delivery, Registry, SubscriptionError, Watched};
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
                    tracing::warn!(missed, "subscriptions fell behind the commit feed")
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Records a commit on every subscription that watches the path, and wakes
/// those with pending data.
pub(super) fn observe(registry: &Arc<Registry>, full_path: &str, tail: Offset) {
    let ids: Vec<String> = {
        let mut subscriptions = registry.lock();
        subscriptions
            .values_mut()
            .filter_map(|sub| {
                let relative = sub.relative(full_path)?.to_owned();
                let link = sub.watches(&relative)?;
                let watched = sub.streams.entry(relative).or_insert(Watched {
                    link,
                    tail: Offset::ZERO,
                    acked: Offset::ZERO,
                });
                watched.tail = watched.tail.max(tail);
                Some(sub.id.clone())
            })
            .collect()
    };
    for id in ids {
        wake(registry, &id);
    }
}

/// Brings a subscription's view of its streams' tails up to date from the
/// store (the commit feed may lag a request that just returned).
pub(super) async fn refresh(registry: &Arc<Registry>, id: &str) {
    let base = match registry.lock().get(id) {
        Some(sub) if sub.base_path.is_empty() => String::new(),
        Some(sub) => format!("{}/", sub.base_path),
        None => return,
    };
    let infos = match registry.store.list(&base).await {
        Ok(infos) => infos,
        Err(err) => {
            tracing::warn!(error = %err, "cannot list streams for a subscription");
            return;
        }
    };
    let mut subscriptions = registry.lock();
    let Some(sub) = subscriptions.get_mut(id) else {
        return;
    };
    for info in infos {
        let Some(relative) = sub.relative(&info.path).map(str::to_owned) else {
            continue;
        };
        if let Some(link) = sub.watches(&relative) {
            let watched = sub.streams.entry(relative).or_insert(Watched {
                link,
                tail: Offset::ZERO,
                acked: Offset::ZERO,
            });
            watched.tail = watched.tail.max(info.tail);
        }
    }
}

/// Wakes a subscription after `delay` (unless the server stops first):
/// webhook re-deliveries and lease ends.
#[cfg(feature = "webhooks")]
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
                    let retry = registry.webhooks.failed(sub);
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
            let store = Arc::clone(&registry.store);
            tokio::spawn(async move {
                let appended = match StreamPath::new(target) {
                    Ok(path) => store
                        .append(&path, Append::body(event.to_string()))
                        .await
                        .map(drop),
                    Err(err) => Err(err),
                };
                if let Err(err) = appended {
                    tracing::warn!(error = %err, "cannot post a pull-wake event");
                }
            });
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
