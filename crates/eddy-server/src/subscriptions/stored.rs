//! Subscriptions kept in the store's documents: one document each, under
//! [`PREFIX`], changed only by compare-and-set, so servers that change one
//! subscription at once each apply their change to what the other wrote.

use bytes::Bytes;
use eddy_streams::{Document, MAX_DOCUMENT_KEY_BYTES};

use super::{Registry, Subscription, SubscriptionError};

/// The key prefix of subscription documents.
pub(super) const PREFIX: &str = "subscriptions/";

/// How many times a change is applied again after losing its
/// compare-and-set before the request gives up (503): each loss means
/// another server's change landed, so this is only reached under a storm
/// of changes to one subscription.
const MAX_ROUNDS: usize = 64;

/// Subscriptions read per page of a sweep.
pub(super) const PAGE: usize = 100;

/// The document key of subscription `id`.
pub(super) fn key(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// Refuses an id whose document key would be too long.
pub(super) fn check_id(id: &str) -> Result<(), SubscriptionError> {
    let max = MAX_DOCUMENT_KEY_BYTES - PREFIX.len();
    if id.len() > max {
        return Err(SubscriptionError::bad_request(format!(
            "a subscription id is at most {max} bytes; this one is {}",
            id.len()
        )));
    }
    Ok(())
}

/// A subscription as read from its document.
pub(super) fn decode(document: &Document) -> Result<Subscription, SubscriptionError> {
    serde_json::from_slice(&document.body).map_err(|e| {
        SubscriptionError::internal(format!("a stored subscription cannot be read: {e}"))
    })
}

fn encode(sub: &Subscription) -> Result<Bytes, SubscriptionError> {
    serde_json::to_vec(sub)
        .map(Bytes::from)
        .map_err(|e| SubscriptionError::internal(format!("cannot store a subscription: {e}")))
}

impl Registry {
    /// Subscription `id` and its document's version, if it exists.
    pub(super) async fn load(
        &self,
        id: &str,
    ) -> Result<Option<(Subscription, u64)>, SubscriptionError> {
        let document = self
            .documents()
            .get(&key(id))
            .await
            .map_err(|e| SubscriptionError::store(&e))?;
        document
            .map(|document| Ok((decode(&document)?, document.version)))
            .transpose()
    }

    /// The document of subscription `id` (at `key`); `NOT_FOUND`, and
    /// forgotten here, when there is none.
    async fn fetch(&self, id: &str, key: &str) -> Result<Document, SubscriptionError> {
        match self.documents().get(key).await {
            Ok(Some(document)) => Ok(document),
            Ok(None) => {
                self.remember(id, None);
                Err(SubscriptionError::not_found(id))
            }
            Err(e) => Err(SubscriptionError::store(&e)),
        }
    }

    /// Stores a new subscription; `false` when one with its id exists.
    pub(super) async fn insert(&self, sub: &Subscription) -> Result<bool, SubscriptionError> {
        let stored = self
            .documents()
            .put(&key(&sub.id), None, encode(sub)?)
            .await
            .map_err(|e| SubscriptionError::store(&e))?;
        if stored.is_some() {
            self.remember(&sub.id, Some(sub));
        }
        Ok(stored.is_some())
    }

    /// Applies `change` to subscription `id` and stores the result,
    /// applying it again to what is stored whenever another server's
    /// change landed first. A change that leaves the subscription as it
    /// was writes nothing. `NOT_FOUND` when there is no such subscription;
    /// an error of `change` is returned as it is, with nothing written.
    pub(super) async fn update<T>(
        &self,
        id: &str,
        mut change: impl FnMut(&mut Subscription) -> Result<T, SubscriptionError>,
    ) -> Result<T, SubscriptionError> {
        let documents = self.documents();
        let key = key(id);
        for _ in 0..MAX_ROUNDS {
            let document = self.fetch(id, &key).await?;
            let mut sub = decode(&document)?;
            let out = change(&mut sub)?;
            let body = encode(&sub)?;
            if body == document.body {
                return Ok(out);
            }
            let stored = documents
                .put(&key, Some(document.version), body)
                .await
                .map_err(|e| SubscriptionError::store(&e))?;
            if stored.is_some() {
                self.remember(id, Some(&sub));
                return Ok(out);
            }
        }
        Err(busy(id))
    }

    /// Deletes subscription `id`; `NOT_FOUND` when there is none.
    pub(super) async fn remove(&self, id: &str) -> Result<(), SubscriptionError> {
        let documents = self.documents();
        let key = key(id);
        for _ in 0..MAX_ROUNDS {
            let document = self.fetch(id, &key).await?;
            if documents
                .remove(&key, document.version)
                .await
                .map_err(|e| SubscriptionError::store(&e))?
            {
                self.remember(id, None);
                return Ok(());
            }
        }
        Err(busy(id))
    }
}

/// A change that lost every round to other servers' changes.
fn busy(id: &str) -> SubscriptionError {
    SubscriptionError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "BUSY",
        format!("subscription `{id}` is changed by too many requests at once; try again"),
    )
}
