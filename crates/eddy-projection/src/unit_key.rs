//! Unit keys: the same for every retry of the same ranges of a binding.

use std::collections::BTreeMap;

use crate::checkpoint::CheckpointKey;
use crate::digest::Fnv;
use crate::Range;

/// A digest of the binding and its ranges, as 16 hex digits.
pub(crate) fn unit_key(key: &CheckpointKey, ranges: &BTreeMap<String, Range>) -> String {
    let mut hash = Fnv::new();
    hash.feed(key.path.as_str().as_bytes());
    for (name, range) in ranges {
        hash.feed(name.as_bytes());
        hash.feed(range.from.to_string().as_bytes());
        hash.feed(range.to.to_string().as_bytes());
        hash.feed(&[u8::from(range.closed), u8::from(range.gone)]);
    }
    hash.finish()
}
