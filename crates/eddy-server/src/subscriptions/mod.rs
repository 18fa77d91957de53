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
//! generation are fenced (409 `FENCED`). Subscriptions live in the server
//! (they are not stored durably) and see the commits made through it.

mod api;
mod pattern;
mod retry;
mod token;
mod wake;
#[cfg(feature = "webhooks")]
mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eddy_streams::{Offset, Storage};
use subtle::ConstantTimeEq;

pub(crate) use api::handle;

use crate::state::AppState;

/// How a subscription delivers wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Delivery {
    #[cfg(feature = "webhooks")]
    Webhook(webhook::Target),
    PullWake {
        wake_stream: String,
    },
}

impl Delivery {
    /// The stream the server appends wake events to, for a pull-wake
    /// subscription.
    fn wake_stream(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "webhooks")]
            Delivery::Webhook(_) => None,
            Delivery::PullWake { wake_stream } => Some(wake_stream),
        }
    }
}

/// Why a stream belongs to a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug)]
struct Watched {
    link: Link,
    tail: Offset,
    acked: Offset,
    /// The registry's commit count when a commit of it was last observed
    /// (0: never): a stream seen after a listing began is not dropped for
    /// missing from it.
    seen: u64,
}

impl Watched {
    /// A stream watched from `tail` on: data there is acknowledged.
    fn from(link: Link, tail: Offset) -> Self {
        Watched {
            link,
            tail,
            acked: tail,
            seen: 0,
        }
    }
}

/// The wake in progress: who holds it and until when.
#[derive(Clone, Debug)]
struct ActiveWake {
    wake_id: String,
    generation: u64,
    token: String,
    holder: Option<String>,
    expires: Instant,
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
            expires: Instant::now() + Duration::from_millis(sub.lease_ttl_ms),
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

/// One subscription.
#[derive(Debug)]
struct Subscription {
    id: String,
    /// The stream path prefix its paths are relative to (`v1/stream`).
    base_path: String,
    delivery: Delivery,
    pattern: Option<pattern::Pattern>,
    lease_ttl_ms: u64,
    description: Option<String>,
    /// A hash of the create request, to recognise an idempotent re-create
    /// without keeping the request.
    fingerprint: u64,
    /// The bytes it keeps, counted against `max_subscription_bytes`: its
    /// create request, and the paths of streams added to it later.
    stored_bytes: usize,
    streams: BTreeMap<String, Watched>,
    generation: u64,
    wake: Option<ActiveWake>,
    /// A pull-wake event was appended and not yet claimed.
    wake_posted: bool,
    /// Wakes (webhook notifications, pull-wake appends) that failed in a
    /// row: sets the retry delay.
    failures: u32,
    /// When a stream of its pattern was last left out for want of room
    /// and its streams were read again to make some (at most once per
    /// [`PRUNE_INTERVAL`]: each reading lists the store).
    pruned_at: Option<Instant>,
}

/// How often a subscription whose pattern watches all the streams it may
/// reads its streams again to drop deleted ones.
const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// The full store path of a path relative to a subscription's base.
fn joined(base_path: &str, relative: &str) -> String {
    if base_path.is_empty() {
        relative.to_owned()
    } else {
        format!("{base_path}/{relative}")
    }
}

impl Subscription {
    /// The full store path of a path relative to the base.
    fn full_path(&self, relative: &str) -> String {
        joined(&self.base_path, relative)
    }

    /// The path relative to the base, if the full path is under it.
    fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        if self.base_path.is_empty() {
            Some(full)
        } else {
            full.strip_prefix(self.base_path.as_str())?
                .strip_prefix('/')
        }
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
    /// at commit count `seen`), starting to watch it if it is new. Returns
    /// `false`, and leaves it out, when it is a new stream of the pattern
    /// and the subscription watches `max_matches` of those already.
    fn track(
        &mut self,
        relative: String,
        link: Link,
        tail: Offset,
        seen: u64,
        max_matches: usize,
    ) -> bool {
        if link == Link::Pattern
            && !self.streams.contains_key(&relative)
            && self.matched() >= max_matches
        {
            return false;
        }
        let watched = self.streams.entry(relative).or_insert(Watched {
            link,
            tail: Offset::ZERO,
            acked: Offset::ZERO,
            seen,
        });
        watched.tail = watched.tail.max(tail);
        watched.seen = watched.seen.max(seen);
        true
    }

    /// Whether a stream of its pattern left out for want of room should
    /// make it read its streams again now; if so, the time is noted.
    fn prune_due(&mut self) -> bool {
        let due = self
            .pruned_at
            .is_none_or(|at| at.elapsed() >= PRUNE_INTERVAL);
        if due {
            self.pruned_at = Some(Instant::now());
        }
        due
    }

    /// How many streams it watches because they match its pattern.
    fn matched(&self) -> usize {
        self.streams
            .values()
            .filter(|w| w.link == Link::Pattern)
            .count()
    }

    /// Brings it up to date with the store's streams under its base, as
    /// listed after the registry had observed `since` commits: tails move
    /// on, new matches are watched (up to `max_matches`), and streams of
    /// the pattern that no longer exist are dropped (an explicitly listed
    /// one stays: its client named it).
    fn record(&mut self, infos: &[eddy_streams::StreamInfo], since: u64, max_matches: usize) {
        let mut present = std::collections::HashSet::new();
        for info in infos {
            let Some(relative) = self.relative(&info.path) else {
                continue;
            };
            if self.watches(relative).is_some() {
                present.insert(relative.to_owned());
            }
        }
        self.streams.retain(|path, watched| {
            watched.link == Link::Explicit || watched.seen > since || present.contains(path)
        });
        let mut left_out = 0;
        for info in infos {
            let Some(relative) = self.relative(&info.path).map(str::to_owned) else {
                continue;
            };
            if let Some(link) = self.watches(&relative) {
                if !self.track(relative, link, info.tail, 0, max_matches) {
                    left_out += 1;
                }
            }
        }
        if left_out > 0 {
            tracing::warn!(
                subscription = %self.id,
                left_out,
                max_matches,
                "a subscription's pattern matches more streams than it may watch (--max-subscription-matches); the rest wake nobody"
            );
        }
    }

    fn pending(&self) -> Vec<(String, Offset, Offset)> {
        self.streams
            .iter()
            .filter(|(_, w)| w.tail > w.acked)
            .map(|(path, w)| (path.clone(), w.tail, w.acked))
            .collect()
    }

    fn wake_active(&self) -> bool {
        self.wake
            .as_ref()
            .is_some_and(|w| w.expires > Instant::now())
    }
}

/// Every subscription of one server, and what it needs to call webhooks.
pub(crate) struct Registry {
    subscriptions: Mutex<HashMap<String, Subscription>>,
    /// The store the subscriptions watch (and pull-wake events go to).
    store: Arc<dyn Storage>,
    /// Turns `true` when the server stops; ends retry timers.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// When failed wakes are tried again.
    retry: retry::Retry,
    #[cfg(feature = "webhooks")]
    webhooks: webhook::Webhooks,
    listening: OnceLock<()>,
    /// Commits observed so far (see [`Watched::seen`]).
    observed: AtomicU64,
    /// The most streams one subscription watches through its pattern.
    max_matches: usize,
    /// Keys the fingerprints of create requests.
    hasher: std::collections::hash_map::RandomState,
}

impl Registry {
    /// The fingerprint of a create request: equal for equal JSON (object
    /// keys in any order).
    fn fingerprint(&self, request: &serde_json::Value) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(request.to_string())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Subscription>> {
        self.subscriptions.lock().unwrap_or_else(|e| e.into_inner())
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
            "streams": streams,
        });
        if let Some(pattern) = &sub.pattern {
            out["pattern"] = pattern.as_str().into();
        }
        if let Some(description) = &sub.description {
            out["description"] = description.clone().into();
        }
        match &sub.delivery {
            #[cfg(feature = "webhooks")]
            Delivery::Webhook(target) => {
                out["type"] = "webhook".into();
                out["webhook"] = self.webhooks.describe(target, &sub.base_path);
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
    /// An empty registry (with a fresh webhook signing key).
    fn create(state: &AppState) -> Result<Arc<Registry>, SubscriptionError> {
        Ok(Arc::new(Registry {
            subscriptions: Mutex::new(HashMap::new()),
            store: Arc::clone(&state.store),
            stopping: state.stopping(),
            retry: retry::Retry::new(&state.config),
            #[cfg(feature = "webhooks")]
            webhooks: webhook::Webhooks::new(&state.config, Arc::clone(&state.metrics))?,
            listening: OnceLock::new(),
            observed: AtomicU64::new(0),
            max_matches: state.config.max_subscription_matches,
            hasher: std::collections::hash_map::RandomState::new(),
        }))
    }
}

/// The server's registry, created on first use.
async fn registry(state: &AppState) -> Result<Arc<Registry>, SubscriptionError> {
    state
        .subscriptions
        .get_or_try_init(|| async { Registry::create(state) })
        .await
        .cloned()
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
}

impl IntoResponse for SubscriptionError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}
