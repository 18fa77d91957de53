//! `eddy serve`'s command-line options: the server configuration and the
//! store they describe.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use eddy_projection::SqliteCheckpoints;
use eddy_server::{
    CacheConfig, CheckpointTable, CompressionConfig, CompressionLevel, Http2Config, ServerConfig,
};
use eddy_streams::{Durability, MemoryStorage, SqliteOptions, SqliteStorage, Storage};
use ipnet::IpNet;

use crate::logging::LogArgs;

/// Which stream store to serve: `memory`, `sqlite`, or PostgreSQL as
/// `postgres://…` (or `postgres`, with the URL in `DATABASE_URL`).
#[derive(Clone, PartialEq, Eq)]
pub enum StorageKind {
    /// Everything in memory; gone when the process exits.
    Memory,
    /// The durable SQLite store under `--data`.
    Sqlite,
    /// A PostgreSQL database that several `eddy serve` processes may share
    /// (feature `postgres`).
    Postgres {
        /// The database URL.
        url: String,
    },
    /// A DynamoDB table that several `eddy serve` processes may share
    /// (feature `aws`), reached through the standard AWS environment.
    Dynamodb {
        /// The table name.
        table: String,
    },
}

impl std::str::FromStr for StorageKind {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "memory" => Ok(StorageKind::Memory),
            "sqlite" => Ok(StorageKind::Sqlite),
            "postgres" | "postgresql" => match std::env::var("DATABASE_URL") {
                Ok(url) if !url.is_empty() => Ok(StorageKind::Postgres { url }),
                _ => Err("`postgres` takes its URL from DATABASE_URL, which is not set".into()),
            },
            url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(StorageKind::Postgres { url: url.into() })
            }
            url if url.starts_with("dynamodb://") => match &url["dynamodb://".len()..] {
                "" => Err("`dynamodb://` needs a table name: dynamodb://TABLE".into()),
                table => Ok(StorageKind::Dynamodb {
                    table: table.into(),
                }),
            },
            other => Err(format!(
                "`{other}`: expected memory, sqlite, postgres, a postgres:// URL or dynamodb://TABLE"
            )),
        }
    }
}

/// Names the store without the URL (which may hold a password).
impl std::fmt::Debug for StorageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageKind::Memory => "memory",
            StorageKind::Sqlite => "sqlite",
            StorageKind::Postgres { .. } => "postgres",
            StorageKind::Dynamodb { .. } => "dynamodb",
        })
    }
}

/// Options of `eddy serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML file of these options: each key is a long flag
    /// (`max-streams = 100`); flags and `EDDY_*` variables win over it.
    #[arg(long, env = "EDDY_CONFIG")]
    pub config: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:4437", env = "EDDY_LISTEN")]
    pub listen: SocketAddr,
    /// The data directory of the SQLite store.
    #[arg(long, default_value = "./eddy-data", env = "EDDY_DATA")]
    pub data: PathBuf,
    /// The stream store: `memory`, `sqlite` (under `--data`), a
    /// PostgreSQL database as `postgres://user:password@host/database`
    /// (`postgres` alone reads the URL from `DATABASE_URL`), or a DynamoDB
    /// table as `dynamodb://TABLE` (the standard AWS environment:
    /// `AWS_REGION`, credentials, `AWS_ENDPOINT_URL`).
    #[arg(
        long,
        default_value = "sqlite",
        env = "EDDY_STORAGE",
        hide_env_values = true
    )]
    pub storage: StorageKind,
    /// The PostgreSQL schema of the store's tables; servers that share a
    /// database and a schema serve one set of streams.
    #[arg(long, default_value = "eddy", env = "EDDY_PG_SCHEMA")]
    pub pg_schema: String,
    /// On DynamoDB: how often the streams live readers wait on are read
    /// again for other servers' appends (the most a reader here waits
    /// beyond one read after an append elsewhere), as `100ms`.
    #[arg(long, default_value = "100ms", value_parser = parse_duration, env = "EDDY_DYNAMODB_POLL")]
    pub dynamodb_poll: Duration,
    /// How long a long-poll waits for data: `500ms`, `20s`, or milliseconds.
    #[arg(long, default_value = "20s", value_parser = parse_duration, env = "EDDY_LONG_POLL_TIMEOUT")]
    pub long_poll_timeout: Duration,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = eddy_streams::DEFAULT_MAX_APPEND_BYTES, env = "EDDY_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// How long a client may take to send a request body.
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "EDDY_BODY_TIMEOUT")]
    pub body_timeout: Duration,
    /// How long a client may take to send the request headers. A new
    /// connection's first request counts from the accept (TLS handshake
    /// and HTTP/2 preface included): a socket that sends nothing is closed
    /// after it.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "EDDY_HEADER_TIMEOUT")]
    pub header_timeout: Duration,
    /// How long a connection may stay open with no request in progress (a
    /// long-poll or SSE stream is in progress until its end); then it is
    /// closed (HTTP/2: GOAWAY). HTTP/1 waits for the next request's
    /// headers at most --header-timeout.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "EDDY_IDLE_TIMEOUT")]
    pub idle_timeout: Duration,
    /// How long a response may have bytes its client does not take: a
    /// connection on which no response progressed for this long while one
    /// had bytes to send is closed (its live-reader slots freed).
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "EDDY_WRITE_TIMEOUT")]
    pub write_timeout: Duration,
    /// The most bytes of read responses one connection holds before its
    /// client takes them; more reads wait (at least one read's
    /// --max-read-bytes is always allowed).
    #[arg(long, default_value_t = ServerConfig::default().max_unread_bytes, env = "EDDY_MAX_UNREAD_BYTES")]
    pub max_unread_bytes: usize,
    /// The most connections open at once; more wait in the listen backlog
    /// until one closes.
    #[arg(long, default_value_t = ServerConfig::default().max_connections, env = "EDDY_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// The most concurrent live readers (long-poll and SSE); more get 503.
    #[arg(long, default_value_t = 10_000, env = "EDDY_MAX_LIVE_READERS")]
    pub max_live_readers: usize,
    /// The most streams the server holds; creates and forks beyond get 503.
    #[arg(long, default_value_t = ServerConfig::default().max_streams, env = "EDDY_MAX_STREAMS")]
    pub max_streams: usize,
    /// The most idempotent producers one stream keeps; an append by a new
    /// producer beyond it gets 429 (known producers may still append).
    #[arg(long, default_value_t = eddy_streams::DEFAULT_MAX_PRODUCERS_PER_STREAM, env = "EDDY_MAX_PRODUCERS_PER_STREAM")]
    pub max_producers_per_stream: usize,
    /// How long a stream keeps an idle idempotent producer's state after
    /// its last accepted write: its retries are deduplicated within it;
    /// after it, its next append starts it afresh, and it no longer
    /// counts against --max-producers-per-stream.
    #[arg(long, default_value = "7d", value_parser = parse_duration, env = "EDDY_PRODUCER_EXPIRY")]
    pub producer_expiry: Duration,
    /// The most messages one append may hold (a JSON array's elements;
    /// also a create's or fork's initial data); more get 413
    /// `append/too-many-messages`.
    #[arg(long, default_value_t = eddy_streams::DEFAULT_MAX_APPEND_MESSAGES, env = "EDDY_MAX_APPEND_MESSAGES")]
    pub max_append_messages: usize,
    /// The most bytes a fork may copy from its source, each message
    /// counting 64 bytes more (a fork of a prefix counts the whole
    /// source); more get 413 `fork/too-large`.
    #[arg(long, default_value_t = eddy_streams::DEFAULT_MAX_FORK_BYTES, env = "EDDY_MAX_FORK_BYTES")]
    pub max_fork_bytes: u64,
    /// How often expired streams' data and old tombstones of deleted
    /// streams are removed (each once its stream is a minute old), and
    /// the messages retention and compaction policies let go, in short
    /// steps; `0` never (an expired stream then stays until its path is
    /// created again, and retained and compacted streams keep everything).
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "EDDY_SWEEP_INTERVAL")]
    pub sweep_interval: Duration,
    /// The most subscriptions the server holds; more get 503.
    #[arg(long, default_value_t = ServerConfig::default().max_subscriptions, env = "EDDY_MAX_SUBSCRIPTIONS")]
    pub max_subscriptions: usize,
    /// The most bytes one subscription keeps (its create request and the
    /// stream paths added to it); more get 413.
    #[arg(long, default_value_t = ServerConfig::default().max_subscription_bytes, env = "EDDY_MAX_SUBSCRIPTION_BYTES")]
    pub max_subscription_bytes: usize,
    /// The most streams one subscription watches through its pattern: a
    /// create whose pattern matches more gets 429; later matches wait for
    /// room (streams of the pattern that were deleted are dropped).
    #[arg(long, default_value_t = ServerConfig::default().max_subscription_matches, env = "EDDY_MAX_SUBSCRIPTION_MATCHES")]
    pub max_subscription_matches: usize,
    /// The shortest lease (`lease_ttl_ms`) a subscription may ask for;
    /// shorter gets 400.
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "EDDY_MIN_LEASE_TTL")]
    pub min_lease_ttl: Duration,
    /// How often the server reads all of the store's subscriptions (to
    /// learn of those made through other servers, and to take over wakes
    /// whose lease ended, e.g. on a server that died while delivering).
    #[arg(long, default_value = "1s", value_parser = parse_duration, env = "EDDY_SUBSCRIPTION_SWEEP_INTERVAL")]
    pub subscription_sweep_interval: Duration,
    /// Require `Authorization: Bearer TOKEN` on every request.
    #[arg(long, env = "EDDY_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Read the bearer token from this file.
    #[arg(long, conflicts_with = "auth_token", env = "EDDY_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// The bearer token of administrative requests: only they may change
    /// streams under `__eddy/` (projection checkpoints). Give it to remote
    /// projection workers.
    #[arg(long, env = "EDDY_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Allow listening on a non-loopback address without a token.
    #[arg(long, env = "EDDY_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Fsync only at checkpoints (survives a process crash, not a power
    /// loss); on PostgreSQL, `synchronous_commit = off`.
    #[arg(long, env = "EDDY_NO_FSYNC")]
    pub no_fsync: bool,
    /// The byte budget of one read: the most message bytes one catch-up or
    /// long-poll response, or one SSE event, carries. It also bounds the
    /// memory one reader holds: a slow reader never makes the server
    /// buffer more than this.
    #[arg(long, default_value_t = ServerConfig::default().max_read_bytes, env = "EDDY_MAX_READ_BYTES")]
    pub max_read_bytes: usize,
    /// Send every response uncompressed.
    #[arg(long, env = "EDDY_NO_COMPRESSION")]
    pub no_compression: bool,
    /// Serve no console page (`/console`) and no bindings endpoint
    /// (`/_eddy/bindings`).
    #[arg(long, env = "EDDY_NO_CONSOLE")]
    pub no_console: bool,
    /// The smallest text response that is compressed (gzip, brotli or zstd,
    /// as the client's Accept-Encoding prefers), in bytes.
    #[arg(long, default_value_t = CompressionConfig::default().min_bytes, env = "EDDY_COMPRESSION_MIN_BYTES")]
    pub compression_min_bytes: u64,
    /// How hard compression works: `fastest`, `default` (each algorithm's
    /// own default), `best`, or a number for every coding (clamped to each
    /// one's range: gzip 1-9, brotli 0-11, zstd 1-22). Tail reads are
    /// compressed anew for every client; 4 keeps gzip 2.4x faster than its
    /// default for 5 % more bytes.
    #[arg(long, default_value = "4", value_parser = parse_compression_level, env = "EDDY_COMPRESSION_LEVEL")]
    pub compression_level: CompressionLevel,
    /// How long caches keep a historical chunk (one that ends before the
    /// tail and so never changes), as `60m` or `30s`.
    #[arg(long, default_value = "60m", value_parser = parse_duration, env = "EDDY_CACHE_MAX_AGE")]
    pub cache_max_age: Duration,
    /// A stream path prefix (`news/`) whose reads are `public` for shared
    /// caches even with --auth-token; repeatable. Without a token every
    /// read is public.
    #[arg(
        long = "cache-public-prefix",
        value_name = "PREFIX",
        env = "EDDY_CACHE_PUBLIC_PREFIX",
        value_delimiter = ','
    )]
    pub cache_public_prefixes: Vec<String>,
    /// A retention policy for the streams created under a path pattern
    /// without an Eddy-Retention header, as `PATTERN=POLICY` (`logs/**=age=7d`,
    /// `metrics/*=messages=1000; bytes=10MB`); repeatable, the first
    /// matching rule wins. The policy is stored with each stream.
    #[arg(
        long = "retention",
        value_name = "PATTERN=POLICY",
        env = "EDDY_RETENTION",
        // Not ',': a pattern may hold `{a,b}`, a policy `;`.
        value_delimiter = '\n'
    )]
    pub retention: Vec<eddy_server::RetentionRule>,
    /// A compaction policy for the (JSON) streams created under a path
    /// pattern without an Eddy-Compaction header, as `PATTERN=POLICY`
    /// (`state/**=age=1h; deletes=7d`; `none` exempts, `on` compacts with
    /// the defaults); repeatable, the first matching rule wins. The policy
    /// is stored with each stream.
    #[arg(
        long = "compaction",
        value_name = "PATTERN=POLICY",
        env = "EDDY_COMPACTION",
        // Not ',': a pattern may hold `{a,b}`, a policy `;`.
        value_delimiter = '\n'
    )]
    pub compaction: Vec<eddy_server::CompactionRule>,
    /// Answer a read from `-1`, the zero offset or a fork source's offset
    /// with a redirect to the stream's own offset (its immutable URL)
    /// instead of with the data; only for deployments whose clients all
    /// follow redirects.
    #[arg(long, env = "EDDY_REDIRECT_FIRST_READS")]
    pub redirect_first_reads: bool,
    /// The TLS certificate chain, PEM, leaf first. With `--tls-key` the
    /// port speaks HTTPS only (HTTP/2 or HTTP/1.1, chosen by ALPN); SIGHUP
    /// reads both files again (a failed reload keeps the current pair).
    #[arg(long, value_name = "PEM", requires = "tls_key", env = "EDDY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert", env = "EDDY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// HTTP/2: the most concurrent requests (live reads included) one
    /// connection may have open.
    #[arg(long, default_value_t = Http2Config::default().max_concurrent_streams, env = "EDDY_HTTP2_MAX_STREAMS")]
    pub http2_max_streams: u32,
    /// HTTP/2: the flow-control window of one request body, in bytes.
    #[arg(long, default_value_t = Http2Config::default().stream_window_bytes, env = "EDDY_HTTP2_STREAM_WINDOW_BYTES")]
    pub http2_stream_window_bytes: u32,
    /// HTTP/2: the flow-control window of a whole connection, in bytes.
    #[arg(long, default_value_t = Http2Config::default().connection_window_bytes, env = "EDDY_HTTP2_CONNECTION_WINDOW_BYTES")]
    pub http2_connection_window_bytes: u32,
    /// A network webhooks may reach although it is internal (loopback,
    /// private, link-local…), as `10.0.0.0/8` or one address; repeatable.
    /// Every other internal address is refused.
    #[arg(long = "webhook-allow-network", value_name = "CIDR", value_parser = parse_network, env = "EDDY_WEBHOOK_ALLOW_NETWORK", value_delimiter = ',')]
    pub webhook_allowed_networks: Vec<IpNet>,
    /// The most bytes of a webhook receiver's answer that are read; a
    /// longer answer is a failed delivery, sent again later.
    #[arg(long, default_value_t = ServerConfig::default().max_webhook_answer_bytes, env = "EDDY_WEBHOOK_MAX_ANSWER_BYTES")]
    pub webhook_max_answer_bytes: usize,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Parses a network (`10.0.0.0/8`) or a single address (`127.0.0.1`).
pub fn parse_network(value: &str) -> Result<IpNet, String> {
    value
        .parse::<IpNet>()
        .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{value}` is not a network like 10.0.0.0/8 or an address"))
}

/// Parses `fastest`, `default`, `best` or a level number.
fn parse_compression_level(value: &str) -> Result<CompressionLevel, String> {
    match value.trim() {
        "fastest" => Ok(CompressionLevel::Fastest),
        "default" => Ok(CompressionLevel::Default),
        "best" => Ok(CompressionLevel::Best),
        other => other.parse().map(CompressionLevel::Precise).map_err(|_| {
            format!("`{value}` is not a compression level: fastest, default, best or a number")
        }),
    }
}

/// Parses `500ms`, `2s`, `1m` or a number of milliseconds.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let (digits, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => value.split_at(i),
        None => (value, "ms"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{value}` is not a duration like 500ms, 20s, 1m, 2h or 7d"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(60 * 60))),
        "d" => Ok(Duration::from_secs(n.saturating_mul(24 * 60 * 60))),
        _ => Err(format!("`{value}`: the unit must be ms, s, m, h or d")),
    }
}

impl ServeArgs {
    /// The server configuration these options describe.
    pub fn config(&self) -> anyhow::Result<ServerConfig> {
        let auth_token = match (&self.auth_token, &self.auth_token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => Some(
                std::fs::read_to_string(file)
                    .with_context(|| format!("reading the token file {}", file.display()))?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        if auth_token.as_deref() == Some("") || self.admin_token.as_deref() == Some("") {
            bail!("an auth or admin token is empty");
        }
        if self.max_read_bytes == 0 {
            bail!("--max-read-bytes must be at least 1");
        }
        if self.max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        // HTTP/2 windows are 31-bit and at least the protocol's default.
        let windows = 65_535..=0x7fff_ffff;
        if self.http2_max_streams == 0
            || !windows.contains(&self.http2_stream_window_bytes)
            || !windows.contains(&self.http2_connection_window_bytes)
        {
            bail!(
                "--http2-max-streams must be at least 1 and the HTTP/2 windows between 65535 and 2147483647 bytes"
            );
        }
        if auth_token.is_none() && !self.listen.ip().is_loopback() && !self.insecure_no_auth {
            bail!(
                "refusing to listen on {} without --auth-token; pass --insecure-no-auth to allow it",
                self.listen
            );
        }
        Ok(ServerConfig {
            long_poll_timeout: self.long_poll_timeout,
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            write_timeout: self.write_timeout,
            max_unread_bytes: self.max_unread_bytes,
            max_connections: self.max_connections,
            max_live_readers: self.max_live_readers,
            max_streams: self.max_streams,
            max_subscriptions: self.max_subscriptions,
            max_subscription_bytes: self.max_subscription_bytes,
            max_subscription_matches: self.max_subscription_matches,
            min_lease_ttl: self.min_lease_ttl,
            subscription_sweep_interval: self.subscription_sweep_interval,
            max_webhook_answer_bytes: self.webhook_max_answer_bytes,
            auth_token,
            admin_token: self.admin_token.clone(),
            webhook_allowed_networks: self.webhook_allowed_networks.clone(),
            max_read_bytes: self.max_read_bytes,
            http2: Http2Config {
                max_concurrent_streams: self.http2_max_streams,
                stream_window_bytes: self.http2_stream_window_bytes,
                connection_window_bytes: self.http2_connection_window_bytes,
            },
            compression: CompressionConfig {
                enabled: !self.no_compression,
                min_bytes: self.compression_min_bytes,
                level: self.compression_level,
            },
            cache: CacheConfig {
                max_age: self.cache_max_age,
                public_prefixes: self
                    .cache_public_prefixes
                    .iter()
                    .map(|prefix| prefix.trim_start_matches('/').to_owned())
                    .collect(),
                redirect_first_reads: self.redirect_first_reads,
            },
            console: !self.no_console,
            retention: self.retention.clone(),
            compaction: self.compaction.clone(),
            ..ServerConfig::default()
        })
    }

    /// What one write may do on the store.
    fn limits(&self) -> eddy_streams::Limits {
        eddy_streams::Limits {
            max_append_messages: self.max_append_messages,
            max_fork_bytes: self.max_fork_bytes,
        }
    }

    /// Opens the configured store, with the checkpoint table SQL hosts
    /// keep in its database (SQLite, PostgreSQL) for the console's
    /// binding report.
    pub async fn open_store_with_table(
        &self,
    ) -> anyhow::Result<(Arc<dyn Storage>, Option<CheckpointTable>)> {
        // Zero would forget every producer at once: no retry deduplicated.
        if self.producer_expiry.is_zero() {
            bail!("--producer-expiry must be positive");
        }
        let durability = if self.no_fsync {
            Durability::Process
        } else {
            Durability::Sync
        };
        Ok(match &self.storage {
            StorageKind::Memory => (
                Arc::new(
                    MemoryStorage::with_max_append_bytes(self.max_body_bytes)
                        .with_max_producers_per_stream(self.max_producers_per_stream)
                        .with_producer_expiry(self.producer_expiry)
                        .with_limits(self.limits()),
                ),
                None,
            ),
            StorageKind::Sqlite => {
                let options = SqliteOptions {
                    durability,
                    max_append_bytes: self.max_body_bytes,
                    max_producers_per_stream: self.max_producers_per_stream,
                    producer_expiry: self.producer_expiry,
                    limits: self.limits(),
                    ..SqliteOptions::default()
                };
                let store = Arc::new(
                    SqliteStorage::open_with(&self.data, options)
                        .with_context(|| format!("opening the store in {}", self.data.display()))?,
                );
                let table = SqliteCheckpoints::new(Arc::clone(&store));
                (store, Some(CheckpointTable(Arc::new(table))))
            }
            StorageKind::Postgres { url } => self.open_postgres(url, durability).await?,
            StorageKind::Dynamodb { table } => (self.open_dynamodb(table).await?, None),
        })
    }

    #[cfg(feature = "aws")]
    async fn open_dynamodb(&self, table: &str) -> anyhow::Result<Arc<dyn Storage>> {
        if self.dynamodb_poll.is_zero() {
            bail!("--dynamodb-poll must be positive");
        }
        let options = eddy_streams::backend::RecordOptions {
            max_append_bytes: self.max_body_bytes,
            max_producers_per_stream: self.max_producers_per_stream,
            producer_expiry: self.producer_expiry,
            limits: self.limits(),
            poll: self.dynamodb_poll,
            ..eddy_streams_dynamodb::options()
        };
        let connection = eddy_dynamo::DynamoOptions::from_env();
        let store = eddy_streams_dynamodb::connect(&connection, table, options)
            .await
            .with_context(|| format!("opening the store in DynamoDB table {table}"))?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "aws"))]
    async fn open_dynamodb(&self, _table: &str) -> anyhow::Result<Arc<dyn Storage>> {
        bail!("this eddy was built without DynamoDB support: build it with --features aws")
    }

    #[cfg(feature = "postgres")]
    async fn open_postgres(
        &self,
        url: &str,
        durability: Durability,
    ) -> anyhow::Result<(Arc<dyn Storage>, Option<CheckpointTable>)> {
        let options = eddy_streams::PgOptions {
            durability,
            max_append_bytes: self.max_body_bytes,
            max_producers_per_stream: self.max_producers_per_stream,
            producer_expiry: self.producer_expiry,
            limits: self.limits(),
            ..eddy_streams::PgOptions::new(url).with_schema(&self.pg_schema)
        };
        let store = eddy_streams::PgStorage::open(options)
            .await
            .with_context(|| {
                format!("opening the store in PostgreSQL schema {}", self.pg_schema)
            })?;
        let table = eddy_projection::PgCheckpoints::open(&store);
        Ok((Arc::new(store), Some(CheckpointTable(Arc::new(table)))))
    }

    #[cfg(not(feature = "postgres"))]
    async fn open_postgres(
        &self,
        _url: &str,
        _durability: Durability,
    ) -> anyhow::Result<(Arc<dyn Storage>, Option<CheckpointTable>)> {
        bail!("this eddy was built without PostgreSQL support: build it with --features postgres")
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn config(args: &[&str]) -> anyhow::Result<ServerConfig> {
        let cli = Cli::try_parse_from(std::iter::once("eddy").chain(args.iter().copied()))?;
        cli.serve.config()
    }

    #[test]
    fn no_token_means_loopback_only() {
        assert!(config(&["--listen", "127.0.0.1:0"]).is_ok());
        let refused = config(&["--listen", "0.0.0.0:0"])
            .err()
            .map(|e| e.to_string());
        assert!(refused.is_some_and(|m| m.contains("--insecure-no-auth")));
        assert!(config(&["--listen", "0.0.0.0:0", "--insecure-no-auth"]).is_ok());
        let with_token = config(&["--listen", "0.0.0.0:0", "--auth-token", "t"]).expect("config");
        assert_eq!(with_token.auth_token.as_deref(), Some("t"));
    }

    #[test]
    fn token_files_and_durations_parse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\n").expect("write");
        let path = file.to_string_lossy().into_owned();
        let from_file =
            config(&["--auth-token-file", &path, "--long-poll-timeout", "500ms"]).expect("config");
        assert_eq!(from_file.auth_token.as_deref(), Some("from-file"));
        assert_eq!(from_file.long_poll_timeout, Duration::from_millis(500));
        assert!(config(&["--long-poll-timeout", "5 parsecs"]).is_err());
        assert!(config(&["--auth-token", ""]).is_err(), "an empty token");
    }

    #[test]
    fn webhook_networks_are_networks_or_addresses() {
        let allowed = config(&[
            "--webhook-allow-network",
            "10.0.0.0/8",
            "--webhook-allow-network",
            "::1",
        ])
        .expect("config");
        let expected: Vec<IpNet> = vec![
            "10.0.0.0/8".parse().expect("net"),
            "::1/128".parse().expect("net"),
        ];
        assert_eq!(allowed.webhook_allowed_networks, expected);
        assert!(config(&["--webhook-allow-network", "10.0.0.0/33"]).is_err());
    }

    #[test]
    fn read_budget_compression_and_caching_flags() {
        let defaults = config(&[]).expect("config");
        assert_eq!(
            defaults.max_read_bytes,
            ServerConfig::default().max_read_bytes
        );
        assert!(defaults.compression.enabled);
        assert_eq!(defaults.compression.level, CompressionLevel::Precise(4));
        for (flag, level) in [
            ("best", CompressionLevel::Best),
            ("default", CompressionLevel::Default),
            ("fastest", CompressionLevel::Fastest),
            ("9", CompressionLevel::Precise(9)),
        ] {
            let set = config(&["--compression-level", flag]).expect("config");
            assert_eq!(set.compression.level, level, "{flag}");
        }
        assert!(config(&["--compression-level", "max"]).is_err());
        let set = config(&[
            "--max-read-bytes",
            "65536",
            "--no-compression",
            "--cache-max-age",
            "5m",
            "--cache-public-prefix",
            "/news/",
            "--cache-public-prefix",
            "docs/",
        ])
        .expect("config");
        assert_eq!(set.max_read_bytes, 65536);
        assert!(!set.compression.enabled);
        assert_eq!(set.cache.max_age, Duration::from_secs(300));
        assert_eq!(set.cache.public_prefixes, vec!["news/", "docs/"]);
    }

    #[test]
    fn tls_flags_come_in_pairs_and_http2_limits_are_checked() {
        assert!(
            config(&["--tls-cert", "c.pem"]).is_err(),
            "a cert without a key"
        );
        assert!(
            config(&["--tls-key", "k.pem"]).is_err(),
            "a key without a cert"
        );
        let limits = config(&[
            "--http2-max-streams",
            "64",
            "--http2-stream-window-bytes",
            "131072",
        ])
        .expect("config");
        assert_eq!(limits.http2.max_concurrent_streams, 64);
        assert_eq!(limits.http2.stream_window_bytes, 131_072);
        assert!(config(&["--http2-max-streams", "0"]).is_err());
        assert!(config(&["--http2-connection-window-bytes", "4294967295"]).is_err());
    }

    /// `--producer-expiry` takes hours and days, and refuses zero.
    #[tokio::test]
    async fn the_producer_expiry_is_parsed_and_must_be_positive() {
        let parse = |value: &str| {
            Cli::try_parse_from(["eddy", "--storage", "memory", "--producer-expiry", value])
                .expect("args")
                .serve
        };
        assert_eq!(parse("2h").producer_expiry, Duration::from_secs(7200));
        let default = Cli::try_parse_from(["eddy"]).expect("args").serve;
        assert_eq!(
            default.producer_expiry,
            eddy_streams::DEFAULT_PRODUCER_EXPIRY
        );
        assert!(parse("0s").open_store_with_table().await.is_err());
    }

    /// `--max-producers-per-stream` reaches the store of either kind: a
    /// second producer on a stream is refused, the first keeps appending.
    #[tokio::test]
    async fn the_producer_limit_reaches_every_store() {
        use eddy_streams::{
            Append, ErrorKind, Payload, ProducerPosition, StreamConfig, StreamPath,
        };

        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_string_lossy().into_owned();
        for storage in ["memory", "sqlite"] {
            let args = ["eddy", "--storage", storage, "--data", &data];
            let cli = Cli::try_parse_from(args.iter().chain(&["--max-producers-per-stream", "1"]))
                .expect("args");
            let (store, _) = cli.serve.open_store_with_table().await.expect("open");
            let path = StreamPath::new(format!("limited-{storage}")).expect("path");
            store
                .create(&path, StreamConfig::json(), Payload::empty())
                .await
                .expect("create");
            let by =
                |id: &str, seq| Append::body("1").with_producer(ProducerPosition::new(id, 0, seq));
            store
                .append(&path, by("a", 0))
                .await
                .expect("the first producer");
            let refused = store.append(&path, by("b", 0)).await.err();
            assert_eq!(
                refused.map(|e| e.kind()),
                Some(ErrorKind::LimitReached),
                "{storage}"
            );
            store
                .append(&path, by("a", 1))
                .await
                .expect("a known producer");
        }
    }
}
