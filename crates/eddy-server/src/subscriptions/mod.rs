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
mod pattern;
mod retry;
mod stored;
mod sweep;
mod token;
mod wake;
#[cfg(feature = "webhooks")]
mod webhook;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eddy_streams::{Documents, MemoryDocuments, Offset, Storage};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

pub(crate) use api::handle;

use crate::state::AppState;

/// The wall clock in unix milliseconds: leases and retry times are
/// compared across servers (keep their clocks in sync).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Where a webhook subscription delivers, and the public origin its
/// callback and JWKS URLs start with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Target {
    url: String,
    /// `http://host`, from the request that made the subscription.
    origin: String,
}

#[cfg(feature = "webhooks")]
impl Target {
    /// The public URL of `rest` under the subscription API of `base_path`.
    fn public_url(&self, base_path: &str, rest: &str) -> String {
        let base = if base_path.is_empty() {
            String::new()
        } else {
            format!("/{base_path}")
        };
        format!("{}{base}/__ds/{rest}", self.origin)
    }
}

/// How a subscription delivers wakes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum Delivery {
    /// Kept by every build: a server without the `webhooks` feature
    /// describes one but cannot deliver it.
    Webhook(Target),
    PullWake {
        wake_stream: String,
    },
}

impl Delivery {
    /// The stream the server appends wake events to, for a pull-wake
    /// subscription.
    fn wake_stream(&self) -> Option<&str> {
        match self {
            Delivery::Webhook(_) => None,
            Delivery::PullWake { wake_stream } => Some(wake_stream),
        }
    }
}

/// Why a stream belongs to a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Link {
    Pattern,
    Explicit,
}

impl Link {
    fn as_str(self) -> &'static str {
        match self {
            Link::Pattern => "pattern",
            Link::Explicit => "explicit",
        }
    }
}

/// One watched stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Watched {
    link: Link,
    tail: Offset,
    acked: Offset,
    /// When a commit of it was last recorded (unix ms; 0: never): a
    /// stream recorded after a listing began is not dropped for missing
    /// from it.
    #[serde(default)]
    seen_ms: u64,
}

impl Watched {
    /// A stream watched from `tail` on: data there is acknowledged.
    fn from(link: Link, tail: Offset) -> Self {
        Watched {
            link,
            tail,
            acked: tail,
            seen_ms: 0,
        }
    }
}

/// The wake in progress: who holds it and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct ActiveWake {
    wake_id: String,
    generation: u64,
    token: String,
    /// The pull-wake worker that claimed it (`None` for a webhook's).
    holder: Option<String>,
    /// When its lease ends (unix ms); after that any server may begin
    /// the next generation.
    expires_ms: u64,
}

impl ActiveWake {
    /// A new wake generation of `sub`, with fresh random ids; fails when
    /// the OS random number generator does (no guessable fallback).
    fn begin(sub: &mut Subscription, holder: Option<String>) -> Result<Self, getrandom::Error> {
        let wake_id = token::token()?;
        let token = token::token()?;
        sub.generation += 1;
        Ok(ActiveWake {
            wake_id,
            generation: sub.generation,
            token,
            holder,
            expires_ms: now_ms().saturating_add(sub.lease_ttl_ms),
        })
    }

    /// Whether a request names this wake and carries its token (compared
    /// in constant time).
    fn is(&self, wake_id: &str, generation: u64, token: Option<&str>) -> bool {
        let token = token.unwrap_or("").as_bytes();
        self.wake_id == wake_id
            && self.generation == generation
            && bool::from(self.token.as_bytes().ct_eq(token))
    }
}

/// Where a pull-wake subscription's wake event is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
enum Post {
    /// None is owed, or the last was claimed.
    #[default]
    None,
    /// A server is appending one; another may take over after `until_ms`
    /// (the first may have died before it appended).
    Posting { until_ms: u64 },
    /// Appended and not yet claimed.
    Posted,
}

/// One subscription, as its document stores it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Subscription {
    id: String,
    /// The stream path prefix its paths are relative to (`v1/stream`).
    base_path: String,
    delivery: Delivery,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pattern: Option<pattern::Pattern>,
    lease_ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// A hash of the create request, to recognise an idempotent re-create
    /// without keeping the request.
    fingerprint: String,
    /// The bytes it keeps, counted against `max_subscription_bytes`: its
    /// create request, and the paths of streams added to it later.
    stored_bytes: usize,
    streams: BTreeMap<String, Watched>,
    generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wake: Option<ActiveWake>,
    #[serde(default)]
    post: Post,
    /// Wakes (webhook notifications, pull-wake appends) that failed in a
    /// row: sets the retry delay.
    #[serde(default)]
    failures: u32,
    /// No wake is begun before this time (unix ms) after a failure.
    #[serde(default)]
    retry_at_ms: u64,
}

/// The full store path of a path relative to a subscription's base.
fn joined(base_path: &str, relative: &str) -> String {
    if base_path.is_empty() {
        relative.to_owned()
    } else {
        format!("{base_path}/{relative}")
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

impl Subscription {
    /// The full store path of a path relative to the base.
    fn full_path(&self, relative: &str) -> String {
        joined(&self.base_path, relative)
    }

    /// The path relative to the base, if the full path is under it.
    fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        relative_to(&self.base_path, full)
    }

    fn watches(&self, relative: &str) -> Option<Link> {
        match self.streams.get(relative) {
            Some(watched) => Some(watched.link),
            None => self
                .pattern
                .as_ref()
                .filter(|p| p.matches(relative))
                .map(|_| Link::Pattern),
        }
    }

    /// Records that the stream at `relative` has data up to `tail` (seen
    /// at `seen_ms`), starting to watch it if it is new. Returns `false`,
    /// and leaves it out, when it is a new stream of the pattern and the
    /// subscription watches `max_matches` of those already.
    fn track(
        &mut self,
        relative: &str,
        link: Link,
        tail: Offset,
        seen_ms: u64,
        max_matches: usize,
    ) -> bool {
        if link == Link::Pattern
            && !self.streams.contains_key(relative)
            && self.matched() >= max_matches
        {
            return false;
        }
        let watched = self.streams.entry(relative.to_owned()).or_insert(Watched {
            link,
            tail: Offset::ZERO,
            acked: Offset::ZERO,
            seen_ms,
        });
        watched.tail = watched.tail.max(tail);
        watched.seen_ms = watched.seen_ms.max(seen_ms);
        true
    }

    /// How many streams it watches because they match its pattern.
    fn matched(&self) -> usize {
        self.streams
            .values()
            .filter(|w| w.link == Link::Pattern)
            .count()
    }

    /// Brings it up to date with the store's streams under its base, as
    /// listed from `listed_ms` on: tails move on, new matches are watched
    /// (up to `max_matches`), and streams of the pattern that no longer
    /// exist are dropped (an explicitly listed one stays: its client named
    /// it; one recorded after the listing began stays too). Returns how
    /// many new matches were left out.
    fn record(
        &mut self,
        infos: &[eddy_streams::StreamInfo],
        listed_ms: u64,
        max_matches: usize,
    ) -> usize {
        let present: std::collections::HashSet<&str> = infos
            .iter()
            .filter_map(|info| self.relative(&info.path))
            .collect();
        self.streams.retain(|path, watched| {
            watched.link == Link::Explicit
                || watched.seen_ms > listed_ms
                || present.contains(path.as_str())
        });
        let mut left_out = 0;
        for info in infos {
            let Some(relative) = self.relative(&info.path).map(str::to_owned) else {
                continue;
            };
            if let Some(link) = self.watches(&relative) {
                if !self.track(&relative, link, info.tail, 0, max_matches) {
                    left_out += 1;
                }
            }
        }
        left_out
    }

    fn pending(&self) -> Vec<(String, Offset, Offset)> {
        self.streams
            .iter()
            .filter(|(_, w)| w.tail > w.acked)
            .map(|(path, w)| (path.clone(), w.tail, w.acked))
            .collect()
    }

    fn has_pending(&self) -> bool {
        self.streams.values().any(|w| w.tail > w.acked)
    }

    fn wake_active(&self, now_ms: u64) -> bool {
        self.wake.as_ref().is_some_and(|w| w.expires_ms > now_ms)
    }
}

/// The path relative to `base_path`, if `full` is under it.
fn relative_to<'a>(base_path: &str, full: &'a str) -> Option<&'a str> {
    if base_path.is_empty() {
        Some(full)
    } else {
        full.strip_prefix(base_path)?.strip_prefix('/')
    }
}

/// What a server needs to know of a subscription to see which commits
/// concern it: its base, pattern and explicit streams.
#[derive(Clone, Debug)]
struct Watch {
    base_path: String,
    pattern: Option<pattern::Pattern>,
    explicit: BTreeSet<String>,
}

impl Watch {
    fn of(sub: &Subscription) -> Self {
        Watch {
            base_path: sub.base_path.clone(),
            pattern: sub.pattern.clone(),
            explicit: sub
                .streams
                .iter()
                .filter(|(_, w)| w.link == Link::Explicit)
                .map(|(path, _)| path.clone())
                .collect(),
        }
    }

    /// The path relative to the base when the subscription watches it.
    fn concerns<'a>(&self, full: &'a str) -> Option<&'a str> {
        let relative = relative_to(&self.base_path, full)?;
        let watched = self.explicit.contains(relative)
            || self.pattern.as_ref().is_some_and(|p| p.matches(relative));
        watched.then_some(relative)
    }
}

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
        let mut known = self.known();
        match sub {
            Some(sub) => known.insert(id.to_owned(), Watch::of(sub)),
            None => known.remove(id),
        };
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
