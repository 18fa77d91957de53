//! The store's own metrics, emitted through the [`metrics`] facade: they
//! go to whatever recorder the process installed (`eddy serve` installs
//! its Prometheus page's), and cost next to nothing without one.
//! [`describe_metrics`] gives an exporter their help text.
//!
//! SQLite and PostgreSQL emit the same series (a process opens one store):
//! what a commit groups, what it took, and the write calls waiting for
//! the store's writer.

use std::time::Duration;

const GROUP_SIZE: &str = "eddy_store_commit_group_size";
const COMMIT_SECONDS: &str = "eddy_store_commit_duration_seconds";
const QUEUE_JOBS: &str = "eddy_store_writer_queue_jobs";

/// Describes the store's metrics (their help text and unit) to the
/// current recorder. An exporter calls it once, inside
/// [`metrics::with_local_recorder`] for a recorder of its own.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        GROUP_SIZE,
        "Calls committed together by one commit: a SQLite group commit (one fsync), or the stream calls of one PostgreSQL write transaction."
    );
    metrics::describe_histogram!(
        COMMIT_SECONDS,
        metrics::Unit::Seconds,
        "Time one commit took, in seconds: a SQLite group commit's COMMIT with its fsync, or a PostgreSQL write transaction's COMMIT round trip with its WAL flush."
    );
    metrics::describe_gauge!(
        QUEUE_JOBS,
        "Write calls waiting for the store's writer: queued for the SQLite writer thread, or waiting for a PostgreSQL connection and its BEGIN."
    );
}

/// A commit of `calls` calls that took `took`.
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
