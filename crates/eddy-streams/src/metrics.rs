//! The store's own metrics, emitted through the [`metrics`] facade: they
//! go to whatever recorder the process installed (`eddy serve` installs
//! its Prometheus page's), and cost next to nothing without one.
//! [`STORE_METRICS`] names and describes each, so an exporter can publish
//! the help text.

use std::time::Duration;

/// What kind of value a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

/// One metric the store emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreMetric {
    /// Its Prometheus name.
    pub name: &'static str,
    /// Its kind.
    pub kind: MetricKind,
    /// What it counts (the Prometheus help text).
    pub help: &'static str,
}

const GROUP_SIZE: &str = "eddy_store_commit_group_size";
const COMMIT_SECONDS: &str = "eddy_store_commit_duration_seconds";
const QUEUE_JOBS: &str = "eddy_store_writer_queue_jobs";

/// Every metric the store emits, with its help text.
pub const STORE_METRICS: &[StoreMetric] = &[
    StoreMetric {
        name: GROUP_SIZE,
        kind: MetricKind::Histogram,
        help: "Calls committed together by one SQLite group commit (one fsync).",
    },
    StoreMetric {
        name: COMMIT_SECONDS,
        kind: MetricKind::Histogram,
        help: "Time one SQLite group commit's COMMIT took, its fsync included, in seconds.",
    },
    StoreMetric {
        name: QUEUE_JOBS,
        kind: MetricKind::Gauge,
        help: "Write calls waiting in the SQLite writer's queue.",
    },
];

/// A group of `calls` committed in `took`.
pub(crate) fn committed(calls: usize, took: Duration) {
    metrics::histogram!(GROUP_SIZE).record(calls as f64);
    metrics::histogram!(COMMIT_SECONDS).record(took.as_secs_f64());
}

/// One more call waits for the writer.
pub(crate) fn queued() {
    metrics::gauge!(QUEUE_JOBS).increment(1.0);
}

/// The writer took `calls` calls off its queue.
pub(crate) fn dequeued(calls: usize) {
    metrics::gauge!(QUEUE_JOBS).decrement(calls as f64);
}
