//! The HTTP endpoints under `<base>/__ds/`.

use std::sync::Arc;

use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use eddy_streams::{Offset, StreamPath};
use percent_encoding::percent_decode_str;

use super::listing;
use super::pattern::Pattern;
use super::wake::{self, Ack};
use super::{
    now_ms, registry, stored, ActiveWake, Delivery, Link, Post, Registry, Subscription,
    SubscriptionError, Watched,
};
use crate::auth::{self, Access, Caller, Operation};
use crate::state::AppState;

/// Answers a request for `<base_path>/__ds/<rest>`.
pub(crate) async fn handle(
    state: &AppState,
    method: &Method,
    base_path: &str,
    rest: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    match route(state, method, base_path, rest, headers, body).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn route(
    state: &AppState,
    method: &Method,
    base_path: &str,
    rest: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, SubscriptionError> {
    let registry = registry(state).await?;
    #[cfg(feature = "webhooks")]
    if rest == "jwks.json" {
        return Ok((
            [(header::CONTENT_TYPE, "application/jwk-set+json")],
            registry.webhooks.jwks().to_string(),
        )
            .into_response());
    }
    let Some(rest) = rest.strip_prefix("subscriptions/") else {
        return Err(SubscriptionError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "unknown reserved endpoint",
        ));
    };
    let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
    if id.is_empty() {
        return Err(SubscriptionError::bad_request(
            "a subscription id is required",
        ));
    }
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    stored::check_id(id)?;
    match (method.clone(), action) {
        (Method::PUT, "") => create(state, &registry, base_path, id, headers, &body).await,
        (Method::GET, "") => {
            let (sub, _) = registry
                .load(id)
                .await?
                .ok_or_else(|| SubscriptionError::not_found(id))?;
            Ok(axum::Json(registry.describe(&sub)).into_response())
        }
        (Method::DELETE, "") => {
            registry.remove(id).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Method::POST, "streams") => {
            let request: StreamsRequest = json(&body)?;
            let limit = state.config.max_subscription_streams;
            check_explicit(request.streams.len(), limit)?;
            let tails = tails(state, base_path, &request.streams).await;
            registry
                .update(id, |sub| {
                    let explicit = sub.streams.values().filter(|w| w.link == Link::Explicit);
                    let new: Vec<&String> = request
                        .streams
                        .iter()
                        .filter(|path| !sub.streams.contains_key(path.as_str()))
                        .collect();
                    check_explicit(explicit.count() + new.len(), limit)?;
                    let added: usize = new.iter().map(|path| path.len()).sum();
                    check_size(sub.stored_bytes + added, &state.config)?;
                    check_watched(sub, new.iter().map(|path| path.as_str()))?;
                    sub.stored_bytes += added;
                    add_explicit(sub, &tails);
                    Ok(())
                })
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Method::DELETE, action) if action.starts_with("streams/") => {
            let path = percent_decode_str(&action["streams/".len()..])
                .decode_utf8()
                .map_err(|_| SubscriptionError::bad_request("the stream path is not UTF-8"))?;
            registry
                .update(id, |sub| {
                    sub.streams.remove(path.as_ref());
                    Ok(())
                })
                .await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Method::POST, "callback" | "ack") => {
            let ack: Ack = json(&body)?;
            let next_wake = wake::acknowledge(&registry, id, token, ack).await?;
            Ok(
                axum::Json(serde_json::json!({ "ok": true, "next_wake": next_wake }))
                    .into_response(),
            )
        }
        (Method::POST, "claim") => {
            let request: ClaimRequest = json(&body)?;
            // A held lease is refused before anything else is read.
            let (sub, _) = registry
                .load(id)
                .await?
                .ok_or_else(|| SubscriptionError::not_found(id))?;
            unclaimed(&sub, now_ms())?;
            // With work recorded, the claim hands it out: a commit not
            // recorded yet wakes the subscription again once it is. With
            // none, the store is read for commits the feed has not
            // brought yet.
            if sub.has_pending() {
                return claim(&registry, id, request.worker).await;
            }
            if let Err(err) = wake::refresh(&registry, id).await {
                if err.is_not_found() {
                    return Err(err);
                }
                tracing::warn!(subscription = %id, error = %err.body, "cannot read a subscription's streams before a claim; claiming what it knows");
            }
            claim(&registry, id, request.worker).await
        }
        (Method::POST, "release") => {
            let release: Release = json(&body)?;
            let now = now_ms();
            let action = registry
                .update(id, |sub| {
                    let live = sub
                        .wake
                        .as_ref()
                        .is_some_and(|w| w.is(&release.wake_id, release.generation, token));
                    if !live {
                        return Err(SubscriptionError::fenced());
                    }
                    sub.wake = None;
                    sub.post = Post::None;
                    Ok(wake::plan(&registry, sub, now))
                })
                .await?;
            wake::run(&registry, action);
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        _ => Err(SubscriptionError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            format!("{method} is not supported here"),
        )),
    }
}

#[derive(serde::Deserialize)]
struct CreateRequest {
    #[serde(rename = "type")]
    kind: String,
    pattern: Option<String>,
    #[serde(default)]
    streams: Vec<String>,
    #[cfg(feature = "webhooks")]
    webhook: Option<WebhookRequest>,
    wake_stream: Option<String>,
    lease_ttl_ms: Option<u64>,
    description: Option<String>,
}

#[cfg(feature = "webhooks")]
#[derive(serde::Deserialize)]
struct WebhookRequest {
    url: String,
}

#[derive(serde::Deserialize)]
struct StreamsRequest {
    streams: Vec<String>,
}

#[derive(serde::Deserialize)]
struct ClaimRequest {
    worker: String,
}

#[derive(serde::Deserialize)]
struct Release {
    wake_id: String,
    generation: u64,
}

fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, SubscriptionError> {
    serde_json::from_slice(body)
        .map_err(|e| SubscriptionError::bad_request(format!("bad JSON body: {e}")))
}

async fn create(
    state: &AppState,
    registry: &Arc<Registry>,
    base_path: &str,
    id: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, SubscriptionError> {
    check_size(body.len(), &state.config)?;
    let raw: serde_json::Value = json(body)?;
    let fingerprint = fingerprint(&raw);
    let request: CreateRequest = json(body)?;
    let delivery = match request.kind.as_str() {
        #[cfg(feature = "webhooks")]
        "webhook" => {
            let url = request
                .webhook
                .as_ref()
                .map(|w| w.url.clone())
                .ok_or_else(|| {
                    SubscriptionError::bad_request("a webhook subscription needs `webhook.url`")
                })?;
            registry.webhooks.check_url(&url).await?;
            let host = headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("localhost");
            Delivery::Webhook(super::Target {
                url,
                origin: format!("http://{host}"),
            })
        }
        #[cfg(not(feature = "webhooks"))]
        "webhook" => {
            return Err(SubscriptionError::bad_request(
                "this server is built without webhook subscriptions (feature `webhooks`)",
            ))
        }
        "pull-wake" => Delivery::PullWake {
            wake_stream: request.wake_stream.clone().ok_or_else(|| {
                SubscriptionError::bad_request("a pull-wake subscription needs `wake_stream`")
            })?,
        },
        other => {
            return Err(SubscriptionError::bad_request(format!(
                "unknown subscription type `{other}`"
            )))
        }
    };
    if let Some(wake_stream) = delivery.wake_stream() {
        // The server appends wake events to it on the caller's behalf.
        let target = super::joined(base_path, wake_stream);
        let caller = Caller::of(&state.config, headers);
        let wake = Access::Stream(Operation::Wake, &target);
        if let Err(denied) = auth::authorize(&state.config, caller, wake) {
            return Ok(denied.into_response());
        }
    }
    if request.pattern.is_none() && request.streams.is_empty() {
        return Err(SubscriptionError::bad_request(
            "give a `pattern`, `streams`, or both",
        ));
    }
    check_explicit(request.streams.len(), state.config.max_subscription_streams)?;
    let tails = tails(state, base_path, &request.streams).await;
    let pattern = request
        .pattern
        .as_deref()
        .map(|text| Pattern::compile(text, &state.config))
        .transpose()
        .map_err(|reason| {
            SubscriptionError::new(StatusCode::BAD_REQUEST, "INVALID_PATTERN", reason)
        })?;
    let baseline = match &pattern {
        Some(pattern) => baseline(state, base_path, pattern).await?,
        None => Vec::new(),
    };
    let limit = state.config.max_subscriptions;
    {
        let known = registry.known();
        if known.len() >= limit && !known.contains_key(id) {
            return Err(SubscriptionError::limit(
                StatusCode::SERVICE_UNAVAILABLE,
                "max_subscriptions",
                format!(
                    "the store holds {limit} subscriptions, the server's limit; delete one first"
                ),
            ));
        }
    }
    let mut sub = Subscription {
        id: id.to_owned(),
        base_path: base_path.to_owned(),
        delivery,
        pattern,
        lease_ttl_ms: lease_ttl_ms(request.lease_ttl_ms, &state.config)?,
        description: request.description,
        fingerprint,
        stored_bytes: body.len(),
        streams: Default::default(),
        generation: 0,
        wake: None,
        post: Post::None,
        failures: 0,
        retry_at_ms: 0,
    };
    add_explicit(&mut sub, &tails);
    for (path, tail) in baseline {
        sub.streams
            .entry(path)
            .or_insert(Watched::from(Link::Pattern, tail));
    }
    // Its explicit streams and its pattern's first matches.
    check_watched(&sub, [])?;
    wake::listen(registry, state);
    if registry.insert(&sub).await? {
        return Ok((StatusCode::CREATED, axum::Json(registry.describe(&sub))).into_response());
    }
    match registry.load(id).await? {
        Some((existing, _))
            if existing.fingerprint == sub.fingerprint && existing.base_path == base_path =>
        {
            Ok((StatusCode::OK, axum::Json(registry.describe(&existing))).into_response())
        }
        _ => Err(SubscriptionError::new(
            StatusCode::CONFLICT,
            "CONFLICT",
            format!("subscription `{id}` exists with another configuration"),
        )),
    }
}

/// The fingerprint of a create request: equal for equal JSON (object keys
/// in any order), and the same on every server.
fn fingerprint(request: &serde_json::Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(request.to_string().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The current tails of streams (relative to the base), zero for streams
/// that do not exist yet.
async fn tails(state: &AppState, base_path: &str, streams: &[String]) -> Vec<(String, Offset)> {
    let mut out = Vec::with_capacity(streams.len());
    for relative in streams {
        let tail = match StreamPath::new(super::joined(base_path, relative)) {
            Ok(path) => state
                .store
                .head(&path)
                .await
                .map(|i| i.tail)
                .unwrap_or(Offset::ZERO),
            Err(_) => Offset::ZERO,
        };
        out.push((relative.clone(), tail));
    }
    out
}

/// The streams that match a new subscription's pattern already, with
/// their tails: the subscription starts acknowledged there. Refused when
/// they are more than it may watch (`max_subscription_matches`), as soon
/// as that is known: only the paths under the pattern's literal prefix
/// are listed, and only the matches' tails are read.
async fn baseline(
    state: &AppState,
    base_path: &str,
    pattern: &Pattern,
) -> Result<Vec<(String, Offset)>, SubscriptionError> {
    let prefix = super::prefix(base_path);
    let max_matches = state.config.max_subscription_matches;
    let found = listing::matches(&*state.store, &prefix, pattern, max_matches)
        .await
        .map_err(|e| SubscriptionError::store(&e))?;
    let Some(infos) = found else {
        return Err(SubscriptionError::limit(
            StatusCode::TOO_MANY_REQUESTS,
            "max_subscription_matches",
            format!(
                "the pattern matches more than {max_matches} streams already; a subscription watches at most {max_matches} through its pattern"
            ),
        ));
    };
    Ok(infos
        .into_iter()
        .filter_map(|info| {
            let relative = info.path.strip_prefix(prefix.as_str())?.to_owned();
            Some((relative, info.tail))
        })
        .collect())
}

/// The longest lease a subscription may ask for.
const MAX_LEASE_MS: u64 = 24 * 60 * 60 * 1000;

/// The lease a create asks for (30 s when it names none), refused when it
/// is shorter than the server's minimum (a wake would end before a worker
/// could act on it, and start again at once) or longer than a day.
fn lease_ttl_ms(
    asked: Option<u64>,
    config: &crate::ServerConfig,
) -> Result<u64, SubscriptionError> {
    let lease = asked.unwrap_or(30_000);
    let min = u64::try_from(config.min_lease_ttl.as_millis()).unwrap_or(u64::MAX);
    if lease < min || lease > MAX_LEASE_MS {
        return Err(SubscriptionError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_LEASE",
            format!("`lease_ttl_ms` must be between {min} (the server's --min-lease-ttl) and {MAX_LEASE_MS}; it is {lease}"),
        ));
    }
    Ok(lease)
}

/// Refuses a subscription that would keep more than
/// `max_subscription_bytes`: its create request, and the paths of the
/// streams added to it later.
fn check_size(bytes: usize, config: &crate::ServerConfig) -> Result<(), SubscriptionError> {
    let limit = config.max_subscription_bytes;
    if bytes > limit {
        return Err(SubscriptionError::limit(
            StatusCode::PAYLOAD_TOO_LARGE,
            "max_subscription_bytes",
            format!("a subscription keeps at most {limit} bytes (its request and the stream paths added to it); this one would keep {bytes}"),
        ));
    }
    Ok(())
}

/// Refuses streams that would take a subscription's document past
/// [`MAX_WATCHED_BYTES`](super::subscription::MAX_WATCHED_BYTES).
fn check_watched<'a>(
    sub: &Subscription,
    paths: impl IntoIterator<Item = &'a str>,
) -> Result<(), SubscriptionError> {
    if sub.fits(paths) {
        return Ok(());
    }
    Err(SubscriptionError::limit(
        StatusCode::PAYLOAD_TOO_LARGE,
        "max_subscription_bytes",
        "the streams a subscription watches (their paths and offsets) would not fit in its stored form; watch fewer or shorter paths",
    ))
}

/// Refuses an explicit stream list longer than the limit.
fn check_explicit(count: usize, limit: usize) -> Result<(), SubscriptionError> {
    if count > limit {
        return Err(SubscriptionError::limit(
            StatusCode::TOO_MANY_REQUESTS,
            "max_subscription_streams",
            format!("a subscription lists at most {limit} streams explicitly; this one would list {count}"),
        ));
    }
    Ok(())
}

/// Adds explicitly listed streams, acknowledged up to their current tails:
/// a subscription wakes for data that arrives after it is made.
fn add_explicit(sub: &mut Subscription, tails: &[(String, Offset)]) {
    for (path, tail) in tails {
        sub.streams
            .entry(path.clone())
            .or_insert(Watched::from(Link::Explicit, *tail));
    }
}

/// Refuses a claim while a worker holds the subscription's lease.
fn unclaimed(sub: &Subscription, now: u64) -> Result<(), SubscriptionError> {
    let holder = sub
        .wake
        .as_ref()
        .filter(|w| w.expires_ms > now)
        .and_then(|w| w.holder.clone());
    match holder {
        None => Ok(()),
        Some(holder) => {
            let mut err = SubscriptionError::new(
                StatusCode::CONFLICT,
                "ALREADY_CLAIMED",
                format!("worker `{holder}` holds the lease"),
            );
            err.body["error"]["current_holder"] = holder.into();
            Err(err)
        }
    }
}

/// Claims a pull-wake subscription's lease for `worker`: one write, so
/// of workers claiming at once through any servers, one wins.
async fn claim(
    registry: &Arc<Registry>,
    id: &str,
    worker: String,
) -> Result<Response, SubscriptionError> {
    let now = now_ms();
    let body = registry
        .update(id, |sub| {
            if !matches!(sub.delivery, Delivery::PullWake { .. }) {
                return Err(SubscriptionError::bad_request(
                    "only pull-wake subscriptions are claimed",
                ));
            }
            unclaimed(sub, now)?;
            let pending = sub.pending();
            if pending.is_empty() {
                return Ok(None);
            }
            let wake = ActiveWake::begin(sub, Some(worker.clone())).map_err(|e| {
                SubscriptionError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "UNAVAILABLE",
                    format!("the OS random number generator failed: {e}"),
                )
            })?;
            let body = serde_json::json!({
                "subscription_id": sub.id,
                "wake_id": wake.wake_id,
                "generation": wake.generation,
                "token": wake.token,
                "lease_ttl_ms": sub.lease_ttl_ms,
                "streams": pending.iter().map(|(path, tail, acked)| serde_json::json!({
                    "path": path,
                    "tail_offset": tail.to_string(),
                    "acked_offset": acked.to_string(),
                })).collect::<Vec<_>>(),
            });
            sub.wake = Some(wake);
            sub.post = Post::None;
            Ok(Some(body))
        })
        .await?;
    Ok(match body {
        Some(body) => axum::Json(body).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}
