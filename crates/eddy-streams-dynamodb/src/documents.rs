//! Shared documents as items of their own, in one partition (`ds|doc`,
//! the document's key as sort key; see `keys.rs` and `DESIGN.md`).
//!
//! Each write is one conditional `PutItem` or `DeleteItem` on the
//! version attribute, so the compare-and-set is DynamoDB's own; reads are
//! strongly consistent `GetItem`s and `Query`s, so every process on the
//! table sees a write as soon as it is acknowledged.

use async_trait::async_trait;
use bytes::Bytes;
use eddy_dynamo::{AttributeValue, Condition, Delete, Item, Put, Query, SortCondition};
use eddy_streams::{check_document, next_version, Document, Documents, StreamError};

use crate::backend::DynamoBackend;
use crate::errors::table_error;

/// The attribute holding a document's version.
const VERSION: &str = "v";
/// The attribute holding a document's body.
const BODY: &str = "b";

fn version(version: u64) -> AttributeValue {
    AttributeValue::N(version.to_string())
}

/// The document an item holds.
fn decode(item: &Item) -> Result<Document, StreamError> {
    let version = match item.get(VERSION) {
        Some(AttributeValue::N(n)) => n.parse().ok(),
        _ => None,
    };
    match (version, item.get(BODY)) {
        (Some(version), Some(AttributeValue::B(body))) => Ok(Document {
            version,
            body: Bytes::copy_from_slice(body),
        }),
        _ => Err(StreamError::internal(
            "a document item has no version or no body: it was not written by eddy",
        )),
    }
}

#[async_trait]
impl Documents for DynamoBackend {
    async fn get(&self, key: &str) -> Result<Option<Document>, StreamError> {
        check_document(key, b"")?;
        let shared = self.shared();
        let item = shared
            .table
            .get_item(shared.keys.document(key))
            .await
            .map_err(|e| table_error("reading a document", e))?;
        item.as_ref().map(decode).transpose()
    }

    async fn put(
        &self,
        key: &str,
        expected: Option<u64>,
        body: Bytes,
    ) -> Result<Option<u64>, StreamError> {
        check_document(key, &body)?;
        let shared = self.shared();
        let new = next_version(expected);
        let mut item = shared.keys.document(key);
        item.insert(VERSION.into(), version(new));
        item.insert(BODY.into(), AttributeValue::B(body.to_vec()));
        let condition = match expected {
            None => Condition::not_exists(shared.keys.pk.clone()),
            Some(expected) => Condition::eq(VERSION, version(expected)),
        };
        match shared.table.put_item(Put::new(item).when(condition)).await {
            Ok(()) => Ok(Some(new)),
            Err(e) if e.is_condition_failure() => Ok(None),
            Err(e) => Err(table_error("writing a document", e)),
        }
    }

    async fn remove(&self, key: &str, expected: u64) -> Result<bool, StreamError> {
        check_document(key, b"")?;
        let shared = self.shared();
        let delete =
            Delete::new(shared.keys.document(key)).when(Condition::eq(VERSION, version(expected)));
        match shared.table.delete_item(delete).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_condition_failure() => Ok(false),
            Err(e) => Err(table_error("removing a document", e)),
        }
    }

    async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Document)>, StreamError> {
        let shared = self.shared();
        let keys = &shared.keys;
        // DynamoDB refuses a start key outside the key condition: a key
        // before the prefix starts at it, one past it ends the scan.
        let start = match after {
            Some(after) if after.starts_with(prefix) => Some(keys.document(after)),
            Some(after) if after > prefix => return Ok(Vec::new()),
            _ => None,
        };
        let mut query = Query::partition(keys.documents()).start_after(start);
        if !prefix.is_empty() {
            query = query.sort(SortCondition::BeginsWith(AttributeValue::S(prefix.into())));
        }
        let mut found = Vec::new();
        // A page may stop short of the limit (1 MB per page).
        while found.len() < limit {
            let page = shared
                .table
                .query(query.clone().limit(limit - found.len()))
                .await
                .map_err(|e| table_error("scanning the documents", e))?;
            for item in &page.items {
                if let Some(key) = keys.sort_of(item) {
                    found.push((key.to_owned(), decode(item)?));
                }
            }
            match page.last_evaluated_key {
                Some(last) => query = query.start_after(Some(last)),
                None => break,
            }
        }
        Ok(found)
    }
}
