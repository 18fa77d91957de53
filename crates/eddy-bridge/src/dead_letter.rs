//! The dead-letter record of an effect whose delivery failed for good.
//!
//! One JSON message per effect: the projection's name and the effect's
//! producer id, its row key, source, stream instance, version and index
//! (its identity), the revision and position of the row write that
//! committed it, the stream it was meant for, its payload as JSON, and
//! the failure's code and message (a record too large for the dead-letter
//! stream is appended without its payload, `payloadOmitted` saying so):
//!
//! ```json
//! {"projection":"shipments","producer":"shipments:…","row":{"pk":"…","sk":"…"},
//!  "source":"scan","streamId":"shipmentId=sh-1","version":3,"index":0,
//!  "revision":5,"position":0,"target":"freight/notices",
//!  "payload":{"kind":"at depot"},"error":{"code":"stream/closed","message":"…"}}
//! ```
//!
//! It is appended as a producer of its own in the dead-letter stream (the
//! effect's producer id with `@dead-letter` after it, the effect's epoch),
//! so a crash between the append and the outbox's delete appends nothing
//! twice.

use bytes::Bytes;
use eddy_dynamo::Effect;
use eddy_streams::ProducerPosition;
use serde_json::{json, Value};

use crate::{producer, BridgeError};

/// Why an effect's delivery failed.
pub(crate) struct Failure<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

/// The record of `effect` of projection `name`, meant for `target`, whose
/// delivery failed; with its payload, or with `payloadOmitted` instead
/// when the record with it is larger than the dead-letter stream takes.
pub(crate) fn record(
    name: &str,
    effect: &Effect,
    target: Option<String>,
    failure: &Failure<'_>,
    with_payload: bool,
) -> Result<Bytes, BridgeError> {
    let row: Value = serde_dynamo::from_item(effect.row.clone()).unwrap_or(Value::Null);
    // A payload that is no JSON value (it may be why the effect failed)
    // is recorded as its DynamoDB form.
    let payload = serde_dynamo::from_attribute_value::<_, Value>(effect.payload.clone())
        .unwrap_or_else(|_| Value::String(format!("{:?}", effect.payload)));
    let (code, message) = (failure.code, failure.message);
    let mut record = json!({
        "projection": name,
        "producer": producer::id(name, effect),
        "row": row,
        "source": effect.source,
        "streamId": effect.stream_id.to_string(),
        "version": effect.version,
        "index": effect.index,
        "revision": effect.revision,
        "position": effect.position,
        "target": target,
        "payload": payload,
        "error": { "code": code, "message": message },
    });
    if !with_payload {
        record["payload"] = Value::Null;
        record["payloadOmitted"] =
            Value::from("the record with its payload is larger than the dead-letter stream takes");
    }
    serde_json::to_vec(&record)
        .map(Bytes::from)
        .map_err(|e| BridgeError::Encode(e.into()))
}

/// The producer the record of `effect` is appended as.
pub(crate) fn producer(name: &str, effect: &Effect) -> Result<ProducerPosition, BridgeError> {
    let position = producer::position(name, effect)?;
    Ok(ProducerPosition::new(
        format!("{}@dead-letter", position.id),
        position.epoch,
        position.seq,
    ))
}
