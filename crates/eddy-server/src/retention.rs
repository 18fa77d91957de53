//! Server-wide retention and compaction rules: a policy for the streams
//! created under a path pattern, when the create does not name one
//! (`Eddy-Retention`, `Eddy-Compaction`).
//!
//! A rule is written `PATTERN=POLICY`, the pattern up to the first `=`:
//! `logs/**=age=7d` or `metrics/*=messages=1000; bytes=10MB` (retention),
//! `state/**=age=1h; deletes=7d` or `state/scratch/*=none` (compaction). Patterns are
//! globs as subscriptions take them (`*` within a segment, `**` across
//! segments), compiled once to an automaton, so a path is matched in time
//! linear in its length. The first rule that matches wins. The policy is
//! stored with the stream when it is created, so every server on a
//! shared store applies it, and changing the rules later changes only
//! the streams created after.

use std::fmt;
use std::str::FromStr;

use eddy_streams::{Compaction, Retention};
use globset::{GlobBuilder, GlobMatcher};

/// A policy a [`PathRule`] gives: parsed from the rule's text, printed
/// back in its canonical form.
pub trait RulePolicy: Copy {
    /// What the rules are about, for error messages.
    const KIND: &'static str;
    /// An example rule, for error messages.
    const EXAMPLE: &'static str;

    /// The policy written `text`.
    fn parse(text: &str) -> Result<Self, String>;

    /// The policy in its canonical form.
    fn show(&self) -> String;
}

impl RulePolicy for Retention {
    const KIND: &'static str = "retention";
    const EXAMPLE: &'static str = "logs/**=age=7d";

    fn parse(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|e: eddy_streams::RetentionError| e.to_string())
    }

    fn show(&self) -> String {
        self.to_string()
    }
}

/// A compaction rule's policy: `none` exempts the paths it matches.
impl RulePolicy for Option<Compaction> {
    const KIND: &'static str = "compaction";
    const EXAMPLE: &'static str = "state/**=age=1h; deletes=7d";

    fn parse(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|e: eddy_streams::CompactionError| e.to_string())
    }

    fn show(&self) -> String {
        self.map_or_else(|| "none".to_owned(), |policy| policy.to_string())
    }
}

/// One rule: the policy of the streams created under a pattern.
#[derive(Clone)]
pub struct PathRule<P> {
    pattern: String,
    matcher: GlobMatcher,
    policy: P,
}

/// A retention rule (`--retention PATTERN=POLICY`).
pub type RetentionRule = PathRule<Retention>;

/// A compaction rule (`--compaction PATTERN=POLICY`; `none` exempts).
pub type CompactionRule = PathRule<Option<Compaction>>;

impl<P: RulePolicy> PathRule<P> {
    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The policy.
    pub fn policy(&self) -> P {
        self.policy
    }

    /// Whether the rule covers the stream at `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }
}

impl<P: RulePolicy> fmt::Debug for PathRule<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl<P: RulePolicy> fmt::Display for PathRule<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.pattern, self.policy.show())
    }
}

impl<P: RulePolicy> FromStr for PathRule<P> {
    type Err = String;

    fn from_str(rule: &str) -> Result<Self, String> {
        let kind = P::KIND;
        let (pattern, policy) = rule.split_once('=').ok_or_else(|| {
            format!(
                "{kind} rule `{rule}` is not PATTERN=POLICY (e.g. `{}`)",
                P::EXAMPLE
            )
        })?;
        let pattern = pattern.trim().trim_start_matches('/');
        if pattern.is_empty() {
            return Err(format!("{kind} rule `{rule}` has an empty pattern"));
        }
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("{kind} rule `{rule}`: invalid pattern: {}", e.kind()))?
            .compile_matcher();
        let policy = P::parse(policy).map_err(|e| format!("{kind} rule `{rule}`: {e}"))?;
        Ok(PathRule {
            pattern: pattern.to_owned(),
            matcher,
            policy,
        })
    }
}

/// The policy the first of `rules` that covers `path` gives, if any.
pub(crate) fn policy_for<P: RulePolicy>(rules: &[PathRule<P>], path: &str) -> Option<P> {
    rules
        .iter()
        .find(|rule| rule.matches(path))
        .map(PathRule::policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_the_first_match_wins() {
        let rules: Vec<RetentionRule> = [
            "logs/**=age=7d",
            "/metrics/*=messages=10; bytes=1KB",
            "**=none",
        ]
        .iter()
        .map(|text| text.parse().expect("rule"))
        .collect();
        assert_eq!(rules[1].to_string(), "metrics/*=messages=10; bytes=1KB");
        let age = "age=7d".parse::<Retention>().ok();
        assert_eq!(policy_for(&rules, "logs/a/b"), age);
        assert_eq!(
            policy_for(&rules, "metrics/cpu").map(|p| p.messages),
            Some(Some(10))
        );
        assert_eq!(policy_for(&rules, "metrics/cpu/1"), Some(Retention::NONE));
        assert_eq!(policy_for(&rules[..2], "orders/1"), None);
    }

    #[test]
    fn compaction_rules_take_none_to_exempt() {
        let rules: Vec<CompactionRule> = ["state/scratch/*=none", "state/**=age=1h; deletes=7d"]
            .iter()
            .map(|text| text.parse().expect("rule"))
            .collect();
        assert_eq!(rules[0].to_string(), "state/scratch/*=none");
        assert_eq!(policy_for(&rules, "state/scratch/a"), Some(None));
        assert_eq!(
            policy_for(&rules, "state/a/b")
                .flatten()
                .map(|p| p.to_string()),
            Some("age=1h; deletes=7d".to_owned())
        );
        assert_eq!(policy_for(&rules, "logs/a"), None);
        let err = "state/**=messages=0"
            .parse::<CompactionRule>()
            .expect_err("bad");
        assert!(err.contains("invalid compaction policy"), "{err}");
    }

    #[test]
    fn bad_rules_say_why() {
        for (rule, why) in [
            ("logs/**", "PATTERN=POLICY"),
            ("=age=1d", "empty pattern"),
            ("logs/[=age=1d", "invalid pattern"),
            ("logs/**=age=soon", "invalid retention policy"),
        ] {
            let err = rule.parse::<RetentionRule>().expect_err(rule);
            assert!(err.contains(why), "{rule}: {err}");
        }
    }
}
