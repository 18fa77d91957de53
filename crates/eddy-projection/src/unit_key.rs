//! Unit keys: the same for every retry of the same ranges of a binding.

use std::collections::BTreeMap;

use crate::checkpoint::CheckpointKey;
use crate::Range;

/// FNV-1a over the binding and its ranges, as 16 hex digits.
pub(crate) fn unit_key(key: &CheckpointKey, ranges: &BTreeMap<String, Range>) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    };
    feed(key.path.as_str().as_bytes());
    for (name, range) in ranges {
        feed(name.as_bytes());
        feed(range.from.to_string().as_bytes());
        feed(range.to.to_string().as_bytes());
        feed(&[u8::from(range.closed), u8::from(range.gone)]);
    }
    format!("{hash:016x}")
}
