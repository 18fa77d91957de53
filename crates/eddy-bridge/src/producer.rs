//! The idempotent producer an effect is appended as.
//!
//! Each row is one producer (its id comes from the row's key), and each
//! effect one *epoch* of it, starting at sequence 0: epoch = revision ×
//! 100 + position, where the revision is the row write's (it only grows
//! for a row: tombstones keep it) and the position the effect's place in
//! that write (below 100). Epochs therefore grow in the row's outbox
//! order, whatever stream each effect goes to:
//!
//! - a redelivery of the effect last appended to a stream is the same
//!   epoch and sequence: the store answers it as a duplicate;
//! - a redelivery of an older effect (an expired claim let a second
//!   drainer deliver it after the next one) has a lower epoch: the store
//!   refuses it as fenced, which means a later effect of the row is
//!   already in the stream, so this one was delivered before it.
//!
//! Nothing is appended twice, and a row's effects are in outbox order.

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
        .revision
        .checked_mul(MAX_EFFECTS_PER_WRITE as u64 + 1)
        .and_then(|base| base.checked_add(u64::from(effect.position)))
        .ok_or(crate::BridgeError::Revision {
            revision: effect.revision,
        })?;
    Ok(ProducerPosition::new(id(name, effect), epoch, 0))
}

/// `<name>:<key>/<key>` of the effect's row (its key attributes in name
/// order, escaped as in [`row_path`](crate::row_path): visible ASCII, so
/// that the id travels in an HTTP header), or `<name>:sha256:<digest>`
/// when that is long.
pub fn id(name: &str, effect: &Effect) -> String {
    let key = crate::route::escaped_key(effect);
    let id = format!("{name}:{key}");
    if id.len() <= MAX_ID_BYTES {
        return id;
    }
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}:sha256:{hex}")
}
