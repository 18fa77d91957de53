//! Failed deliveries: what a consumer says about a failure, what the
//! outbox records of it on the head item, and parked rows.
//!
//! A consumer's `deliver` may fail with a [`DeliveryError`] (anywhere in
//! its error's source chain): a stable code, and whether retrying can fix
//! it. Any other error is transient, code `delivery/failed`.
//!
//! - Every failed delivery is recorded on the head item, in the same
//!   write that gives its claim back: `lastErrorCode`, `lastError` (at
//!   most [`MAX_ERROR_BYTES`]), `failedAt` (epoch ms) and `failures` (a
//!   count). A transient failure is tried again by the next drain.
//! - A permanent failure also sets `parkedAt`: the row is *parked*. No
//!   drain claims a parked head (the row waits, visibly: in `pending`,
//!   `pending_rows`, the parked metrics and the command group), until an
//!   operator [unparks](Outbox::unpark) it (the next drain tries it again)
//!   or [drops](Outbox::drop_parked) it (after moving it to a dead-letter
//!   stream, or not).

use super::item::{
    Effect, CLAIMED_UNTIL, CLAIM_ID, ENQUEUED_AT, FAILED_AT, FAILURES, LAST_ERROR, LAST_ERROR_CODE,
    PARKED_AT, SOURCE, STREAM_ID, VERSION,
};
use super::Outbox;
use crate::condition::Condition;
use crate::error::{BoxError, Error, TableError};
use crate::item::{get_str, get_u64, n, s, Item};
use crate::query::{Query, SortCondition};
use crate::request::{Delete, UpdateItem};
use crate::update::Update;

/// The longest error message kept on an outbox item (the rest is cut):
/// items stay far below DynamoDB's 400 KB.
pub const MAX_ERROR_BYTES: usize = 1024;

/// The code of a failure that says nothing of itself.
const UNKNOWN_CODE: &str = "delivery/failed";

/// Why a consumer could not take an effect: a stable code and whether
/// retrying can fix it. Return it (boxed, or as the source of the error
/// `deliver` returns) so that the outbox parks a row whose head can never
/// be delivered instead of trying it forever.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {source}")]
pub struct DeliveryError {
    code: String,
    permanent: bool,
    #[source]
    source: BoxError,
}

impl DeliveryError {
    /// A failure that retrying cannot fix (the row is parked).
    pub fn permanent(code: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self {
            code: code.into(),
            permanent: true,
            source: source.into(),
        }
    }

    /// A failure that a later try may not meet (the effect is tried again).
    pub fn transient(code: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self {
            code: code.into(),
            permanent: false,
            source: source.into(),
        }
    }

    /// Its stable code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Whether retrying cannot fix it.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

/// The code of a failed delivery and whether it is permanent: the first
/// [`DeliveryError`] in its source chain decides; anything else is
/// transient.
pub(crate) fn classify(error: &(dyn std::error::Error + 'static)) -> (String, bool) {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(failure) = e.downcast_ref::<DeliveryError>() {
            return (failure.code.clone(), failure.permanent);
        }
        cause = e.source();
    }
    (UNKNOWN_CODE.to_owned(), false)
}

/// The last failed delivery of a row's head, as recorded on its item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastFailure {
    /// The failure's stable code.
    pub code: String,
    /// Its message, with its causes (cut at [`MAX_ERROR_BYTES`]).
    pub message: String,
    /// When it failed (epoch milliseconds, by the outbox's clock).
    pub at: u64,
    /// How many deliveries of this effect failed.
    pub failures: u64,
    /// Whether the failure was permanent and the row is parked: no drain
    /// tries it until it is unparked.
    pub parked: bool,
}

impl LastFailure {
    /// The failure recorded on an outbox item, if one is.
    pub(crate) fn of(item: &Item) -> Option<Self> {
        Some(Self {
            code: get_str(item, LAST_ERROR_CODE)?.to_owned(),
            message: get_str(item, LAST_ERROR).unwrap_or_default().to_owned(),
            at: get_u64(item, FAILED_AT).unwrap_or_default(),
            failures: get_u64(item, FAILURES).unwrap_or_default(),
            parked: item.contains_key(PARKED_AT),
        })
    }
}

/// A row whose head effect is parked: its delivery failed permanently.
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    /// The head effect.
    pub effect: Effect,
    /// Why its delivery failed.
    pub failure: LastFailure,
}

/// An error's message with its causes, on one line, cut to at most
/// [`MAX_ERROR_BYTES`] (at a character boundary).
fn message_of(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = crate::error_chain(error).replace('\n', " ");
    if text.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl Outbox {
    /// Records a failed delivery on the head item `key` and gives its
    /// claim back, in one write conditioned on the claim still being ours
    /// (a drainer that took an expired claim over records its own).
    /// Returns what was recorded.
    pub(crate) async fn record_failure(
        &self,
        key: Item,
        claim: String,
        error: &(dyn std::error::Error + Send + Sync + 'static),
    ) -> Result<LastFailure, Error> {
        let (code, permanent) = classify(error);
        let message = message_of(error);
        let at = (self.clock)();
        let mut update = Update::new()
            .remove(CLAIMED_UNTIL)
            .remove(CLAIM_ID)
            .set(LAST_ERROR_CODE, s(code.clone()))
            .set(LAST_ERROR, s(message.clone()))
            .set(FAILED_AT, n(at))
            .add(FAILURES, n(1));
        if permanent {
            update = update.set(PARKED_AT, n(at));
        }
        let request = UpdateItem::new(key, update).when(Condition::eq(CLAIM_ID, s(claim)));
        let failures = match self.table.update_item(request).await {
            Ok(item) => {
                if permanent {
                    crate::metrics::parked(self.read_model());
                }
                get_u64(&item, FAILURES).unwrap_or(1)
            }
            // Another drainer took the expired claim over: it records
            // its own try.
            Err(TableError::ConditionalCheckFailed { .. }) => 1,
            Err(e) => return Err(e.into()),
        };
        Ok(LastFailure {
            code,
            message,
            at,
            failures,
            parked: permanent,
        })
    }

    /// The head item of a row, if it has pending effects.
    pub(crate) async fn head_item(&self, row_key: &Item) -> Result<Option<Item>, Error> {
        let (pk, prefix) = self.range_of(row_key)?;
        let head = Query::partition(s(pk))
            .sort(SortCondition::BeginsWith(s(prefix)))
            .limit(1);
        Ok(self.table.query(head).await?.items.into_iter().next())
    }

    /// The row's parked head, if its head is parked.
    pub async fn parked(&self, row_key: &Item) -> Result<Option<Parked>, Error> {
        let Some(item) = self.head_item(row_key).await? else {
            return Ok(None);
        };
        match LastFailure::of(&item) {
            Some(failure) if failure.parked => Ok(Some(Parked {
                effect: self.decode(&item)?,
                failure,
            })),
            _ => Ok(None),
        }
    }

    /// Unparks a row: its head is tried again by the next drain (its last
    /// failure stays recorded until it is delivered). Returns the head
    /// that was parked, `None` when the row's head was not parked.
    pub async fn unpark(&self, row_key: &Item) -> Result<Option<Parked>, Error> {
        let Some(parked) = self.parked(row_key).await? else {
            return Ok(None);
        };
        let Some(item) = self.head_item(row_key).await? else {
            return Ok(None);
        };
        let request = UpdateItem::new(self.key_of(&item)?, Update::new().remove(PARKED_AT))
            .when(self.same_effect(&item).and(Condition::exists(PARKED_AT)));
        match self.table.update_item(request).await {
            Ok(_) => Ok(Some(parked)),
            Err(TableError::ConditionalCheckFailed { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Drops a parked row's head `effect` (as [`parked`](Self::parked)
    /// returned it) from the outbox, so the row goes on with its next
    /// effect: the caller moved it to a dead-letter stream first, or
    /// chose to lose it. Only that effect, and only while it is parked:
    /// returns `false` (and drops nothing) otherwise.
    pub async fn drop_parked(&self, row_key: &Item, effect: &Effect) -> Result<bool, Error> {
        let Some(item) = self.head_item(row_key).await? else {
            return Ok(false);
        };
        if self.decode(&item)? != *effect || !item.contains_key(PARKED_AT) {
            return Ok(false);
        }
        let delete = Delete::new(self.key_of(&item)?)
            .when(self.same_effect(&item).and(Condition::exists(PARKED_AT)));
        match self.table.delete_item(delete).await {
            Ok(()) => {
                crate::metrics::dropped(self.read_model());
                Ok(true)
            }
            Err(TableError::ConditionalCheckFailed { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The condition that the item at an outbox key is still the effect
    /// `item` holds (a key can be reused by a row started again).
    pub(crate) fn same_effect(&self, item: &Item) -> Condition {
        [SOURCE, STREAM_ID, VERSION, ENQUEUED_AT]
            .into_iter()
            .map(|name| match item.get(name) {
                Some(value) => Condition::eq(name, value.clone()),
                None => Condition::absent(name),
            })
            .reduce(Condition::and)
            .unwrap_or_else(|| Condition::exists(SOURCE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another, as a consumer's own error type does.
    #[derive(Debug, thiserror::Error)]
    #[error("delivering: {0}")]
    struct Wrapper(#[source] DeliveryError);

    #[test]
    fn the_first_delivery_error_in_the_chain_decides() {
        let permanent = Wrapper(DeliveryError::permanent("stream/closed", "closed"));
        assert_eq!(classify(&permanent), ("stream/closed".to_owned(), true));
        let transient = DeliveryError::transient("storage-failure", "down");
        assert_eq!(classify(&transient), ("storage-failure".to_owned(), false));
        let plain: BoxError = "the consumer is down".into();
        assert_eq!(classify(plain.as_ref()), (UNKNOWN_CODE.to_owned(), false));
    }

    #[test]
    fn a_recorded_message_is_one_line_and_bounded() {
        let long = Wrapper(DeliveryError::permanent("x", "é\n".repeat(MAX_ERROR_BYTES)));
        let message = message_of(&long);
        assert!(message.len() <= MAX_ERROR_BYTES, "{}", message.len());
        assert!(!message.contains('\n'));
        assert!(message.starts_with("delivering: x: é"), "{message}");
    }
}
