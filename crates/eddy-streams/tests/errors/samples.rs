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
            final_offset: Offset::at(3),
        },
        StreamError::OffsetMismatch {
            expected: Offset::at(1),
            actual: Offset::at(2),
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
            offset: Offset::at(9),
            tail: Offset::at(2),
        },
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
        StreamError::Unauthorized("the token was refused".into()),
        StreamError::unavailable("the database is busy"),
        StreamError::internal("the database file is corrupt"),
    ]
}
