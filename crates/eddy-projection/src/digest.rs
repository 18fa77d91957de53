//! A small, stable digest (64-bit FNV-1a) for values the engine
//! compares across processes: unit keys, and the offsets of a thinned
//! range's items.

/// An FNV-1a hash, fed in parts.
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds one part, followed by a separator, so that parts `ab`,`c`
    /// and `a`,`bc` differ.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.byte(*byte);
        }
        self.byte(0xff);
    }

    fn byte(&mut self, byte: u8) {
        self.0 ^= u64::from(byte);
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    /// The hash as 16 hex digits.
    pub(crate) fn finish(&self) -> String {
        format!("{:016x}", self.0)
    }
}
