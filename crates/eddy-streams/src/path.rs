//! Validated stream paths.

use std::fmt;

use crate::StreamError;

/// The longest path the store accepts, in bytes.
pub const MAX_PATH_LEN: usize = 1024;

/// A stream's address, such as `facts/ws-42`.
///
/// Paths are `/`-separated segments. A valid path is non-empty, at most
/// [`MAX_PATH_LEN`] bytes, has no leading or trailing `/`, no empty, `.` or
/// `..` segment, and no control character (NUL included).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamPath(String);

impl StreamPath {
    /// Validates `path`.
    pub fn new(path: impl Into<String>) -> Result<Self, StreamError> {
        let path = path.into();
        match problem(&path) {
            None => Ok(StreamPath(path)),
            Some(reason) => Err(StreamError::InvalidPath {
                path: path.chars().take(128).collect(),
                reason: reason.to_owned(),
            }),
        }
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StreamPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for StreamPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for StreamPath {
    type Err = StreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StreamPath::new(s)
    }
}

impl TryFrom<&str> for StreamPath {
    type Error = StreamError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        StreamPath::new(s)
    }
}

const CONTROL: &str = "it contains a control character";
const EMPTY_SEGMENT: &str = "it has an empty segment (leading, trailing or double `/`)";
const DOT_SEGMENT: &str = "it has a `.` or `..` segment";

/// Why `path` is not a valid stream path, if it is not. One pass over the
/// bytes, as this runs on every request; a control character is reported
/// before a bad segment.
fn problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("it is empty");
    }
    if path.len() > MAX_PATH_LEN {
        return Some("it is longer than 1024 bytes");
    }
    let bytes = path.as_bytes();
    let mut bad_segment = None;
    let mut start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        // The control characters are U+0000–U+001F and U+007F–U+009F; the
        // last ones are encoded as 0xC2 0x80–0x9F.
        let c1 = byte == 0xC2 && matches!(bytes.get(at + 1), Some(0x80..=0x9F));
        if byte < 0x20 || byte == 0x7F || c1 {
            return Some(CONTROL);
        }
        if byte == b'/' {
            bad_segment = bad_segment.or(segment_problem(&bytes[start..at]));
            start = at + 1;
        }
    }
    bad_segment.or(segment_problem(&bytes[start..]))
}

fn segment_problem(segment: &[u8]) -> Option<&'static str> {
    match segment {
        b"" => Some(EMPTY_SEGMENT),
        b"." | b".." => Some(DOT_SEGMENT),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The rules as written down, check by check: the oracle for the one
    /// pass of [`problem`].
    fn problem_by_the_rules(path: &str) -> Option<&'static str> {
        if path.is_empty() {
            return Some("it is empty");
        }
        if path.len() > MAX_PATH_LEN {
            return Some("it is longer than 1024 bytes");
        }
        if path.chars().any(char::is_control) {
            return Some(CONTROL);
        }
        path.split('/').find_map(|segment| match segment {
            "" => Some(EMPTY_SEGMENT),
            "." | ".." => Some(DOT_SEGMENT),
            _ => None,
        })
    }

    proptest! {
        #[test]
        fn one_pass_finds_what_the_rules_find(
            path in r"([a./]|\PC|\p{Cc}|\x{9F}|\x{A0}){0,12}"
        ) {
            prop_assert_eq!(problem(&path), problem_by_the_rules(&path));
        }

        #[test]
        fn any_text_is_judged_as_the_rules_judge_it(path in any::<String>()) {
            prop_assert_eq!(problem(&path), problem_by_the_rules(&path));
        }
    }

    #[test]
    fn accepts_ordinary_paths() {
        for ok in ["facts/ws-42", "a", "v1/stream/x y", "ümlaut/ok"] {
            assert!(StreamPath::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_bad_paths() {
        let long = "a".repeat(MAX_PATH_LEN + 1);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "a/../b",
            "..",
            "./a",
            "a\0b",
            "a\nb",
            long.as_str(),
        ] {
            let err = StreamPath::new(bad).err();
            assert_eq!(err.map(|e| e.code()), Some("path/invalid"), "{bad:?}");
        }
    }
}
