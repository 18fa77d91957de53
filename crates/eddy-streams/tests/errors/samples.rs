//! One error of every variant, shared by the tests that check codes,
//! kinds and the wire form (this crate's, and the remote client's in
//! `eddy-server`).

use eddy_streams::{Offset, StreamError};

/// One [`StreamError`] of each variant, with every field set.
pub fn one_of_each() -> Vec<StreamError> {
    let path = || "a/b".to_owned();
    vec![
        StreamError::NotFound { path: path() },
        StreamError::Gone { path: path() },
        StreamError::SoftDeleted { path: path() },
        StreamError::ConfigConflict {
            path: path(),
            detail: "content type".into(),
        },
        StreamError::Closed {
            path: path(),
            final_offset: Offset::new(1_764_000_000_000_000, 3),
        },
        StreamError::OffsetMismatch {
            expected: Offset::new(1_764_000_000_000_000, 1),
            actual: Offset::new(1_764_000_000_000_000, 2),
        },
        StreamError::StreamSeqConflict {
            last: "10".into(),
            received: "09".into(),
        },
        StreamError::ContentTypeMismatch {
            expected: "application/json".into(),
            received: "text/plain".into(),
        },
        StreamError::InvalidOffset("12_34".into()),
        StreamError::OffsetBeyondTail {
            offset: Offset::new(1_764_000_000_000_000, 9),
            tail: Offset::new(1_764_000_000_000_000, 2),
        },
        StreamError::StaleOffset {
            path: path(),
            offset: Offset::new(1_763_000_000_000_000, 4),
            incarnation: 1_764_000_000_000_000,
        },
        StreamError::OffsetDropped {
            path: path(),
            offset: Offset::new(1_764_000_000_000_000, 2),
            earliest: Offset::new(1_764_000_000_000_000, 7),
        },
        StreamError::InvalidRetention("invalid retention policy `messages=0`".into()),
        StreamError::InvalidCompaction("invalid compaction policy `messages=0`".into()),
        StreamError::InvalidPath {
            path: "a//b".into(),
            reason: "it has an empty segment".into(),
        },
        StreamError::InvalidJson("EOF while parsing".into()),
        StreamError::EmptyJsonArray,
        StreamError::EmptyAppend,
        StreamError::TooLarge { size: 10, limit: 4 },
        StreamError::ProducerSeqGap {
            producer: "w".into(),
            expected: 3,
            received: 5,
        },
        StreamError::ProducerFenced {
            producer: "w".into(),
            current: 2,
            received: 1,
        },
        StreamError::ProducerEpochStart {
            producer: "w".into(),
            epoch: 2,
            seq: 1,
        },
        StreamError::TooManyProducers {
            path: path(),
            producer: "w".into(),
            limit: 8,
        },
        StreamError::TooManyStreams { limit: 2 },
        StreamError::TooManyMessages { limit: 10_000 },
        StreamError::ForkTooLarge {
            source_path: path(),
            bytes: 70_000_000,
            limit: 67_108_864,
        },
        StreamError::InvalidArgument("bad limit".into()),
        StreamError::Route {
            route: "facts/:id".into(),
            reason: "missing id".into(),
        },
        StreamError::InvalidItem {
            stream: "facts".into(),
            reason: "not a number".into(),
        },
        StreamError::InvalidState("no key".into()),
        StreamError::UndecodableState {
            path: path(),
            offset: Offset::new(1_764_000_000_000_000, 5),
            reason: "unknown operation `merge`".into(),
        },
        StreamError::Unauthorized("the token was refused".into()),
        StreamError::unavailable("the database is busy"),
        StreamError::internal("the database file is corrupt"),
    ]
}

/// Every code of [`StreamError`], read from the type itself rather than
/// listed: deserializing an unknown code makes serde name the variants it
/// expected, and this error type keeps that list instead of a message.
pub fn every_code() -> &'static [&'static str] {
    use serde::de::value::MapDeserializer;
    use serde::Deserialize;

    #[derive(Debug)]
    struct Expected(Option<&'static [&'static str]>);

    impl std::fmt::Display for Expected {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "expected one of {:?}", self.0)
        }
    }

    impl std::error::Error for Expected {}

    impl serde::de::Error for Expected {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Expected(None)
        }

        fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
            Expected(Some(expected))
        }
    }

    let form = MapDeserializer::<_, Expected>::new([("code", "no/such-code")].into_iter());
    match StreamError::deserialize(form) {
        Err(Expected(Some(codes))) => codes,
        other => panic!("serde did not name the codes: {other:?}"),
    }
}
