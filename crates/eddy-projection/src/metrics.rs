//! Per-binding metrics, emitted through the [`metrics`] facade: they go to
//! whatever recorder the process installed (`eddy serve` installs its
//! Prometheus page's) and cost next to nothing without one. Every series
//! carries the labels `projection` (the projection id) and `binding` (the
//! binding's parameter key, `_` for none); the lag gauge adds `input`,
//! and the failures counter `code` (the error's stable code, such as
//! `history-unavailable`).

use metrics::{Counter, Label};

use crate::CheckpointKey;

const UNITS: &str = "eddy_projection_units_total";
const ITEMS: &str = "eddy_projection_items_total";
const FAILURES: &str = "eddy_projection_failures_total";
const RETRIES: &str = "eddy_projection_retries_total";
const LAG: &str = "eddy_projection_lag_messages";

/// Describes the projection engine's metrics (their help text and unit) to
/// the current recorder. An exporter calls it once, inside
/// [`metrics::with_local_recorder`] for a recorder of its own.
pub fn describe_metrics() {
    metrics::describe_counter!(UNITS, "Units a projection binding committed.");
    metrics::describe_counter!(
        ITEMS,
        "Input items in the units a projection binding committed."
    );
    metrics::describe_counter!(
        FAILURES,
        "Runs of a projection binding that ended in an error (a failed handler, an item that does not decode, a storage failure, another writer), retried or not."
    );
    metrics::describe_counter!(
        RETRIES,
        "Times a projection binding ran again after a storage failure or a lost transaction race."
    );
    metrics::describe_gauge!(
        LAG,
        "Messages of an input after a binding's committed offset, as of the end of its last run."
    );
}

/// The handles of one binding's series.
pub(crate) struct BindingMetrics {
    labels: [Label; 2],
    units: Counter,
    items: Counter,
}

impl BindingMetrics {
    /// The series of the binding at `key`.
    pub(crate) fn new(key: &CheckpointKey) -> Self {
        let labels = [
            Label::new("projection", key.projection.clone()),
            Label::new("binding", key.params.clone()),
        ];
        BindingMetrics {
            units: metrics::counter!(UNITS, labels.iter()),
            items: metrics::counter!(ITEMS, labels.iter()),
            labels,
        }
    }

    /// A unit of `items` items committed.
    pub(crate) fn committed(&self, items: u64) {
        self.units.increment(1);
        self.items.increment(items);
    }

    /// A run ended in an error of stable code `code`.
    pub(crate) fn failed(&self, code: &'static str) {
        let mut labels = self.labels.to_vec();
        labels.push(Label::new("code", code));
        metrics::counter!(FAILURES, labels).increment(1);
    }

    /// The binding runs again after a storage failure or a lost race.
    pub(crate) fn retried(&self) {
        metrics::counter!(RETRIES, self.labels.iter()).increment(1);
    }

    /// `messages` of input `input` are after the committed offset.
    pub(crate) fn lag(&self, input: &str, messages: u64) {
        let mut labels = self.labels.to_vec();
        labels.push(Label::new("input", input.to_owned()));
        metrics::gauge!(LAG, labels).set(messages as f64);
    }
}
