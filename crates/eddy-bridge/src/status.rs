//! The bridge's report for operators: after each pass over the outbox,
//! its parked rows are published into the target store as the report
//! `bridge/<projection>` (eddy-streams' `Report`), which `eddy status`
//! shows beside the store's streams. The report is written only when its
//! content changes, so an idle deliverer writes nothing.

use std::sync::{Arc, Mutex, PoisonError};

use eddy_dynamo::{AttributeValue, Item, PendingReport};
use eddy_streams::{Report, ReportItem, Storage};

/// The report of the last pass this process published, so an unchanged
/// one costs no read.
#[derive(Clone, Default)]
pub(crate) struct Published(Arc<Mutex<Option<Report>>>);

impl Published {
    /// Publishes what `pass` says of `projection`'s parked rows into
    /// `store`, unless this process published the same already. A failed
    /// write (a remote server refuses it without its admin token) is
    /// logged and tried again after the next pass.
    pub(crate) async fn after_pass(
        &self,
        store: &dyn Storage,
        projection: &str,
        pass: &PendingReport,
    ) {
        let report = report_of(projection, pass);
        if self.lock().as_ref() == Some(&report) {
            return;
        }
        match report.publish(store).await {
            Ok(_) => *self.lock() = Some(report),
            Err(error) => {
                tracing::warn!(projection, %error, "cannot publish the bridge's parked rows for eddy status; trying again after the next pass");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Report>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a pass says of the projection's parked rows.
fn report_of(projection: &str, pass: &PendingReport) -> Report {
    let parked = pass.parked.len();
    let summary = match parked {
        0 => "no parked rows".to_owned(),
        1 => "1 parked row".to_owned(),
        n => format!("{n} parked rows"),
    };
    let items = pass
        .parked
        .iter()
        .map(|row| ReportItem {
            subject: row_key(&row.effect.row),
            code: row.failure.code.clone(),
            message: format!(
                "{}#{}@{}: {}",
                row.effect.source, row.effect.stream_id, row.effect.version, row.failure.message
            ),
            since_ms: row.failure.at,
        })
        .collect();
    Report::new(format!("bridge/{projection}"), summary).with_items(parked as u64, items)
}

/// A row's table key as `name=value|…`, names sorted.
fn row_key(key: &Item) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(name, value)| match value {
            AttributeValue::S(text) => format!("{name}={text}"),
            AttributeValue::N(number) => format!("{name}={number}"),
            other => format!("{name}={other:?}"),
        })
        .collect();
    parts.sort();
    parts.join("|")
}
