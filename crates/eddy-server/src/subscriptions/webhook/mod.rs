//! Webhook delivery (feature `webhooks`): the signing key, the HTTP client,
//! and the rules for the URLs it may call.

mod signing;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use eddy_streams::Offset;

use super::{token, ActiveWake, Registry, Subscription, SubscriptionError};
use signing::WebhookKey;

/// What a server needs to call webhooks.
pub(super) struct Webhooks {
    key: WebhookKey,
    http: reqwest::Client,
}

impl Webhooks {
    /// A fresh signing key and a client.
    pub(super) fn new() -> Result<Self, SubscriptionError> {
        let key = WebhookKey::generate().map_err(|e| {
            SubscriptionError::internal(format!("no randomness for the signing key: {e}"))
        })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                SubscriptionError::internal(format!("cannot build the webhook client: {e}"))
            })?;
        Ok(Webhooks { key, http })
    }

    /// The key id receivers look up in the JWKS.
    pub(super) fn kid(&self) -> &str {
        self.key.kid()
    }

    /// The public key as a JSON Web Key Set.
    pub(super) fn jwks(&self) -> serde_json::Value {
        self.key.jwks()
    }
}

/// Refuses webhook URLs that point into private networks (loopback stays
/// allowed, for receivers on the same machine).
pub(super) fn check_url(url: &str) -> Result<(), SubscriptionError> {
    let reject = |why: &str| {
        SubscriptionError::new(
            StatusCode::BAD_REQUEST,
            "WEBHOOK_URL_REJECTED",
            format!("webhook URL `{url}` {why}"),
        )
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| reject("is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(reject("must be http or https"));
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err(reject("has no host")),
    };
    let private = match ip {
        IpAddr::V4(v4) => {
            v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
        }
        IpAddr::V6(v6) => {
            v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xfe00) == 0xfc00
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    if private {
        Err(reject("points into a private network"))
    } else {
        Ok(())
    }
}

/// Where a webhook subscription delivers, and the public origin its
/// callback and JWKS URLs start with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::subscriptions) struct Target {
    pub url: String,
    /// `http://host`, from the request that made the subscription.
    pub origin: String,
}

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

impl Webhooks {
    /// The `webhook` object of a subscription's description.
    pub(super) fn describe(&self, target: &Target, base_path: &str) -> serde_json::Value {
        serde_json::json!({
            "url": target.url,
            "signing": {
                "alg": "ed25519",
                "kid": self.kid(),
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
}

impl Notification {
    /// Starts a new wake generation of `sub` for its `pending` streams.
    pub(super) fn start(
        sub: &mut Subscription,
        target: &Target,
        pending: Vec<(String, Offset, Offset)>,
    ) -> Notification {
        sub.generation += 1;
        let wake = ActiveWake {
            wake_id: token::token(),
            generation: sub.generation,
            token: token::token(),
            holder: None,
            expires: Instant::now() + Duration::from_millis(sub.lease_ttl_ms),
        };
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
        };
        sub.wake = Some(wake);
        notification
    }

    /// POSTs the signed notification; a `{"done": true}` answer
    /// acknowledges everything it showed.
    pub(super) async fn deliver(self, registry: Arc<Registry>) {
        let Notification {
            id,
            url,
            body,
            generation,
            shown,
        } = self;
        let raw = body.to_string();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let webhooks = &registry.webhooks;
        let sent = webhooks
            .http
            .post(&url)
            .header("content-type", "application/json")
            .header(
                "webhook-signature",
                webhooks.key.signature(now, raw.as_bytes()),
            )
            .body(raw)
            .send()
            .await;
        let answer: Option<serde_json::Value> = match sent {
            Ok(response) if response.status().is_success() => response.json().await.ok(),
            Ok(response) => {
                tracing::warn!(%url, status = %response.status(), "webhook refused the notification");
                None
            }
            Err(err) => {
                tracing::warn!(%url, error = %err, "webhook delivery failed");
                None
            }
        };
        if answer
            .as_ref()
            .and_then(|a| a.get("done"))
            .and_then(serde_json::Value::as_bool)
            == Some(true)
        {
            let mut subscriptions = registry.lock();
            if let Some(sub) = subscriptions.get_mut(&id) {
                if sub
                    .wake
                    .as_ref()
                    .is_some_and(|w| w.generation == generation)
                {
                    for (path, tail) in shown {
                        if let Some(watched) = sub.streams.get_mut(&path) {
                            watched.acked = watched.acked.max(tail);
                        }
                    }
                    sub.wake = None;
                }
            }
        }
    }
}
