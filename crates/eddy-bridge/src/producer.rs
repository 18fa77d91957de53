//! The idempotent producer an effect is appended as.
//!
//! An effect's identity is the outbox's own: `(stream id, version,
//! index)` — the event's stream instance, its version, and the effect's
//! place among that event's effects. Each row and event stream instance
//! it reads is one producer (its id comes from both), and each effect one
//! *epoch* of it, starting at sequence 0: epoch = version × 100 + index
//! (an event has at most 100 effects). Each effect being an epoch of its
//! own, the effects of one event may go to different streams. A row
//! applies one stream's events in version order, and the outbox hands
//! out its effects in that order, so each producer's epochs only grow:
//!
//! - a redelivery of the effect last appended to a stream is the same
//!   epoch and sequence: the store answers it as a duplicate;
//! - a redelivery of an older effect (an expired claim let a
//!   second drainer deliver it after the next one, or a `rebuild`
//!   committed it again) has a lower epoch: the store refuses it as
//!   fenced, which means a later effect of that producer is already in
//!   the stream, so this one was delivered before it.
//!
//! Neither depends on the row's revision, which starts again when a
//! row's tombstone expires and changes when a `rebuild` writes the row
//! again: a revived row's events have versions above the old ones (or
//! come from a new stream instance, a new producer), so they are
//! appended.

use eddy_dynamo::{Effect, MAX_EFFECTS_PER_WRITE};
use eddy_streams::ProducerPosition;
use sha2::{Digest, Sha256};

/// Producer ids longer than this are replaced by a digest of the row key.
const MAX_ID_BYTES: usize = 200;

/// The producer position of `effect`, for rows of `name` (the projection,
/// or any name that tells the rows of different tables apart on one
/// stream).
pub fn position(name: &str, effect: &Effect) -> Result<ProducerPosition, crate::BridgeError> {
    let epoch = effect
        .version
        .checked_mul(MAX_EFFECTS_PER_WRITE as u64 + 1)
        .and_then(|base| base.checked_add(u64::from(effect.index)))
        .ok_or(crate::BridgeError::Version {
            version: effect.version,
        })?;
    Ok(ProducerPosition::new(id(name, effect), epoch, 0))
}

/// `<name>:<key>/<key>:<stream id>` of the effect's row and event
/// stream instance (the row's key attributes in name order, each part
/// escaped as in [`row_path`](crate::row_path): visible ASCII, so that
/// the id travels in an HTTP header), or `<name>:sha256:<digest>` when
/// that is long.
pub fn id(name: &str, effect: &Effect) -> String {
    let mut key = crate::route::escaped_key(effect);
    key.push(':');
    crate::route::escape(effect.stream_id.to_string().as_bytes(), &mut key);
    let id = format!("{name}:{key}");
    if id.len() <= MAX_ID_BYTES {
        return id;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}:sha256:{hex}")
}
