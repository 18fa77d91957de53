//! Process metrics, rendered in the Prometheus text format at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Counters the handlers update.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Appends that wrote data.
    pub appends: AtomicU64,
    /// Bytes those appends carried.
    pub append_bytes: AtomicU64,
    /// Duplicate appends acknowledged without writing.
    pub duplicate_appends: AtomicU64,
    /// Read responses served (catch-up, long-poll, SSE events).
    pub reads: AtomicU64,
    /// Live readers now (long-poll waits and SSE streams).
    pub live_readers: AtomicI64,
    /// Requests refused with a 4xx or failed with a 5xx.
    pub errors: AtomicU64,
    /// Webhook notifications a receiver accepted (2xx).
    pub webhook_deliveries: AtomicU64,
    /// Webhook notifications that failed (refused address, connection
    /// error, timeout, non-2xx answer); each is sent again after a backoff.
    pub webhook_failures: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections open now.
    pub connections_open: AtomicI64,
    /// Connections refused on the TLS port: failed or timed-out handshakes,
    /// and plain HTTP sent to it.
    pub tls_failures: AtomicU64,
    /// Requests whose handler has started and not yet answered (the
    /// `/metrics` request that reads this counts itself).
    pub requests_in_flight: AtomicI64,
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics in the Prometheus text exposition format.
    ///
    /// ```
    /// let metrics = eddy_server::Metrics::default();
    /// assert!(metrics.render().contains("eddy_appends_total 0"));
    /// ```
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, value: i128| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| i128::from(c.load(Ordering::Relaxed));
        counter(
            "eddy_appends_total",
            "Appends that wrote data.",
            "counter",
            get(&self.appends),
        );
        counter(
            "eddy_append_bytes_total",
            "Bytes written by appends.",
            "counter",
            get(&self.append_bytes),
        );
        counter(
            "eddy_duplicate_appends_total",
            "Producer retries acknowledged without writing.",
            "counter",
            get(&self.duplicate_appends),
        );
        counter(
            "eddy_reads_total",
            "Read responses and SSE data events served.",
            "counter",
            get(&self.reads),
        );
        counter(
            "eddy_errors_total",
            "Requests answered with an error status.",
            "counter",
            get(&self.errors),
        );
        counter(
            "eddy_webhook_deliveries_total",
            "Webhook notifications accepted by their receiver.",
            "counter",
            get(&self.webhook_deliveries),
        );
        counter(
            "eddy_webhook_failures_total",
            "Webhook notifications that failed and are sent again later.",
            "counter",
            get(&self.webhook_failures),
        );
        counter(
            "eddy_connections_total",
            "Connections accepted.",
            "counter",
            get(&self.connections),
        );
        counter(
            "eddy_tls_failures_total",
            "Connections refused on the TLS port (failed handshakes, plain HTTP).",
            "counter",
            get(&self.tls_failures),
        );
        counter(
            "eddy_connections_open",
            "Connections open now.",
            "gauge",
            i128::from(self.connections_open.load(Ordering::Relaxed)),
        );
        counter(
            "eddy_live_readers",
            "Live readers (long-poll and SSE) now.",
            "gauge",
            i128::from(self.live_readers.load(Ordering::Relaxed)),
        );
        counter(
            "eddy_requests_in_flight",
            "Requests being handled now, this one included.",
            "gauge",
            i128::from(self.requests_in_flight.load(Ordering::Relaxed)),
        );
        out
    }
}
