//! Webhook delivery (feature `webhooks`): the signing key, the HTTP client,
//! the addresses it may reach ([`address`]), and re-delivery of failed
//! notifications with exponential backoff.

mod address;
mod signing;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use eddy_streams::Offset;

use super::wake::{self, millis};
use super::{now_ms, ActiveWake, Registry, Subscription, SubscriptionError, Target};
use crate::error::with_sources;
use crate::{Metrics, ServerConfig};
use address::{AddressPolicy, GuardedResolver};
use signing::WebhookKey;

/// How long one notification may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// The most redirects a notification follows.
const MAX_REDIRECTS: usize = 5;

/// What a server needs to call webhooks.
pub(super) struct Webhooks {
    key: WebhookKey,
    http: reqwest::Client,
    policy: Arc<AddressPolicy>,
    metrics: Arc<Metrics>,
    /// The most bytes of an answer read.
    max_answer_bytes: usize,
}

impl Webhooks {
    /// The store's signing key (made by the first server that needs one)
    /// and a client that reaches permitted addresses only.
    pub(super) async fn new(
        config: &ServerConfig,
        metrics: Arc<Metrics>,
        documents: &dyn eddy_streams::Documents,
    ) -> Result<Self, SubscriptionError> {
        let key = WebhookKey::shared(documents).await?;
        let policy = Arc::new(AddressPolicy::new(config.webhook_allowed_networks.clone()));
        let redirects = Arc::clone(&policy);
        let http = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            // A proxy would connect wherever the URL says, past the checks.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver(Arc::clone(&policy))))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    return attempt.error("too many redirects");
                }
                match redirects.check_literal(attempt.url()) {
                    Ok(()) => attempt.follow(),
                    Err(why) => {
                        let why = format!("redirect to `{}` refused: it {why}", attempt.url());
                        attempt.error(why)
                    }
                }
            }))
            .build()
            .map_err(|e| {
                SubscriptionError::internal(format!("cannot build the webhook client: {e}"))
            })?;
        Ok(Webhooks {
            key,
            http,
            policy,
            metrics,
            max_answer_bytes: config.max_webhook_answer_bytes,
        })
    }

    /// The public key as a JSON Web Key Set.
    pub(super) fn jwks(&self) -> serde_json::Value {
        self.key.jwks()
    }

    /// Checks a webhook URL a client sent: http(s), and a host whose
    /// addresses are all permitted.
    pub(super) async fn check_url(&self, url: &str) -> Result<(), SubscriptionError> {
        self.policy.check(url).await.map(drop).map_err(|why| {
            SubscriptionError::new(
                StatusCode::BAD_REQUEST,
                "WEBHOOK_URL_REJECTED",
                format!("webhook URL `{url}` {why}"),
            )
        })
    }

    /// Counts a failed attempt.
    pub(super) fn failed(&self) {
        self.metrics.webhook_failures.increment(1);
    }
}

impl Webhooks {
    /// The `webhook` object of a subscription's description.
    pub(super) fn describe(&self, target: &Target, base_path: &str) -> serde_json::Value {
        serde_json::json!({
            "url": target.url,
            "signing": {
                "alg": "ed25519",
                "kid": self.key.kid(),
                "jwks_url": target.public_url(base_path, "jwks.json"),
            },
        })
    }
}

/// One wake of a webhook subscription, on its way to the receiver.
pub(super) struct Notification {
    id: String,
    url: String,
    body: serde_json::Value,
    generation: u64,
    /// The tails the notification shows, acknowledged by `{"done": true}`.
    shown: Vec<(String, Offset)>,
    /// How long the send may take: within the wake's lease, so that no
    /// other server begins the next wake while this one still sends.
    timeout: Duration,
}

impl Notification {
    /// Starts a new wake generation of `sub` for its `pending` streams.
    pub(super) fn start(
        sub: &mut Subscription,
        target: &Target,
        pending: Vec<(String, Offset, Offset)>,
    ) -> Result<Notification, getrandom::Error> {
        let wake = ActiveWake::begin(sub, None)?;
        let streams: Vec<serde_json::Value> = pending
            .iter()
            .map(|(path, tail, acked)| {
                serde_json::json!({
                    "path": path,
                    "tail_offset": tail.to_string(),
                    "acked_offset": acked.to_string(),
                    "has_pending": true,
                })
            })
            .collect();
        let callback = format!("subscriptions/{}/callback", sub.id);
        let body = serde_json::json!({
            "subscription_id": sub.id,
            "wake_id": wake.wake_id,
            "generation": wake.generation,
            "callback_url": target.public_url(&sub.base_path, &callback),
            "callback_token": wake.token,
            "streams": streams,
        });
        let notification = Notification {
            id: sub.id.clone(),
            url: target.url.clone(),
            body,
            generation: wake.generation,
            shown: pending.into_iter().map(|(p, t, _)| (p, t)).collect(),
            timeout: SEND_TIMEOUT.min(Duration::from_millis(sub.lease_ttl_ms)),
        };
        sub.wake = Some(wake);
        Ok(notification)
    }

    /// POSTs the signed notification and records the outcome: a
    /// `{"done": true}` answer acknowledges everything it showed; another
    /// success leaves the wake to its lease (the next wake is begun when
    /// it ends, by whichever server sweeps first); a failure ends the wake
    /// and re-delivers after a backoff.
    pub(super) async fn deliver(self, registry: Arc<Registry>) {
        let webhooks = &registry.webhooks;
        let outcome = self.send(webhooks).await;
        match &outcome {
            Ok(_) => webhooks.metrics.webhook_deliveries.increment(1),
            Err(why) => {
                tracing::warn!(subscription = %self.id, url = %self.url, error = %why, "webhook delivery failed");
                webhooks.failed();
            }
        }
        let now = now_ms();
        let recorded = registry
            .update(&self.id, |sub| {
                let current = sub
                    .wake
                    .as_ref()
                    .is_some_and(|w| w.generation == self.generation);
                match &outcome {
                    Ok(true) if current => {
                        sub.failures = 0;
                        for (path, tail) in &self.shown {
                            if let Some(watched) = sub.streams.get_mut(path) {
                                watched.acked = watched.acked.max(*tail);
                            }
                        }
                        sub.wake = None;
                        // Data that arrived meanwhile wakes it again now.
                        Ok((None, wake::plan(&registry, sub, now)))
                    }
                    Ok(_) => {
                        sub.failures = 0;
                        Ok((Some(Duration::from_millis(sub.lease_ttl_ms)), None))
                    }
                    Err(_) => {
                        if current {
                            // Acks for this wake are fenced from now on.
                            sub.wake = None;
                        }
                        let delay = registry.retry.after_failure(sub);
                        sub.retry_at_ms = now.saturating_add(millis(delay));
                        Ok((Some(delay), None))
                    }
                }
            })
            .await;
        match recorded {
            Ok((check_again, action)) => {
                wake::run(&registry, action);
                if let Some(delay) = check_again {
                    wake::wake_later(&registry, self.id, delay);
                }
            }
            Err(err) => {
                // Gone, or the store failed: the wake's lease ends and a
                // sweep begins the next one.
                tracing::debug!(subscription = %self.id, error = %err.body, "cannot record a webhook delivery");
            }
        }
    }

    /// Sends the notification; `Ok(true)` when the receiver answered
    /// `{"done": true}`.
    async fn send(&self, webhooks: &Webhooks) -> Result<bool, String> {
        let raw = self.body.to_string();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let response = webhooks
            .http
            .post(&self.url)
            .timeout(self.timeout)
            .header("content-type", "application/json")
            .header(
                "webhook-signature",
                webhooks.key.signature(now, raw.as_bytes()),
            )
            .body(raw)
            .send()
            .await
            .map_err(|e| with_sources(&e))?;
        if !response.status().is_success() {
            return Err(format!("the receiver answered {}", response.status()));
        }
        let answer = read_answer(response, webhooks.max_answer_bytes).await?;
        let answer: Option<serde_json::Value> = serde_json::from_slice(&answer).ok();
        Ok(answer
            .as_ref()
            .and_then(|a| a.get("done"))
            .and_then(serde_json::Value::as_bool)
            == Some(true))
    }
}

/// A receiver's answer body, read up to `limit` bytes: a longer one is an
/// error (a receiver must not make the server hold what it likes).
async fn read_answer(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let too_long = || {
        format!("the receiver's answer is longer than {limit} bytes (--webhook-max-answer-bytes)")
    };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_long());
    }
    let mut answer = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| with_sources(&e))? {
        if answer.len() + chunk.len() > limit {
            return Err(too_long());
        }
        answer.extend_from_slice(&chunk);
    }
    Ok(answer)
}
