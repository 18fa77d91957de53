//! Stream subscriptions: the protocol's reserved `__ds` API.
//!
//! A subscription watches streams under one base path (the part of the URL
//! before `/__ds/`), chosen by a glob [pattern](pattern) and/or an explicit
//! list. When a watched stream has data past what the subscription
//! acknowledged, the subscription is *woken*:
//!
//! - a `webhook` subscription POSTs a signed notification (Ed25519, key in
//!   `__ds/jwks.json`) to its URL; the receiver acknowledges offsets in its
//!   response (`{"done": true}` acknowledges everything it was shown) or
//!   later through the callback URL with the callback token;
//! - a `pull-wake` subscription appends a wake event to its wake stream;
//!   workers `claim` a lease, `ack` offsets, and `release` it.
//!
//! Every wake has a generation number; acknowledgements for an older
//! generation are fenced (409 `FENCED`).
//!
//! Subscriptions are kept in the store's shared [documents](eddy_streams::Documents),
//! one each ([`stored`]), so every server on one store answers for every
//! subscription: each change is a compare-and-set of its document, a wake
//! is begun by the server whose write wins (so one server at a time
//! delivers it, until the wake's lease ends), and each server records the
//! commits made through it on the subscriptions that watch them
//! ([`wake`]). Every server also looks through all subscriptions every
//! `subscription_sweep_interval` ([`sweep`]) and takes over wakes whose
//! lease ended (a server that died while delivering). A store without
//! shared documents (a remote server) keeps them in this process.

mod api;
mod listing;
mod pattern;
#[cfg(test)]
mod rescan_tests;
mod retry;
mod stored;
mod subscription;
mod sweep;
mod token;
mod wake;
#[cfg(feature = "webhooks")]
mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eddy_streams::{Documents, MemoryDocuments, Offset, Storage};

pub(crate) use api::handle;
#[cfg(feature = "webhooks")]
use subscription::Target;
use subscription::{
    joined, now_ms, prefix, ActiveWake, Delivery, Link, Post, Subscription, Watch, Watched,
};

use crate::state::AppState;

/// Every subscription of the store, as this server sees them, and what it
/// needs to wake them.
pub(crate) struct Registry {
    /// The store the subscriptions watch (and pull-wake events go to).
    store: Arc<dyn Storage>,
    /// This process's documents, for a store that shares none.
    local: MemoryDocuments,
    /// Turns `true` when the server stops; ends timers and loops.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// When failed wakes are tried again.
    retry: retry::Retry,
    #[cfg(feature = "webhooks")]
    webhooks: webhook::Webhooks,
    /// The subscriptions this server knows of (from its last sweep, and
    /// those made or changed through it since), by id.
    known: Mutex<HashMap<String, Watch>>,
    /// Commits recorded on no subscription yet: tails by stream path
    /// (relative to the base) by subscription id.
    unrecorded: Mutex<HashMap<String, BTreeMap<String, Offset>>>,
    /// Wakes the recorder when `unrecorded` gains something.
    recorder: tokio::sync::Notify,
    /// Set once the server follows the store's commits.
    listening: std::sync::OnceLock<()>,
    /// The most streams one subscription watches through its pattern.
    max_matches: usize,
    /// Where each subscription's next refresh goes on listing its base
    /// (see `wake::refresh`), by subscription id.
    refresh_cursors: listing::Cursors,
    /// Where the next rescan goes on listing each base (see
    /// `wake::rescan`), by base path.
    rescan_cursors: listing::Cursors,
}

impl Registry {
    /// The documents the subscriptions are kept in.
    fn documents(&self) -> &dyn Documents {
        self.store.documents().unwrap_or(&self.local)
    }

    fn known(&self) -> MutexGuard<'_, HashMap<String, Watch>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unrecorded(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<String, Offset>>> {
        self.unrecorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a subscription as it is now stored (or gone: `None`).
    fn remember(&self, id: &str, sub: Option<&Subscription>) {
        match sub {
            Some(sub) => {
                self.known().insert(id.to_owned(), Watch::of(sub));
            }
            None => {
                self.known().remove(id);
                self.refresh_cursors.set(id, None);
            }
        }
    }

    /// A subscription as the API shows it.
    fn describe(&self, sub: &Subscription) -> serde_json::Value {
        let streams: Vec<serde_json::Value> = sub
            .streams
            .iter()
            .map(|(path, w)| {
                serde_json::json!({
                    "path": path,
                    "link_type": w.link.as_str(),
                    "tail_offset": w.tail.to_string(),
                    "acked_offset": w.acked.to_string(),
                    "has_pending": w.tail > w.acked,
                })
            })
            .collect();
        let mut out = serde_json::json!({
            "id": sub.id,
            "lease_ttl_ms": sub.lease_ttl_ms,
            "generation": sub.generation,
            "streams": streams,
        });
        if let Some(pattern) = &sub.pattern {
            out["pattern"] = pattern.as_str().into();
        }
        if let Some(description) = &sub.description {
            out["description"] = description.clone().into();
        }
        match &sub.delivery {
            Delivery::Webhook(target) => {
                out["type"] = "webhook".into();
                #[cfg(feature = "webhooks")]
                {
                    out["webhook"] = self.webhooks.describe(target, &sub.base_path);
                }
                #[cfg(not(feature = "webhooks"))]
                {
                    out["webhook"] = serde_json::json!({ "url": target.url });
                }
            }
            Delivery::PullWake { wake_stream } => {
                out["type"] = "pull-wake".into();
                out["wake_stream"] = wake_stream.clone().into();
            }
        }
        out
    }
}

impl Registry {
    /// The registry of `state`'s store (with the store's shared webhook
    /// signing key, made by the first server that needs it).
    async fn create(state: &AppState) -> Result<Arc<Registry>, SubscriptionError> {
        let local = MemoryDocuments::new();
        #[cfg(feature = "webhooks")]
        let webhooks = {
            let documents = state.store.documents().unwrap_or(&local);
            webhook::Webhooks::new(&state.config, Arc::clone(&state.metrics), documents).await?
        };
        Ok(Arc::new(Registry {
            store: Arc::clone(&state.store),
            local,
            stopping: state.stopping(),
            retry: retry::Retry::new(&state.config),
            #[cfg(feature = "webhooks")]
            webhooks,
            known: Mutex::new(HashMap::new()),
            unrecorded: Mutex::new(HashMap::new()),
            recorder: tokio::sync::Notify::new(),
            listening: std::sync::OnceLock::new(),
            max_matches: state.config.max_subscription_matches,
            refresh_cursors: listing::Cursors::default(),
            rescan_cursors: listing::Cursors::default(),
        }))
    }
}

/// The server's registry, created on first use; creating it starts
/// following the store's commits and sweeping the subscriptions.
async fn registry(state: &AppState) -> Result<Arc<Registry>, SubscriptionError> {
    state
        .subscriptions
        .get_or_try_init(|| async {
            let registry = Registry::create(state).await?;
            sweep::start(&registry, state);
            Ok(registry)
        })
        .await
        .cloned()
}

/// Starts the server's part in the store's subscriptions at once (rather
/// than at the first subscription request): the subscriptions made
/// through other servers are woken by commits made through this one. A
/// store that fails at first is asked again, with backoff, until it
/// answers or the server stops.
pub(crate) fn start(state: &AppState) {
    let state = state.clone();
    tokio::spawn(async move {
        let retry = retry::Retry::new(&state.config);
        let mut failures = 0;
        while let Err(err) = registry(&state).await {
            failures += 1;
            tracing::warn!(error = %err.body, "cannot start the subscriptions yet; trying again");
            tokio::select! {
                () = tokio::time::sleep(retry.delay(failures)) => {}
                () = state.shutting_down() => return,
            }
        }
    });
}

/// An error of the subscription API, in its own JSON shape:
/// `{"error": {"code": "...", "message": "...", ...}}`.
#[derive(Debug)]
pub(crate) struct SubscriptionError {
    status: StatusCode,
    body: serde_json::Value,
}

impl SubscriptionError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        SubscriptionError {
            status,
            body: serde_json::json!({ "error": { "code": code, "message": message.into() } }),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        SubscriptionError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    /// A limit of the server is reached; `limit` names its setting.
    fn limit(status: StatusCode, limit: &str, message: impl Into<String>) -> Self {
        let mut err = SubscriptionError::new(status, "LIMIT_REACHED", message);
        err.body["error"]["limit"] = limit.into();
        err
    }

    fn not_found(id: &str) -> Self {
        SubscriptionError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("no subscription `{id}`"),
        )
    }

    /// Whether it says the subscription does not exist (deleted meanwhile).
    fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }

    fn fenced() -> Self {
        SubscriptionError::new(
            StatusCode::CONFLICT,
            "FENCED",
            "this wake is over: a newer generation replaced it, or it was already acknowledged",
        )
    }

    fn internal(message: impl Into<String>) -> Self {
        SubscriptionError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }

    /// The store failed: a storage failure that may pass (503) or not
    /// (500), as the store's error kind says.
    fn store(err: &eddy_streams::StreamError) -> Self {
        let status = match err.kind() {
            eddy_streams::ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        SubscriptionError::new(
            status,
            "STORAGE_FAILURE",
            format!("the subscription store failed: {err}"),
        )
    }
}

impl IntoResponse for SubscriptionError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}
