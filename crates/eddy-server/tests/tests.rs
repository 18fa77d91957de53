//! Integration tests of `eddy-server`: one binary, one module per area.

mod authorization;
mod caching;
mod claims;
mod compaction;
mod compression;
mod connections;
mod console;
mod cors;
mod http2;
mod limits;
mod metrics_page;
mod operations;
mod parsers;
mod patterns;
mod probes;
#[cfg(feature = "remote")]
mod remote_contract;
#[cfg(feature = "remote")]
mod remote_errors;
mod retention;
mod router;
mod shared_reads;
mod stalled_clients;
mod subscription_reads;
mod support;
mod wakes;
#[cfg(feature = "webhooks")]
mod webhooks;
