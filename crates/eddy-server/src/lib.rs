//! The Durable Streams HTTP protocol over Eddy's stream store.
//!
//! `eddy-server` is the only crate of Eddy that knows HTTP. It serves any
//! [`Storage`](eddy_streams::Storage) backend over the Durable Streams
//! protocol ([`app`], [`Server`]), and it implements the same trait on the
//! client side over HTTP ([`RemoteStorage`]), so code written against the
//! trait works with a store in another process.
//!
//! # The HTTP mapping
//!
//! Every request path names a stream (`/v1/stream/orders` is the stream
//! `v1/stream/orders`), except `/healthz`, `/readyz`, `/metrics`, `/console`
//! (the console page; `/_eddy/bindings` is its data), the reserved
//! `/_eddy/` prefix (Eddy's listing) and any path with a `__ds` segment
//! (the protocol's subscription API: signed webhooks and pull-wake leases,
//! kept in the store's shared documents, so every server on one store
//! answers for every subscription).
//!
//! | request | store call | success |
//! | --- | --- | --- |
//! | `PUT` (+ body, `Stream-TTL` / `Stream-Expires-At`, `Stream-Closed`) | `create` | 201 new, 200 same config |
//! | `PUT` + `Stream-Forked-From` (+ `Stream-Fork-Offset`, `-Sub-Offset`) | `fork` | 201 / 200 |
//! | `POST` (+ `Producer-*`, `Stream-Seq`, `Stream-Expected-Offset`, `Stream-Closed`) | `append` | 200 new producer write, 204 otherwise |
//! | `GET ?offset=` | `read` | 200, JSON streams as one array |
//! | `GET ?offset=&live=long-poll` | `read` + `wait` | 200 data, 204 timeout |
//! | `GET ?offset=&live=sse` | `read` + `wait` loop | `text/event-stream` |
//! | `HEAD` / `DELETE` | `head` / `delete` | 200 / 204 |
//! | `GET /_eddy/streams?prefix=` (+ `limit=`, `after=`; + `paths=true`) | `list` (`list_page`; `list_paths_page`) | JSON |
//!
//! Authorization is decided by one function, from the request's token,
//! what it would do and every stream it names (its target, a fork's
//! source, a subscription's wake stream and watched streams). Streams
//! under `/__eddy/` hold Eddy's own state (projection checkpoints):
//! creating, appending to, deleting, forking from them and making them a
//! wake stream need the [admin token](ServerConfig::admin_token) and are
//! refused with 403 `auth/forbidden` otherwise; reads are open to every
//! client. A pull-wake's ack and release and a webhook's callback carry
//! the wake's own token as their bearer token, and it alone authenticates
//! them, also with an [auth token](ServerConfig::auth_token) configured.
//!
//! Store errors map to statuses in one place ([`ApiError::status`]), from
//! their [kind](eddy_streams::ErrorKind): absent and deleted streams are
//! 404, a stream deleted while forks use it is 410, conflicts of
//! configuration, content type, sequence and close are 409, a fenced
//! producer is 403, bad input is 400, an oversized body 413, an unavailable
//! store 503 (with `Retry-After`), an internal failure 500. Every error
//! carries its stable code in the `eddy-error` header and a JSON body
//! `{"code", "message", "details"}`; [`RemoteStorage`] turns them back into
//! the same [`StreamError`](eddy_streams::StreamError)s.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `webhooks` | on | `webhook` subscriptions: Ed25519-signed notifications, the JWKS endpoint, and the HTTP client that calls them (without it, only `pull-wake` subscriptions exist) |
//! | `remote` | on | [`RemoteStorage`], the `Storage` trait over HTTP |
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use eddy_server::{RemoteStorage, Server, ServerConfig};
//! use eddy_streams::{Append, MemoryStorage, Payload, ReadFrom, Storage, StreamConfig, StreamPath};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStorage::new());
//! let server = Server::bind(([127, 0, 0, 1], 0).into(), store, ServerConfig::default())
//!     .await?
//!     .spawn();
//!
//! let remote = RemoteStorage::new(&server.url())?;
//! let path = StreamPath::new("orders")?;
//! remote.create(&path, StreamConfig::json(), Payload::empty()).await?;
//! remote.append(&path, Append::body(r#"[{"id":1},{"id":2}]"#)).await?;
//! let chunk = remote.read(&path, ReadFrom::Beginning, 1 << 20).await?;
//! assert_eq!(chunk.messages, vec![r#"{"id":1}"#, r#"{"id":2}"#]);
//!
//! server.stop().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![deny(missing_docs)]

mod app;
mod auth;
mod cache;
#[cfg(feature = "remote")]
mod client;
mod compression;
mod config;
mod console;
mod cursor;
mod error;
mod handlers;
mod metrics;
mod middleware;
mod observe;
mod parse;
mod probes;
mod protocol;
mod retention;
mod route_class;
mod router;
mod server;
mod shared_read;
mod state;
mod stream_budget;
mod subscriptions;
mod wire;

pub use app::{app, App};
#[cfg(feature = "remote")]
pub use client::RemoteStorage;
pub use config::{
    CacheConfig, CheckpointTable, CompressionConfig, CompressionLevel, Http2Config, ServerConfig,
};
pub use error::ApiError;
pub use metrics::Metrics;
pub use protocol::RESERVED_STREAM_PREFIX;
pub use retention::{CompactionRule, PathRule, RetentionRule, RulePolicy};
pub use server::{RunningServer, Server, TlsCertificates, TlsError};
pub use state::AppState;
pub use wire::ListedStream;
