//! DynamoDB projection metrics, emitted through the [`metrics`] facade:
//! they go to whatever recorder the process installed and cost next to
//! nothing without one. Names follow Prometheus conventions (`eddy_dynamo_`
//! prefix, base units, `_total` on counters).
//!
//! - `eddy_dynamo_records_total{outcome}`: change records `process_batch`
//!   handled: `applied`, `failed` or `ignored`.
//! - `eddy_dynamo_partial_batch_failures_total`: batches answered with a
//!   partial batch failure (a record to retry from).
//! - `eddy_dynamo_write_conflicts_total{projection}`: row writes that lost
//!   a race to another writer (a failed condition), each retried.
//! - `eddy_dynamo_outbox_enqueued_total{read_model}`,
//!   `eddy_dynamo_outbox_delivered_total{read_model}` and
//!   `eddy_dynamo_outbox_delivery_failures_total{read_model}`: effects
//!   committed, delivered, and deliveries that failed (the effect stays).
//! - `eddy_dynamo_outbox_parked_total{read_model}` and
//!   `eddy_dynamo_outbox_dropped_total{read_model}`: rows parked (a
//!   delivery failed permanently) and parked effects an operator dropped.
//! - `eddy_dynamo_outbox_pending_effects{read_model}`,
//!   `eddy_dynamo_outbox_oldest_pending_age_seconds{read_model}` and
//!   `eddy_dynamo_outbox_parked_rows{read_model}`: the backlog, the age
//!   of its oldest effect and the rows parked, as of the last
//!   [`Outbox::pending_rows`](crate::Outbox::pending_rows) (the command
//!   group's `status`, or a periodic call).

const RECORDS: &str = "eddy_dynamo_records_total";
const PARTIAL_BATCHES: &str = "eddy_dynamo_partial_batch_failures_total";
const WRITE_CONFLICTS: &str = "eddy_dynamo_write_conflicts_total";
const ENQUEUED: &str = "eddy_dynamo_outbox_enqueued_total";
const DELIVERED: &str = "eddy_dynamo_outbox_delivered_total";
const DELIVERY_FAILURES: &str = "eddy_dynamo_outbox_delivery_failures_total";
const PENDING: &str = "eddy_dynamo_outbox_pending_effects";
const OLDEST_AGE: &str = "eddy_dynamo_outbox_oldest_pending_age_seconds";
const PARKED: &str = "eddy_dynamo_outbox_parked_total";
const DROPPED: &str = "eddy_dynamo_outbox_dropped_total";
const PARKED_ROWS: &str = "eddy_dynamo_outbox_parked_rows";

/// Describes eddy-dynamo's metrics (help text and unit) to the current
/// recorder. An exporter calls it once.
pub fn describe_metrics() {
    metrics::describe_counter!(
        RECORDS,
        "Change records process_batch handled, by outcome: applied (done by every projection reading it), failed (to be delivered again) or ignored (not an event a projection reads)."
    );
    metrics::describe_counter!(
        PARTIAL_BATCHES,
        "Batches answered with a partial batch failure: the event source retries from the first failed record."
    );
    metrics::describe_counter!(
        WRITE_CONFLICTS,
        "Row writes of a projection that lost a race to another writer (a failed revision or checkpoint condition); each is folded again and retried."
    );
    metrics::describe_counter!(ENQUEUED, "Outbox effects committed with their row's write.");
    metrics::describe_counter!(DELIVERED, "Outbox effects delivered and deleted.");
    metrics::describe_counter!(
        DELIVERY_FAILURES,
        "Outbox deliveries that failed: the effect stays at its row's head."
    );
    metrics::describe_counter!(
        PARKED,
        "Rows parked: a delivery failed permanently, and the row waits for an operator to retry or skip its head."
    );
    metrics::describe_counter!(
        DROPPED,
        "Parked outbox effects an operator dropped (after moving them to a dead-letter stream, or not)."
    );
    metrics::describe_gauge!(
        PARKED_ROWS,
        "Rows whose head effect is parked, as of the last listing of rows with pending effects."
    );
    metrics::describe_gauge!(
        PENDING,
        "Outbox effects waiting for delivery, as of the last listing of rows with pending effects."
    );
    metrics::describe_gauge!(
        OLDEST_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest outbox effect waiting for delivery, as of the last listing of rows with pending effects (0 when none waits)."
    );
}

/// A batch's records by outcome, and whether it was a partial failure.
pub(crate) fn batch(applied: usize, failed: usize, ignored: usize) {
    for (outcome, count) in [
        ("applied", applied),
        ("failed", failed),
        ("ignored", ignored),
    ] {
        if count > 0 {
            metrics::counter!(RECORDS, "outcome" => outcome).increment(count as u64);
        }
    }
    if failed > 0 {
        metrics::counter!(PARTIAL_BATCHES).increment(1);
    }
}

/// A row write of `projection` lost a race.
pub(crate) fn write_conflict(projection: &str) {
    metrics::counter!(WRITE_CONFLICTS, "projection" => projection.to_owned()).increment(1);
}

/// `count` effects of `read_model` committed.
pub(crate) fn enqueued(read_model: &str, count: usize) {
    if count > 0 {
        metrics::counter!(ENQUEUED, "read_model" => read_model.to_owned()).increment(count as u64);
    }
}

/// One effect of `read_model` delivered.
pub(crate) fn delivered(read_model: &str) {
    metrics::counter!(DELIVERED, "read_model" => read_model.to_owned()).increment(1);
}

/// One delivery of an effect of `read_model` failed.
pub(crate) fn delivery_failed(read_model: &str) {
    metrics::counter!(DELIVERY_FAILURES, "read_model" => read_model.to_owned()).increment(1);
}

/// A row of `read_model` was parked.
pub(crate) fn parked(read_model: &str) {
    metrics::counter!(PARKED, "read_model" => read_model.to_owned()).increment(1);
}

/// A parked effect of `read_model` was dropped.
pub(crate) fn dropped(read_model: &str) {
    metrics::counter!(DROPPED, "read_model" => read_model.to_owned()).increment(1);
}

/// The backlog of `read_model`'s outbox: `effects` pending, the oldest
/// `oldest_ms` old, `parked` rows parked.
pub(crate) fn backlog(read_model: &str, effects: usize, oldest_ms: u64, parked: usize) {
    metrics::gauge!(PARKED_ROWS, "read_model" => read_model.to_owned()).set(parked as f64);
    metrics::gauge!(PENDING, "read_model" => read_model.to_owned()).set(effects as f64);
    metrics::gauge!(OLDEST_AGE, "read_model" => read_model.to_owned())
        .set(oldest_ms as f64 / 1000.0);
}
