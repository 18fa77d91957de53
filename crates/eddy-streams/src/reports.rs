//! Operator reports: what a component working beside the store (an outbox
//! deliverer, say) wants an operator to see, kept in the store's shared
//! [documents](crate::Documents) under `reports/`, one per component, so
//! that `eddy status` shows them wherever the component runs.
//!
//! A component writes its report when what it says changes, not on every
//! pass: [`Report::publish`] compares before it writes.
//!
//! ```
//! use eddy_streams::{Report, ReportItem, MemoryDocuments};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let documents = MemoryDocuments::default();
//! let report = Report::new("bridge/shipments", "1 parked row").with_items(
//!     1,
//!     vec![ReportItem {
//!         subject: "pk=sh-1|sk=row".into(),
//!         code: "stream/closed".into(),
//!         message: "the stream is closed".into(),
//!         since_ms: 1_700_000_000_000,
//!     }],
//! );
//! assert!(report.publish(&documents).await?);
//! // The same content again writes nothing.
//! assert!(!report.publish(&documents).await?);
//! let reports = eddy_streams::reports(&documents).await?;
//! assert_eq!(reports[0].summary, "1 parked row");
//! # Ok::<(), eddy_streams::StreamError>(())
//! # }).unwrap();
//! ```

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Documents, StreamError};

/// Where reports are kept among the documents.
pub const REPORTS_PREFIX: &str = "reports/";

/// The most items a report lists (its `items_total` counts them all), so
/// a report stays well within one document.
pub const MAX_REPORT_ITEMS: usize = 100;

/// The most bytes of an item's message that a report keeps.
const MAX_MESSAGE_BYTES: usize = 1024;

/// One component's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// Who reports: a path-like name (`bridge/shipments`), unique per
    /// component.
    pub source: String,
    /// One line saying what the report is about.
    pub summary: String,
    /// When the content last changed (epoch milliseconds).
    pub changed_ms: u64,
    /// How many items need an operator, of which `items` lists the first
    /// [`MAX_REPORT_ITEMS`].
    pub items_total: u64,
    /// What needs an operator.
    pub items: Vec<ReportItem>,
}

/// One thing a report says needs an operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportItem {
    /// What it concerns (a row key, a stream path).
    pub subject: String,
    /// The stable code of what went wrong.
    pub code: String,
    /// What went wrong, on one line.
    pub message: String,
    /// Since when (epoch milliseconds).
    pub since_ms: u64,
}

impl Report {
    /// A report from `source` with `summary` and no items.
    pub fn new(source: impl Into<String>, summary: impl Into<String>) -> Self {
        Report {
            source: source.into(),
            summary: summary.into(),
            changed_ms: 0,
            items_total: 0,
            items: Vec::new(),
        }
    }

    /// With `total` items, of which the first [`MAX_REPORT_ITEMS`] of
    /// `items` are kept (messages cut to 1 KiB).
    #[must_use]
    pub fn with_items(mut self, total: u64, mut items: Vec<ReportItem>) -> Self {
        items.truncate(MAX_REPORT_ITEMS);
        for item in &mut items {
            cut(&mut item.message, MAX_MESSAGE_BYTES);
        }
        self.items_total = total;
        self.items = items;
        self
    }

    /// Stores the report unless the stored one says the same already;
    /// returns whether it wrote. Its `changed_ms` is set to now when it
    /// writes. A write that races another process's is tried again
    /// against what that one stored.
    pub async fn publish(&self, documents: &dyn Documents) -> Result<bool, StreamError> {
        let key = format!("{REPORTS_PREFIX}{}", self.source);
        loop {
            let stored = documents.get(&key).await?;
            let expected = match &stored {
                Some(document) => {
                    let same = serde_json::from_slice::<Report>(&document.body).is_ok_and(|old| {
                        Report {
                            changed_ms: 0,
                            ..old
                        } == self.unstamped()
                    });
                    if same {
                        return Ok(false);
                    }
                    Some(document.version)
                }
                None => None,
            };
            let stamped = Report {
                changed_ms: now_ms(),
                ..self.clone()
            };
            let body = serde_json::to_vec(&stamped)
                .map_err(|e| StreamError::internal(format!("a report does not encode: {e}")))?;
            if documents
                .put(&key, expected, Bytes::from(body))
                .await?
                .is_some()
            {
                return Ok(true);
            }
        }
    }

    fn unstamped(&self) -> Report {
        Report {
            changed_ms: 0,
            ..self.clone()
        }
    }
}

/// Every report kept in `documents`, by source; a document under
/// [`REPORTS_PREFIX`] that is not a report is left out.
pub async fn reports(documents: &dyn Documents) -> Result<Vec<Report>, StreamError> {
    const PAGE: usize = 100;
    let mut reports = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = documents
            .scan(REPORTS_PREFIX, after.as_deref(), PAGE)
            .await?;
        let full = page.len() == PAGE;
        after = page.last().map(|(key, _)| key.clone());
        reports.extend(
            page.into_iter()
                .filter_map(|(_, document)| serde_json::from_slice(&document.body).ok()),
        );
        if !full {
            return Ok(reports);
        }
    }
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
