//! Shared documents: small versioned values kept in the store beside its
//! streams, so that every process serving one store sees the same ones.
//!
//! A document is written only by compare-and-set on its version, so two
//! processes that change one document at once cannot both win: the loser
//! reads it again and applies its change to what the winner wrote. The
//! server keeps its stream subscriptions in them (each subscription one
//! document), which is what lets any server behind a load balancer answer
//! for any subscription.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use crate::StreamError;

/// The most bytes a document's body may hold. It leaves room under
/// DynamoDB's 400 KB item limit for the key and attributes.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// The most bytes a document's key may hold.
pub const MAX_DOCUMENT_KEY_BYTES: usize = 512;

/// A document as stored: its body and the version a writer must name to
/// replace or remove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// Changes with every write. A document created again after a removal
    /// starts from a version taken from the clock (microseconds), so a
    /// writer that still holds a version of the removed one cannot
    /// overwrite the new one.
    pub version: u64,
    /// What the writer stored.
    pub body: Bytes,
}

/// Versioned documents shared by every process on a store (see
/// [`Storage::documents`](crate::Storage::documents)).
///
/// Keys are UTF-8 strings of at most [`MAX_DOCUMENT_KEY_BYTES`]; bodies at
/// most [`MAX_DOCUMENT_BYTES`] (a larger one is refused with
/// [`StreamError::TooLarge`] and nothing is written).
#[async_trait]
pub trait Documents: Send + Sync {
    /// The document at `key`, if there is one.
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError>;

    /// Stores `body` at `key` when the stored version is `expected`
    /// (`None`: when there is no document). Returns the new version, or
    /// `None` when another version was stored (nothing is written then).
    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError>;

    /// Removes the document at `key` when its version is `expected`.
    /// Returns whether it did (`false`: another version, or none, was
    /// stored).
    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError>;

    /// Up to `limit` documents whose key starts with `prefix` and sorts
    /// after `after` (when given), in key order: page through all of them
    /// by passing the last key of each page as the next `after`.
    async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StreamError>;
}

/// Refuses a key or body over the limits, before anything is written (a
/// get or remove checks its key with an empty body).
pub fn check_document(key: &str, body: &[u8]) -> Result<(), StreamError> {
    if key.is_empty() || key.len() > MAX_DOCUMENT_KEY_BYTES {
        return Err(StreamError::InvalidArgument(format!(
            "a document key is 1 to {MAX_DOCUMENT_KEY_BYTES} bytes; this one is {}",
            key.len()
        )));
    }
    if body.len() > MAX_DOCUMENT_BYTES {
        return Err(StreamError::TooLarge {
            size: body.len(),
            limit: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(())
}

/// The version a write gives a document that had `previous` (`None`: a new
/// document): one more than before, or, for a new one, the clock's
/// microseconds (at least 1).
///
/// New documents' versions also rise within the process even when two are
/// made in one microsecond, so a document removed and made again at once
/// still gets a version above its first one's.
pub fn next_version(previous: Option<u64>) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// The last version this process gave a new document.
    static LAST_NEW: AtomicU64 = AtomicU64::new(0);
    match previous {
        Some(version) => version.saturating_add(1),
        None => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
                .unwrap_or(0)
                .max(1);
            let last = LAST_NEW
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                    Some(now.max(last.saturating_add(1)))
                })
                .unwrap_or(now);
            now.max(last.saturating_add(1))
        }
    }
}

/// The keys a [`Documents::scan`] reads, as SQL bounds: every key from
/// `start` (itself included or not) up to `end` (excluded; `None`: no end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRange {
    pub start: String,
    pub start_included: bool,
    pub end: Option<String>,
}

impl KeyRange {
    /// The keys that start with `prefix` and sort after `after`, or `None`
    /// when there can be none.
    pub fn of(prefix: &str, after: Option<&str>) -> Option<KeyRange> {
        let end = prefix_end(prefix);
        let range = match after {
            Some(after) if after >= prefix => KeyRange {
                start: after.to_owned(),
                start_included: false,
                end,
            },
            _ => KeyRange {
                start: prefix.to_owned(),
                start_included: true,
                end,
            },
        };
        let empty = range.end.as_ref().is_some_and(|end| &range.start >= end);
        (!empty).then_some(range)
    }

    /// The condition on `column`, with placeholder `start` for the start
    /// bound and `end` for the end bound (left out when there is none).
    pub fn condition(&self, column: &str, start: &str, end: &str) -> String {
        let op = if self.start_included { ">=" } else { ">" };
        match self.end {
            Some(_) => format!("{column} {op} {start} AND {column} < {end}"),
            None => format!("{column} {op} {start}"),
        }
    }
}

/// The least string above every string that starts with `prefix` (`None`
/// when there is none: `prefix` is empty or all `char::MAX`). Strings sort
/// by code point, as their UTF-8 bytes do, so the keys with the prefix are
/// exactly those from `prefix` up to this.
fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value, stepping over the surrogates.
        let next = match u32::from(last) + 1 {
            0xD800 => Some('\u{E000}'),
            code => char::from_u32(code),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Documents in this process's memory: what a memory store shares (with
/// nobody else), and what a server keeps for a store that has no shared
/// documents of its own.
#[derive(Debug, Default)]
pub struct MemoryDocuments {
    documents: Mutex<BTreeMap<String, Document>>,
}

impl MemoryDocuments {
    /// No documents yet.
    pub fn new() -> Self {
        MemoryDocuments::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Document>> {
        self.documents.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Documents for MemoryDocuments {
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError> {
        check_document(key, b"")?;
        Ok(self.lock().get(key).cloned())
    }

    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError> {
        check_document(key, &body)?;
        let mut documents = self.lock();
        let stored = documents.get(key).map(|d| d.version);
        if stored != expected {
            return Ok(None);
        }
        let version = next_version(stored);
        documents.insert(key.to_owned(), Document { version, body });
        Ok(Some(version))
    }

    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError> {
        check_document(key, b"")?;
        let mut documents = self.lock();
        if documents.get(key).map(|d| d.version) != Some(expected) {
            return Ok(false);
        }
        documents.remove(key);
        Ok(true)
    }

    async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StreamError> {
        use std::ops::Bound;
        let documents = self.lock();
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        Ok(documents
            .range((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .take(limit)
            .map(|(key, document)| (key.clone(), document.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_its_successor() {
        assert_eq!(prefix_end("sub/"), Some("sub0".into()));
        assert_eq!(prefix_end("a\u{D7FF}"), Some("a\u{E000}".into()));
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".into()));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        assert_eq!(prefix_end(""), None);
    }

    #[test]
    fn a_range_starts_after_a_later_key_and_is_empty_past_its_prefix() {
        let range = KeyRange::of("s/", Some("s/b")).expect("a range");
        assert_eq!((range.start.as_str(), range.start_included), ("s/b", false));
        assert_eq!(range.end.as_deref(), Some("s0"));
        let before = KeyRange::of("s/", Some("a")).expect("a range");
        assert_eq!((before.start.as_str(), before.start_included), ("s/", true));
        assert_eq!(KeyRange::of("s/", Some("t")), None);
        assert_eq!(KeyRange::of("", None).map(|r| r.end), Some(None));
    }

    #[test]
    fn new_versions_rise_within_a_process() {
        let versions: Vec<u64> = (0..1000).map(|_| next_version(None)).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]));
    }
}
