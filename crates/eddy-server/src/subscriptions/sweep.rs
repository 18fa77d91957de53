//! The sweep: every `subscription_sweep_interval`, each server reads all
//! the store's subscriptions. It learns of subscriptions made or changed
//! through other servers (so its commits are recorded on them), and it
//! begins every wake that is due and that no server holds: the next wake
//! after a lease ended (the server or worker that held it may have died),
//! a retry after a failure, a pull-wake event whose poster died before it
//! appended. Now and then it also reads a slice of each subscription
//! base's streams from the store (`wake::rescan`), for commits whose
//! server died before recording them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::stored::{decode, PAGE, PREFIX};
use super::{now_ms, wake, Registry, Watch};
use crate::state::AppState;

/// Every how many sweeps the subscriptions' streams are read again.
const RESCAN_EVERY: u32 = 30;

/// Starts sweeping until the server stops.
pub(super) fn start(registry: &Arc<Registry>, state: &AppState) {
    let registry = Arc::clone(registry);
    let interval = state.config.subscription_sweep_interval;
    let state = state.clone();
    tokio::spawn(async move {
        let mut stopping = registry.stopping.clone();
        let mut round: u32 = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = stopping.wait_for(|stopping| *stopping) => return,
            }
            round = round.wrapping_add(1);
            if let Err(err) = sweep(&registry, &state).await {
                tracing::warn!(error = %err, "cannot read the subscriptions; the next sweep tries again");
                continue;
            }
            if round % RESCAN_EVERY == 0 {
                wake::rescan(&registry).await;
            }
        }
    });
}

/// One sweep: every subscription read, the known ones replaced by them,
/// new ones brought up to date from the store, and due wakes begun.
async fn sweep(
    registry: &Arc<Registry>,
    state: &AppState,
) -> Result<(), eddy_streams::StreamError> {
    let now = now_ms();
    let mut found = HashMap::new();
    let mut due = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = registry
            .documents()
            .scan(PREFIX, after.as_deref(), PAGE)
            .await?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        let full = page.len() == PAGE;
        for (key, document) in page {
            let Ok(sub) = decode(&document) else {
                tracing::error!(
                    key,
                    "a stored subscription cannot be read; it is left alone"
                );
                continue;
            };
            if wake::due(&sub, now) {
                due.push(sub.id.clone());
            }
            found.insert(sub.id.clone(), Watch::of(&sub));
        }
        if !full {
            break;
        }
    }
    if !found.is_empty() {
        wake::listen(registry, state);
    }
    let new: Vec<String> = {
        let mut known = registry.known();
        let new = found
            .keys()
            .filter(|id| !known.contains_key(*id))
            .cloned()
            .collect();
        *known = found;
        new
    };
    // Subscriptions deleted through other servers leave no cursor behind.
    let ids: HashSet<String> = registry.known().keys().cloned().collect();
    registry.refresh_cursors.keep(|id| ids.contains(id));
    for id in new {
        // Commits made through this server before it knew the
        // subscription were not recorded on it.
        if let Err(err) = wake::refresh(registry, &id).await {
            tracing::debug!(subscription = %id, error = %err.body, "cannot bring a subscription up to date");
        }
    }
    for id in due {
        wake::try_wake(registry, &id).await;
    }
    Ok(())
}
