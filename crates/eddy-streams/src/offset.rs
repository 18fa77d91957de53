//! Offsets: opaque, ordered positions in a stream.

use std::fmt;
use std::str::FromStr;

use crate::StreamError;

/// A position between two messages of a stream.
///
/// Offsets print in the canonical fixed-width form `<16 digits>_<16 digits>`,
/// so comparing the strings of one stream's offsets gives append order.
///
/// The first part is the stream's **incarnation**: every stream created at
/// a path gets one that no later stream at that path reuses (across
/// deletes, expiry, restarts and restored backups), so an offset names
/// exactly one byte sequence forever and an offset of an earlier stream at
/// the path is refused rather than read against the new one. The second
/// part counts the messages before the position.
///
/// [`Offset::ZERO`] (`0000000000000000_0000000000000000`) is the beginning
/// of whatever stream a path holds: reads and forks take it as the first
/// position of the current incarnation, like `-1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset {
    incarnation: u64,
    position: u64,
}

/// The largest value one part of an offset can print in 16 digits.
const PART_MAX: u64 = 9_999_999_999_999_999;

impl Offset {
    /// The beginning of every stream, whatever its incarnation.
    pub const ZERO: Offset = Offset {
        incarnation: 0,
        position: 0,
    };

    /// The offset after `count` messages of the stream incarnation
    /// `incarnation`.
    pub const fn new(incarnation: u64, count: u64) -> Offset {
        Offset {
            incarnation,
            position: count,
        }
    }

    /// The number of messages before this position.
    pub fn position(self) -> u64 {
        self.position
    }

    /// The incarnation of the stream this offset belongs to.
    pub fn incarnation(self) -> u64 {
        self.incarnation
    }

    /// The offset `count` messages further on, in the same incarnation.
    pub fn advanced(self, count: u64) -> Offset {
        Offset {
            incarnation: self.incarnation,
            position: self.position.saturating_add(count),
        }
    }

    /// The offset at `position` in the same incarnation.
    pub fn with_position(self, position: u64) -> Offset {
        Offset {
            incarnation: self.incarnation,
            position,
        }
    }

    /// Whether this is [`Offset::ZERO`], the beginning of any stream.
    pub fn is_zero(self) -> bool {
        self == Offset::ZERO
    }

    /// The canonical text, formed without the general formatting machinery:
    /// offsets go into several headers of every response.
    pub fn text(self) -> OffsetText {
        let mut text = OffsetText {
            bytes: [b'0'; OffsetText::MAX],
            len: 0,
        };
        let mut digits = itoa::Buffer::new();
        for (index, part) in [self.incarnation, self.position].into_iter().enumerate() {
            if index == 1 {
                text.bytes[text.len] = b'_';
                text.len += 1;
            }
            // Right-aligned in 16 zeros; a part past 16 digits prints wider.
            let printed = digits.format(part).as_bytes();
            let end = text.len + printed.len().max(16);
            text.bytes[end - printed.len()..end].copy_from_slice(printed);
            text.len = end;
        }
        text
    }
}

/// An offset's canonical text, held on the stack (see [`Offset::text`]).
#[derive(Clone, Copy, Debug)]
pub struct OffsetText {
    bytes: [u8; OffsetText::MAX],
    len: usize,
}

impl OffsetText {
    /// Two parts of a `u64`'s 20 digits at most, and the `_`.
    const MAX: usize = 41;

    /// The text's bytes (ASCII digits and one `_`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The text as a string.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and `_` are ever written.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl fmt::Display for OffsetText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.text().fmt(f)
    }
}

impl FromStr for Offset {
    type Err = StreamError;

    /// Parses the canonical form only; see [`ReadFrom`] for `-1` and `now`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || StreamError::InvalidOffset(s.chars().take(64).collect());
        let (incarnation, position) = s.split_once('_').ok_or_else(bad)?;
        let part = |p: &str| {
            if p.len() == 16 && p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<u64>().ok().filter(|v| *v <= PART_MAX)
            } else {
                None
            }
        };
        Ok(Offset {
            incarnation: part(incarnation).ok_or_else(bad)?,
            position: part(position).ok_or_else(bad)?,
        })
    }
}

impl serde::Serialize for Offset {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Offset {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a read starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// The first message (`-1`).
    Beginning,
    /// The messages after this offset.
    Offset(Offset),
    /// The current tail (`now`): only what is appended later.
    Tail,
}

impl FromStr for ReadFrom {
    type Err = StreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "-1" => Ok(ReadFrom::Beginning),
            "now" => Ok(ReadFrom::Tail),
            other => other.parse().map(ReadFrom::Offset),
        }
    }
}

impl From<Offset> for ReadFrom {
    fn from(offset: Offset) -> Self {
        ReadFrom::Offset(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_canonical() {
        assert_eq!(
            Offset::ZERO.to_string(),
            "0000000000000000_0000000000000000"
        );
    }

    #[test]
    fn prints_fixed_width_digits() {
        let offset: Offset = "0000000000000012_0000000000034567".parse().expect("offset");
        assert_eq!(offset.to_string(), "0000000000000012_0000000000034567");
        assert_eq!(
            Offset::new(0, 9_999_999_999_999_999).to_string(),
            "0000000000000000_9999999999999999"
        );
    }

    /// Small parts, parts that fill 16 digits, and parts too large for them.
    fn part() -> impl proptest::strategy::Strategy<Value = u64> {
        proptest::prop_oneof![0..1_000u64, 0..=PART_MAX, proptest::num::u64::ANY]
    }

    proptest::proptest! {
        #[test]
        fn prints_what_integer_formatting_prints(incarnation in part(), position in part()) {
            let offset = Offset { incarnation, position };
            let expected = format!("{incarnation:016}_{position:016}");
            proptest::prop_assert_eq!(offset.to_string(), expected.as_str());
            let text = offset.text();
            proptest::prop_assert_eq!(text.as_bytes(), expected.as_bytes());
        }
    }

    #[test]
    fn sentinels_parse() {
        assert_eq!("-1".parse::<ReadFrom>().ok(), Some(ReadFrom::Beginning));
        assert_eq!("now".parse::<ReadFrom>().ok(), Some(ReadFrom::Tail));
    }

    #[test]
    fn rejects_non_canonical() {
        for bad in [
            "",
            "0_0",
            "-2",
            "0000000000000000-0000000000000000",
            "000000000000000a_0000000000000000",
            "+000000000000000_0000000000000000",
            "0000000000000000_00000000000000001",
        ] {
            assert!(bad.parse::<ReadFrom>().is_err(), "{bad} parsed");
        }
    }
}
