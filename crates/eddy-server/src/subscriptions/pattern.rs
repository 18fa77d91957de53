//! Stream path patterns of subscriptions: `*` matches within one path
//! segment, `**` matches any number of segments.

/// Whether `path` matches `pattern`.
///
/// ```text
/// events/*      matches events/a, not events/a/b
/// events/**     matches events/a and events/a/b
/// orders/eu-*   matches orders/eu-1
/// ```
pub(super) fn matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    segments(&pattern, &path)
}

fn segments(pattern: &[&str], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(&"**"), _) => {
            segments(&pattern[1..], path) || (!path.is_empty() && segments(pattern, &path[1..]))
        }
        (Some(p), Some(s)) => {
            segment(p.as_bytes(), s.as_bytes()) && segments(&pattern[1..], &path[1..])
        }
        _ => false,
    }
}

fn segment(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|i| segment(&pattern[1..], &text[i..])),
        Some(c) => text.first() == Some(c) && segment(&pattern[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs() {
        assert!(matches("events/*", "events/a"));
        assert!(!matches("events/*", "events/a/b"));
        assert!(matches("events/**", "events/a/b"));
        assert!(matches("orders/eu-*", "orders/eu-1"));
        assert!(!matches("orders/eu-*", "orders/us-1"));
        assert!(matches("exact", "exact"));
    }
}
