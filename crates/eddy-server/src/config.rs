//! What a server is configured with.

use std::time::Duration;

use ipnet::IpNet;

/// Limits and behaviour of one server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// How long a long-poll waits before answering 204.
    pub long_poll_timeout: Duration,
    /// The largest request body accepted (larger → 413).
    pub max_body_bytes: usize,
    /// How long a client may take to send a request body (→ 408).
    pub body_timeout: Duration,
    /// How long a client may take to send the request line and headers
    /// (the connection is closed).
    pub header_timeout: Duration,
    /// The most bytes of messages one read response carries.
    pub max_read_bytes: usize,
    /// The most concurrent live readers (long-poll waits and SSE streams);
    /// more get 503.
    pub max_live_readers: usize,
    /// How often an idle SSE stream sends a keep-alive comment.
    pub sse_keep_alive: Duration,
    /// When set, every request but `/healthz` and CORS preflights must
    /// carry `Authorization: Bearer <token>` (or the admin token).
    pub auth_token: Option<String>,
    /// The bearer token of administrative requests: only they may create,
    /// append to or delete streams under
    /// [`RESERVED_STREAM_PREFIX`](crate::RESERVED_STREAM_PREFIX)
    /// (projection checkpoints). Without it nobody may.
    pub admin_token: Option<String>,
    /// How long a shutdown waits for in-flight requests; past it, the
    /// remaining connections are dropped.
    pub shutdown_grace: Duration,
    /// The most streams the server holds (creates and forks beyond → 503).
    pub max_streams: usize,
    /// The most subscriptions the server holds (more → 503).
    pub max_subscriptions: usize,
    /// The most streams one subscription lists explicitly (more → 429).
    pub max_subscription_streams: usize,
    /// The longest subscription pattern, in bytes (longer → 400).
    pub max_pattern_bytes: usize,
    /// The most wildcards (`*`, `**`, `?`, `[…]`, `{…}`) in one
    /// subscription pattern (more → 400).
    pub max_pattern_wildcards: usize,
    /// Networks webhooks may reach although they are internal (loopback,
    /// private, link-local, …); every other internal address is refused
    /// when a subscription is made, when a notification is sent, and on
    /// each redirect.
    pub webhook_allowed_networks: Vec<IpNet>,
    /// How long after a failed webhook notification it is sent again; the
    /// delay doubles with each failure in a row, up to
    /// [`webhook_retry_max`](Self::webhook_retry_max).
    pub webhook_retry_initial: Duration,
    /// The longest delay between re-deliveries of a failing webhook.
    pub webhook_retry_max: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            long_poll_timeout: Duration::from_secs(20),
            max_body_bytes: eddy_streams::DEFAULT_MAX_APPEND_BYTES,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            max_read_bytes: 1024 * 1024,
            max_live_readers: 10_000,
            sse_keep_alive: Duration::from_secs(15),
            auth_token: None,
            admin_token: None,
            shutdown_grace: Duration::from_secs(30),
            max_streams: 1_000_000,
            max_subscriptions: 10_000,
            max_subscription_streams: 1_000,
            max_pattern_bytes: 256,
            max_pattern_wildcards: 16,
            webhook_allowed_networks: Vec::new(),
            webhook_retry_initial: Duration::from_secs(1),
            webhook_retry_max: Duration::from_secs(300),
        }
    }
}
