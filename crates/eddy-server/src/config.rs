//! What a server is configured with.

use std::sync::Arc;
use std::time::Duration;

use eddy_projection::CheckpointStore;
use ipnet::IpNet;

use crate::{CompactionRule, RetentionRule};
pub use tower_http::CompressionLevel;

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
    /// (the connection is closed). A new connection's first request head
    /// must arrive within it from the accept, the TLS handshake and the
    /// HTTP/2 preface included: a socket that sends nothing is closed
    /// after it.
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in progress
    /// (a long-poll or an SSE stream is in progress until its last byte);
    /// then it is closed (HTTP/2: GOAWAY). On HTTP/1 the wait for the next
    /// request's head is also bounded by
    /// [`header_timeout`](Self::header_timeout), whichever is shorter.
    pub idle_timeout: Duration,
    /// How long a response may have bytes the client does not take: a
    /// connection on which no response has progressed for this long
    /// while one had bytes to send is closed, and its live-reader slots
    /// and buffers freed. (A long-poll or an idle SSE stream waiting for
    /// data is not a response the client fails to take.)
    pub write_timeout: Duration,
    /// The most bytes of read responses (catch-up and long-poll bodies)
    /// one connection holds before its client takes them; a read that
    /// would pass it waits until the client takes earlier ones. With
    /// HTTP/2's many streams per connection this bounds what a client
    /// that stops reading pins (at least one read's budget,
    /// [`max_read_bytes`](Self::max_read_bytes), is always allowed).
    pub max_unread_bytes: usize,
    /// The most connections open at once; more wait (in the listen
    /// backlog) until one closes.
    pub max_connections: usize,
    /// The byte budget of one read: the most bytes of messages one
    /// catch-up or long-poll response, or one SSE data event, carries. It
    /// also bounds what a request holds in memory: a response body is
    /// made from one store read at a time, and the next read happens only
    /// once the connection has taken the previous one, so a slow reader
    /// never makes the server buffer more than this (plus the framing of
    /// the body: JSON array commas, SSE lines, base64 on binary SSE).
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
    /// The most bytes one subscription keeps: its create request, and the
    /// paths of streams added to it later (more → 413).
    pub max_subscription_bytes: usize,
    /// The most streams one subscription watches because they match its
    /// pattern: a create whose pattern matches more already → 429; later
    /// matches beyond it are left out (logged), after streams of the
    /// pattern that were deleted are dropped to make room.
    pub max_subscription_matches: usize,
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
    /// The most bytes of a webhook receiver's answer the server reads; a
    /// longer answer is a failed delivery (sent again later).
    pub max_webhook_answer_bytes: usize,
    /// The shortest lease a subscription may ask for (`lease_ttl_ms`;
    /// shorter → 400 `INVALID_LEASE`). The longest is a day.
    pub min_lease_ttl: Duration,
    /// HTTP/2 stream and flow-control limits.
    pub http2: Http2Config,
    /// Response compression.
    pub compression: CompressionConfig,
    /// How read responses may be cached by browsers, proxies and CDNs.
    pub cache: CacheConfig,
    /// How long after a failed wake (a webhook notification, or the append
    /// of a pull-wake event) it is tried again; the delay doubles with
    /// each failure in a row, up to
    /// [`wake_retry_max`](Self::wake_retry_max).
    pub wake_retry_initial: Duration,
    /// The longest delay between attempts of a failing wake.
    pub wake_retry_max: Duration,
    /// How often the server reads all of the store's subscriptions: to
    /// learn of those made through other servers, and to begin the wakes
    /// that are due and held by no one (a lease that ended, a server that
    /// died while delivering). A wake whose server died is taken over
    /// within its lease plus this interval.
    pub subscription_sweep_interval: Duration,
    /// Serve the console: the page at `/console` and the bindings at
    /// `/_eddy/bindings` (on by default).
    pub console: bool,
    /// A SQL host's checkpoint table in the store's database, whose
    /// bindings `/_eddy/bindings` lists too (`eddy serve` sets it on
    /// SQLite and PostgreSQL).
    pub checkpoint_table: Option<CheckpointTable>,
    /// Retention policies by path pattern, for the streams created without
    /// an `Eddy-Retention` header: the first rule that matches the path
    /// gives the policy stored with the stream (see [`RetentionRule`]).
    pub retention: Vec<RetentionRule>,
    /// Compaction policies by path pattern, for the streams created
    /// without an `Eddy-Compaction` header (see [`CompactionRule`]).
    pub compaction: Vec<CompactionRule>,
}

/// A checkpoint store that `/_eddy/bindings` reads besides the store's
/// checkpoint streams: a SQL host's table
/// ([`SqliteCheckpoints`](eddy_projection::SqliteCheckpoints), `PgCheckpoints`).
#[derive(Clone)]
pub struct CheckpointTable(pub Arc<dyn CheckpointStore>);

impl std::fmt::Debug for CheckpointTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckpointTable")
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            long_poll_timeout: Duration::from_secs(20),
            max_body_bytes: eddy_streams::DEFAULT_MAX_APPEND_BYTES,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_unread_bytes: 16 * 1024 * 1024,
            max_connections: 10_000,
            max_read_bytes: 1024 * 1024,
            max_live_readers: 10_000,
            sse_keep_alive: Duration::from_secs(15),
            auth_token: None,
            admin_token: None,
            shutdown_grace: Duration::from_secs(30),
            max_streams: 1_000_000,
            max_subscriptions: 10_000,
            max_subscription_streams: 1_000,
            max_subscription_matches: 1_000,
            max_subscription_bytes: 16 * 1024,
            max_pattern_bytes: 256,
            max_pattern_wildcards: 16,
            webhook_allowed_networks: Vec::new(),
            max_webhook_answer_bytes: 16 * 1024,
            min_lease_ttl: Duration::from_secs(1),
            http2: Http2Config::default(),
            compression: CompressionConfig::default(),
            cache: CacheConfig::default(),
            wake_retry_initial: Duration::from_secs(1),
            wake_retry_max: Duration::from_secs(300),
            subscription_sweep_interval: Duration::from_secs(1),
            console: true,
            checkpoint_table: None,
            retention: Vec::new(),
            compaction: Vec::new(),
        }
    }
}

/// HTTP/2 limits of every connection that speaks it (cleartext with prior
/// knowledge, or TLS with ALPN `h2`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Http2Config {
    /// The most concurrent streams (requests: live reads included) a
    /// client may open on one connection; the client queues the rest.
    pub max_concurrent_streams: u32,
    /// The flow-control window of one stream, in bytes: how much a client
    /// may send on a request before the server asks for more.
    pub stream_window_bytes: u32,
    /// The flow-control window of a whole connection, in bytes.
    pub connection_window_bytes: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            max_concurrent_streams: 256,
            stream_window_bytes: 1024 * 1024,
            connection_window_bytes: 4 * 1024 * 1024,
        }
    }
}

/// When responses are compressed.
///
/// A response is compressed with gzip, brotli or zstd (the best the
/// client's `Accept-Encoding` allows) when compression is on, its body is
/// at least [`min_bytes`](Self::min_bytes) long, and its content type is
/// text that compresses: JSON (`application/json`, `*+json`, NDJSON), XML
/// and `text/*`. Binary streams (`application/octet-stream` and every other
/// type) are sent as stored, and SSE streams are never compressed, so
/// every event reaches the client the moment it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressionConfig {
    /// Whether responses are compressed at all.
    pub enabled: bool,
    /// The smallest body that is compressed, in bytes.
    pub min_bytes: u64,
    /// How hard each coding works. A tail read is compressed anew for
    /// every client, so the default is level 4 for every coding: against
    /// the algorithms' own defaults, gzip output is 5 % larger and 2.4×
    /// faster, brotli and zstd are unchanged (their defaults are 4 and 3;
    /// `scripts/nginx/bench.sh` measures it). A precise level is clamped
    /// to each algorithm's range.
    pub level: CompressionLevel,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            enabled: true,
            min_bytes: 1024,
            level: CompressionLevel::Precise(4),
        }
    }
}

/// How read responses may be cached.
///
/// A catch-up read that ends before the tail never changes (the data at an
/// offset is immutable), so it is `public, max-age=<max_age>, immutable`
/// with a strong `ETag`. A long-poll answer with data is cacheable for one
/// cursor interval (20 s), keyed by its URL (offset and cursor), so caches
/// collapse identical waiting requests. Reads that reach the tail, long-poll
/// timeouts, SSE and `HEAD` are `no-store` / `no-cache`, and so is every
/// response that says nothing else (writes, errors).
///
/// With a bearer token configured, cacheable responses are `private`
/// (browser caches only) unless their stream path starts with one of
/// [`public_prefixes`](Self::public_prefixes): the operator declares those
/// streams public, and any shared cache may then serve them to anyone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long a historical chunk stays fresh in caches.
    pub max_age: Duration,
    /// Stream path prefixes (without the leading `/`) whose reads are
    /// `public` even when the server requires a bearer token.
    pub public_prefixes: Vec<String>,
    /// How a catch-up read whose URL names no offset of the stream the
    /// path holds now (`-1`, the zero offset, a fork source's offset) is
    /// answered. `false` (the default): with the data, `no-store`, and a
    /// `Content-Location` naming the same bytes' immutable URL (the
    /// stream's own offset), which every client reads. `true`: with a
    /// `307` redirect to that URL, so that every first read reaches a
    /// cache through the immutable URL, for deployments whose clients all
    /// follow redirects.
    pub redirect_first_reads: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_age: Duration::from_secs(3600),
            public_prefixes: Vec::new(),
            redirect_first_reads: false,
        }
    }
}
