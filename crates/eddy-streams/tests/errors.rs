//! Error codes, kinds and the serde form every error travels in.

mod samples;

use eddy_streams::{ErrorKind, StreamError};
pub use samples::{every_code, one_of_each};

/// The serde form carries the stable code as its tag and rebuilds the
/// same error.
#[test]
fn the_serde_form_is_tagged_by_the_code_and_round_trips() {
    for err in one_of_each() {
        let form = serde_json::to_value(&err).expect("serialize");
        assert_eq!(form["code"], err.code(), "{err:?}");
        let back: StreamError = serde_json::from_value(form).expect("deserialize");
        assert_eq!(back, err);
    }
}

/// There is a sample of every code the error type has, so the tests that
/// walk the samples (here and in `eddy-server`'s remote client) walk every
/// code: a new variant fails here until it gets one.
#[test]
fn the_samples_cover_every_code() {
    let mut sampled: Vec<&str> = one_of_each().iter().map(StreamError::code).collect();
    sampled.sort_unstable();
    let mut codes = every_code().to_vec();
    codes.sort_unstable();
    assert_eq!(sampled, codes);
}

/// Only an unavailable backend is worth retrying; codes are unique.
#[test]
fn kinds_decide_retries_and_codes_are_unique() {
    let errors = one_of_each();
    for err in &errors {
        assert_eq!(
            err.is_retryable(),
            err.kind() == ErrorKind::Unavailable,
            "{err:?}"
        );
    }
    let codes: std::collections::HashSet<&str> = errors.iter().map(|e| e.code()).collect();
    assert_eq!(codes.len(), errors.len());
}

/// A backend failure keeps its cause as the source and does not repeat it
/// in its message.
#[test]
fn backend_failures_keep_their_cause() {
    let cause = std::io::Error::other("disk on fire");
    let err = StreamError::unavailable_from("cannot write", cause);
    assert_eq!(err.to_string(), "cannot write");
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert_eq!(source.as_deref(), Some("disk on fire"));
    let form = serde_json::to_value(&err).expect("serialize");
    assert_eq!(form["details"]["message"], "cannot write");
}
