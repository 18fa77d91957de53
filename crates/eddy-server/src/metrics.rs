//! Process metrics on the `metrics` crate, rendered at `/metrics` by its
//! Prometheus exporter.
//!
//! Each [`Metrics`] has its own recorder, so two servers in one process
//! (tests) never mix their counts. [`Metrics::install_global`] makes it
//! the process's recorder too, so that what libraries emit through the
//! `metrics` facade (the store's commits, see
//! [`eddy_streams::describe_metrics`], and each projection binding's
//! units, failures and lag, see [`eddy_projection::describe_metrics`])
//! shows on the same page, with the help text each library describes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, SetRecorderError};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

use crate::route_class::RouteClass;

/// Latency buckets, in seconds: 100 µs to 30 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];
/// Commit group size buckets: 1 to 1024 calls.
const GROUP_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

const HTTP_REQUESTS: &str = "eddy_http_requests_total";
const HTTP_SECONDS: &str = "eddy_http_request_duration_seconds";

/// How often the recorder drains histogram samples nobody scraped.
const UPKEEP: Duration = Duration::from_secs(5);

/// The server's metrics: handles to update, and the page they render to.
#[derive(Debug)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    /// Appends that wrote data.
    pub appends: Counter,
    /// Bytes those appends carried.
    pub append_bytes: Counter,
    /// Duplicate appends acknowledged without writing.
    pub duplicate_appends: Counter,
    /// Read responses served (catch-up, long-poll, SSE events).
    pub reads: Counter,
    /// Live readers now (long-poll waits and SSE streams).
    pub live_readers: Gauge,
    /// Requests refused with a 4xx or failed with a 5xx.
    pub errors: Counter,
    /// Webhook notifications a receiver accepted (2xx).
    pub webhook_deliveries: Counter,
    /// Webhook notifications that failed (refused address, connection
    /// error, timeout, non-2xx answer); each is sent again after a backoff.
    pub webhook_failures: Counter,
    /// Connections accepted.
    pub connections: Counter,
    /// Connections open now.
    pub connections_open: Gauge,
    /// Connections closed because they stayed unused: no first request
    /// within the header timeout, or none for the idle timeout since the
    /// last one.
    pub connections_idle_closed: Counter,
    /// Connections closed because their client took no byte of their
    /// responses for the write timeout.
    pub connections_stalled_closed: Counter,
    /// Connections refused on the TLS port: failed or timed-out handshakes,
    /// and plain HTTP sent to it.
    pub tls_failures: Counter,
    /// Requests whose handler has started and not yet answered (the
    /// `/metrics` request that reads this counts itself).
    pub requests_in_flight: Gauge,
    /// The handles of `eddy_http_*` by route class and status, registered
    /// on first use and kept, so that counting a request costs no key
    /// building or registry look-up. (Their keys are the server's own,
    /// not a client's, so a fast hash without a random key is safe.)
    http: RwLock<HttpHandles>,
}

/// The handles of `eddy_http_*`, by route class and status.
type HttpHandles = HashMap<(RouteClass, u16), (Counter, Histogram), foldhash::fast::FixedState>;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics with every series described and at zero.
    ///
    /// ```
    /// let metrics = eddy_server::Metrics::new();
    /// metrics.appends.increment(2);
    /// assert!(metrics.render().contains("eddy_appends_total 2"));
    /// ```
    pub fn new() -> Self {
        let recorder = Arc::new(recorder());
        metrics::with_local_recorder(recorder.as_ref(), || {
            describe();
            eddy_streams::describe_metrics();
            eddy_projection::describe_metrics();
        });
        // A registered series shows (at zero) before its first event.
        let counter =
            |name: &'static str| recorder.register_counter(&Key::from_static_name(name), &METADATA);
        let gauge =
            |name: &'static str| recorder.register_gauge(&Key::from_static_name(name), &METADATA);
        Metrics {
            appends: counter("eddy_appends_total"),
            append_bytes: counter("eddy_append_bytes_total"),
            duplicate_appends: counter("eddy_duplicate_appends_total"),
            reads: counter("eddy_reads_total"),
            errors: counter("eddy_errors_total"),
            webhook_deliveries: counter("eddy_webhook_deliveries_total"),
            webhook_failures: counter("eddy_webhook_failures_total"),
            connections: counter("eddy_connections_total"),
            connections_idle_closed: counter("eddy_connections_idle_closed_total"),
            connections_stalled_closed: counter("eddy_connections_stalled_closed_total"),
            tls_failures: counter("eddy_tls_failures_total"),
            live_readers: gauge("eddy_live_readers"),
            connections_open: gauge("eddy_connections_open"),
            requests_in_flight: gauge("eddy_requests_in_flight"),
            http: RwLock::default(),
            recorder,
        }
    }

    /// Adds one to a counter.
    pub fn inc(counter: &Counter) {
        counter.increment(1);
    }

    /// Counts one answered request of `route` with `status`, which took
    /// `took` to its response head.
    pub(crate) fn request(&self, route: RouteClass, status: u16, took: Duration) {
        let seconds = took.as_secs_f64();
        let known = self.http.read().unwrap_or_else(|e| e.into_inner());
        if let Some((counter, histogram)) = known.get(&(route, status)) {
            counter.increment(1);
            histogram.record(seconds);
            return;
        }
        drop(known);
        let (counter, histogram) = self.register_http(route, status);
        counter.increment(1);
        histogram.record(seconds);
    }

    fn register_http(&self, route: RouteClass, status: u16) -> (Counter, Histogram) {
        let label = Label::new("route", route.as_str());
        let counter = Key::from_parts(
            HTTP_REQUESTS,
            vec![label.clone(), Label::new("status", status.to_string())],
        );
        let handles = (
            self.recorder.register_counter(&counter, &METADATA),
            self.recorder
                .register_histogram(&Key::from_parts(HTTP_SECONDS, vec![label]), &METADATA),
        );
        self.http
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry((route, status))
            .or_insert(handles)
            .clone()
    }

    /// The metrics in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }

    /// Makes these metrics the process's `metrics` recorder as well, so
    /// that what libraries emit through the facade shows on this page.
    /// Fails when the process already has one.
    pub fn install_global(&self) -> Result<(), SetRecorderError<Arc<PrometheusRecorder>>> {
        metrics::set_global_recorder(Arc::clone(&self.recorder))
    }

    /// Drains histogram samples every few seconds while these metrics
    /// live, so that a page nobody scrapes does not grow. Needs a Tokio
    /// runtime; does nothing without one.
    pub(crate) fn keep_up(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let metrics: Weak<Metrics> = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut every = tokio::time::interval(UPKEEP);
            loop {
                every.tick().await;
                let Some(metrics) = metrics.upgrade() else {
                    return;
                };
                metrics.recorder.handle().run_upkeep();
            }
        });
    }
}

fn recorder() -> PrometheusRecorder {
    // Only an empty bucket list is refused; summaries are the fallback.
    PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_size".into()), GROUP_BUCKETS))
        .unwrap_or_else(|_| PrometheusBuilder::new())
        .build_recorder()
}

/// Describes the server's own metrics to the current recorder.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!("eddy_appends_total", "Appends that wrote data.");
    describe_counter!(
        "eddy_append_bytes_total",
        Unit::Bytes,
        "Bytes written by appends."
    );
    describe_counter!(
        "eddy_duplicate_appends_total",
        "Producer retries acknowledged without writing."
    );
    describe_counter!(
        "eddy_reads_total",
        "Read responses and SSE data events served."
    );
    describe_counter!(
        "eddy_errors_total",
        "Requests answered with an error status."
    );
    describe_counter!(
        "eddy_webhook_deliveries_total",
        "Webhook notifications accepted by their receiver."
    );
    describe_counter!(
        "eddy_webhook_failures_total",
        "Webhook notifications that failed and are sent again later."
    );
    describe_counter!("eddy_connections_total", "Connections accepted.");
    describe_counter!(
        "eddy_connections_idle_closed_total",
        "Connections closed because they stayed unused (no first request in time, or idle too long)."
    );
    describe_counter!(
        "eddy_connections_stalled_closed_total",
        "Connections closed because their client took no byte of their responses for the write timeout."
    );
    describe_counter!(
        "eddy_tls_failures_total",
        "Connections refused on the TLS port (failed handshakes, plain HTTP)."
    );
    describe_gauge!("eddy_connections_open", "Connections open now.");
    describe_gauge!("eddy_live_readers", "Live readers (long-poll and SSE) now.");
    describe_gauge!(
        "eddy_requests_in_flight",
        "Requests being handled now, this one included."
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by route class and status code."
    );
    describe_histogram!(
        HTTP_SECONDS,
        Unit::Seconds,
        "Time from a request's arrival to its response head, by route class, in seconds (a long-poll's includes its wait; an SSE stream's head goes out before its events)."
    );
}
