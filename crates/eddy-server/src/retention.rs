//! Server-wide retention rules: a policy for the streams created under a
//! path pattern, when the create does not name one (`Eddy-Retention`).
//!
//! A rule is written `PATTERN=POLICY`, the pattern up to the first `=`:
//! `logs/**=age=7d` or `metrics/*=messages=1000; bytes=10MB`. Patterns are
//! globs as subscriptions take them (`*` within a segment, `**` across
//! segments), compiled once to an automaton, so a path is matched in time
//! linear in its length. The first rule that matches wins. The policy is
//! stored with the stream when it is created, so every server on a
//! shared store applies it, and changing the rules later changes only
//! the streams created after.

use std::fmt;
use std::str::FromStr;

use eddy_streams::Retention;
use globset::{GlobBuilder, GlobMatcher};

/// One rule: the policy of the streams created under a pattern.
#[derive(Clone)]
pub struct RetentionRule {
    pattern: String,
    matcher: GlobMatcher,
    policy: Retention,
}

impl RetentionRule {
    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The policy.
    pub fn policy(&self) -> Retention {
        self.policy
    }

    /// Whether the rule covers the stream at `path`.
    pub fn matches(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }
}

impl fmt::Debug for RetentionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for RetentionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.pattern, self.policy)
    }
}

impl FromStr for RetentionRule {
    type Err = String;

    fn from_str(rule: &str) -> Result<Self, String> {
        let (pattern, policy) = rule.split_once('=').ok_or_else(|| {
            format!("retention rule `{rule}` is not PATTERN=POLICY (e.g. `logs/**=age=7d`)")
        })?;
        let pattern = pattern.trim().trim_start_matches('/');
        if pattern.is_empty() {
            return Err(format!("retention rule `{rule}` has an empty pattern"));
        }
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("retention rule `{rule}`: invalid pattern: {}", e.kind()))?
            .compile_matcher();
        let policy = policy
            .parse()
            .map_err(|e| format!("retention rule `{rule}`: {e}"))?;
        Ok(RetentionRule {
            pattern: pattern.to_owned(),
            matcher,
            policy,
        })
    }
}

/// The policy the first of `rules` that covers `path` gives, if any.
pub(crate) fn policy_for(rules: &[RetentionRule], path: &str) -> Option<Retention> {
    rules
        .iter()
        .find(|rule| rule.matches(path))
        .map(RetentionRule::policy)
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
