//! Stream path patterns of subscriptions: `*` matches within one path
//! segment, `**` any number of whole segments, `?` one character, `[…]` a
//! character class, `{a,b}` alternatives.
//!
//! A pattern is compiled once, when the subscription is made, into a
//! finite automaton (`globset`, over a regex), so matching a path takes
//! time linear in the path whatever the pattern. Patterns are capped in
//! length and in wildcards so that compiling stays small too.

use globset::{GlobBuilder, GlobMatcher};

use crate::ServerConfig;

/// A compiled subscription pattern.
#[derive(Clone, Debug)]
pub(super) struct Pattern {
    text: String,
    matcher: GlobMatcher,
}

impl Pattern {
    /// Compiles `text` within the server's limits; the error says why a
    /// pattern is refused.
    ///
    /// ```text
    /// events/*      matches events/a, not events/a/b
    /// events/**     matches events/a and events/a/b
    /// orders/eu-*   matches orders/eu-1
    /// ```
    pub(super) fn compile(text: &str, config: &ServerConfig) -> Result<Pattern, String> {
        if text.len() > config.max_pattern_bytes {
            return Err(format!(
                "the pattern is {} bytes; the limit is {} bytes",
                text.len(),
                config.max_pattern_bytes
            ));
        }
        let wildcards = wildcards(text);
        if wildcards > config.max_pattern_wildcards {
            return Err(format!(
                "the pattern has {wildcards} wildcards; the limit is {} wildcards",
                config.max_pattern_wildcards
            ));
        }
        Pattern::compiled(text)
    }

    /// Compiles a pattern that passed the limits when its subscription
    /// was made (the limits may have changed since).
    fn compiled(text: &str) -> Result<Pattern, String> {
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid pattern `{text}`: {}", e.kind()))?;
        Ok(Pattern {
            text: text.to_owned(),
            matcher: glob.compile_matcher(),
        })
    }

    /// Whether `path` (relative to the subscription's base) matches.
    pub(super) fn matches(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }

    /// What every path it matches starts with: the text before its first
    /// wildcard or escape (without the `/` before a `**`, which may match
    /// no segment at all).
    pub(super) fn literal_prefix(&self) -> &str {
        let end = self
            .text
            .find(['*', '?', '[', '{', '\\'])
            .unwrap_or(self.text.len());
        let literal = &self.text[..end];
        if self.text[end..].starts_with("**") {
            literal.strip_suffix('/').unwrap_or(literal)
        } else {
            literal
        }
    }

    /// The pattern as the client wrote it.
    pub(super) fn as_str(&self) -> &str {
        &self.text
    }
}

/// A stored pattern is its text; loading compiles it again.
impl serde::Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Pattern::compiled(&text).map_err(serde::de::Error::custom)
    }
}

/// The wildcards of a pattern: each run of `*` and each `?`, `[` and `{`.
fn wildcards(text: &str) -> usize {
    let mut count = 0;
    let mut previous = '\0';
    for c in text.chars() {
        if matches!(c, '?' | '[' | '{') || (c == '*' && previous != '*') {
            count += 1;
        }
        previous = c;
    }
    count
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pattern(text: &str) -> Pattern {
        Pattern::compile(text, &ServerConfig::default()).expect("a valid pattern")
    }

    #[test]
    fn globs() {
        assert!(pattern("events/*").matches("events/a"));
        assert!(!pattern("events/*").matches("events/a/b"));
        assert!(pattern("events/**").matches("events/a/b"));
        assert!(pattern("orders/eu-*").matches("orders/eu-1"));
        assert!(!pattern("orders/eu-*").matches("orders/us-1"));
        assert!(pattern("exact").matches("exact"));
        assert!(pattern("{a,b}/?").matches("b/x"));
    }

    #[test]
    fn literal_prefixes_stop_at_the_first_wildcard() {
        assert_eq!(pattern("events/*").literal_prefix(), "events/");
        assert_eq!(pattern("events/**").literal_prefix(), "events");
        assert_eq!(pattern("orders/eu-?").literal_prefix(), "orders/eu-");
        assert_eq!(pattern("exact/path").literal_prefix(), "exact/path");
        assert_eq!(pattern("a\\*b").literal_prefix(), "a");
        assert_eq!(pattern("**/x").literal_prefix(), "");
    }

    #[test]
    fn wildcards_are_counted_per_run() {
        assert_eq!(wildcards("a/**/b*"), 2);
        assert_eq!(wildcards("x?[ab]{c,d}"), 3);
        assert_eq!(wildcards("plain/path"), 0);
    }

    proptest! {
        /// Any bytes as a pattern and as a path: compiling either refuses
        /// with a reason or gives a matcher that answers.
        #[test]
        fn compiling_and_matching_are_total(text in any::<Vec<u8>>(), path in any::<Vec<u8>>()) {
            let text = String::from_utf8_lossy(&text);
            match Pattern::compile(&text, &ServerConfig::default()) {
                Ok(compiled) => {
                    let _ = compiled.matches(&String::from_utf8_lossy(&path));
                }
                Err(reason) => prop_assert!(!reason.is_empty()),
            }
        }

        /// Every path a pattern matches starts with its literal prefix
        /// (a listing of that prefix finds all its matches).
        #[test]
        fn matches_start_with_the_literal_prefix(parts in proptest::collection::vec("[*?ab/]{1,2}|\\{a,b\\}|\\[ab\\]", 1..8), path in "[ab/]{0,12}") {
            let text: String = parts.concat();
            if let Ok(compiled) = Pattern::compile(&text, &ServerConfig::default()) {
                if compiled.matches(&path) {
                    prop_assert!(path.starts_with(compiled.literal_prefix()), "{text} matches {path}");
                }
            }
        }

        /// Patterns made of wildcards and literals within the limits match
        /// long paths (the matcher is linear, so this finishes).
        #[test]
        fn wild_patterns_match_long_paths(parts in proptest::collection::vec("[*?ab/]{1,2}", 1..16), path in "[ab/]{0,300}") {
            let text: String = parts.concat();
            if let Ok(compiled) = Pattern::compile(&text, &ServerConfig::default()) {
                let _ = compiled.matches(&path);
            }
        }
    }
}
