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
        let invalid = |reason: &str| StreamError::InvalidPath {
            path: path.chars().take(128).collect(),
            reason: reason.to_owned(),
        };
        if path.is_empty() {
            return Err(invalid("it is empty"));
        }
        if path.len() > MAX_PATH_LEN {
            return Err(invalid("it is longer than 1024 bytes"));
        }
        if path.chars().any(char::is_control) {
            return Err(invalid("it contains a control character"));
        }
        for segment in path.split('/') {
            match segment {
                "" => {
                    return Err(invalid(
                        "it has an empty segment (leading, trailing or double `/`)",
                    ))
                }
                "." | ".." => return Err(invalid("it has a `.` or `..` segment")),
                _ => {}
            }
        }
        Ok(StreamPath(path))
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

#[cfg(test)]
mod tests {
    use super::*;

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
