//! Operator reports: what a component working beside the store (an outbox
//! deliverer, say) wants an operator to see, kept as a small JSON stream
//! of the store under [`REPORTS_PREFIX`], one per component, whose last
//! message is the current report, so that `eddy status` shows it wherever
//! the component runs (a remote `eddy serve` too: writing there, under
//! `__eddy/`, takes the server's admin token).
//!
//! A component writes its report when what it says changes, not on every
//! pass: [`Report::publish`] compares with the last message first, and
//! appends only on that tail, so two processes publishing the same change
//! write it once. The stream keeps its last [`KEPT_REPORTS`] messages.
//!
//! ```
//! use eddy_streams::{MemoryStorage, Report, ReportItem};
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStorage::new();
//! let report = Report::new("bridge/shipments", "1 parked row").with_items(
//!     1,
//!     vec![ReportItem {
//!         subject: "pk=sh-1|sk=row".into(),
//!         code: "stream/closed".into(),
//!         message: "the stream is closed".into(),
//!         since_ms: 1_700_000_000_000,
//!     }],
//! );
//! assert!(report.publish(&store).await?);
//! // The same content again writes nothing.
//! assert!(!report.publish(&store).await?);
//! let reports = eddy_streams::reports(&store).await?;
//! assert_eq!(reports[0].summary, "1 parked row");
//! # Ok::<(), eddy_streams::StreamError>(())
//! # }).unwrap();
//! ```

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{
    Append, ErrorKind, Offset, Payload, ReadFrom, Retention, Storage, StreamConfig, StreamError,
    StreamPath,
};

/// Where the report streams are: `__eddy/reports/<source>`.
pub const REPORTS_PREFIX: &str = "__eddy/reports/";

/// How many reports a report stream keeps (its retention policy).
pub const KEPT_REPORTS: u64 = 8;

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

    /// Appends the report to its stream (created when missing) unless
    /// the last one there says the same already; returns whether it
    /// wrote. Its `changed_ms` is set to now when it writes. An append
    /// that lost to another process's looks again at what that one wrote.
    pub async fn publish(&self, store: &dyn Storage) -> Result<bool, StreamError> {
        let path = StreamPath::new(format!("{REPORTS_PREFIX}{}", self.source))?;
        let retention = Retention {
            messages: Some(KEPT_REPORTS),
            ..Retention::default()
        };
        let config = StreamConfig::json().with_retention(retention);
        store.create(&path, config, Payload::empty()).await?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (last, tail) = last_report(store, &path).await?;
            if last.is_some_and(|old| old.unstamped() == self.unstamped()) {
                return Ok(false);
            }
            let stamped = Report {
                changed_ms: now_ms(),
                ..self.clone()
            };
            let body = serde_json::to_vec(&stamped)
                .map_err(|e| StreamError::internal(format!("a report does not encode: {e}")))?;
            let append = Append::messages(vec![Bytes::from(body)]).expecting_tail(tail);
            match store.append(&path, append).await {
                Ok(_) => return Ok(true),
                // Another report went in first (a remote store names the
                // moved tail a conflict only); a stream that refuses
                // every append (closed, another content type) fails after
                // a few looks.
                Err(e) if e.kind() == ErrorKind::Conflict && attempts < PUBLISH_ATTEMPTS => {}
                Err(e) => return Err(e),
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

/// The last report in the stream at `path` (`None` when it has none that
/// decodes) and the stream's tail.
async fn last_report(
    store: &dyn Storage,
    path: &StreamPath,
) -> Result<(Option<Report>, Offset), StreamError> {
    let tail = store.head(path).await?.tail;
    if tail.position() == 0 {
        return Ok((None, tail));
    }
    let from = ReadFrom::Offset(tail.with_position(tail.position() - 1));
    let chunk = store.read(path, from, MAX_REPORT_BYTES).await?;
    let last = chunk
        .messages
        .last()
        .and_then(|message| serde_json::from_slice(message).ok());
    Ok((last, tail))
}

/// How often a publish looks again after another went in first.
const PUBLISH_ATTEMPTS: u32 = 4;

/// The most bytes a report's read asks for: more than a report of
/// [`MAX_REPORT_ITEMS`] items takes.
const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The current report of every component that published one in `store`,
/// by source. A stream under [`REPORTS_PREFIX`] whose last message is not
/// a report is left out, as is one deleted meanwhile.
pub async fn reports(store: &dyn Storage) -> Result<Vec<Report>, StreamError> {
    let mut reports = Vec::new();
    for info in store.list(REPORTS_PREFIX).await? {
        let path = StreamPath::new(info.path)?;
        match last_report(store, &path).await {
            Ok((Some(report), _)) => reports.push(report),
            Ok((None, _)) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Gone) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(reports)
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
