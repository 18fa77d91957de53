//! Random tokens: wake ids, callback and claim tokens.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// A random token (wake ids, callback and claim tokens).
pub(super) fn token() -> String {
    let mut bytes = [0u8; 18];
    // Without OS randomness, fall back to the clock: tokens then only fence
    // stale wakes, which the generation number does too.
    if getrandom::getrandom(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes[..16].copy_from_slice(&nanos.to_le_bytes());
    }
    URL_SAFE_NO_PAD.encode(bytes)
}
