//! Property tests of the request parsers: arbitrary input never panics,
//! and bad input is a 400 with a message, never a 5xx.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_server::{app, parse, AppState, ServerConfig};
use eddy_streams::{MemoryStorage, Offset, ReadFrom};
use http_body_util::BodyExt;
use proptest::prelude::*;
use tower::ServiceExt;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn query_parser_is_total(query in ".{0,80}") {
        let _ = parse::read_query(Some(&query));
    }

    #[test]
    fn offsets_round_trip_and_junk_is_refused(lineage in 0u64..=9_999_999_999_999_999, position in 0u64..=9_999_999_999_999_999, junk in "[a-zA-Z,./ :-]{1,4}") {
        let text = format!("{lineage:016}_{position:016}");
        let parsed = parse::offset("x", &text).expect("canonical offsets parse");
        prop_assert_eq!(parsed.to_string(), text.clone());
        let query = format!("offset={text}");
        prop_assert_eq!(parse::read_query(Some(&query)).expect("query").offset, Some(ReadFrom::Offset(parsed)));
        let bad = format!("{text}{junk}");
        prop_assert!(parse::offset("x", &bad).is_err());
        let bad_query = format!("offset={bad}");
        prop_assert!(parse::read_query(Some(&bad_query)).is_err());
    }

    #[test]
    fn decimals_accept_exactly_plain_numbers(n in any::<u64>(), s in ".{0,24}") {
        prop_assert_eq!(parse::decimal("x", &n.to_string(), true).ok(), Some(n));
        if let Ok(v) = parse::decimal("x", &s, false) {
            prop_assert!(s.bytes().all(|b| b.is_ascii_digit()));
            prop_assert_eq!(s.parse::<u64>().ok(), Some(v));
        }
    }

    #[test]
    fn path_and_time_parsers_are_total(s in ".{0,64}") {
        let _ = parse::stream_path(&s);
        let _ = parse::fork_source(&s);
        let _ = parse::rfc3339(&s);
    }

    #[test]
    fn arbitrary_headers_and_bodies_get_a_clean_answer(
        epoch in "[ -~]{0,12}",
        seq in "[ -~]{0,12}",
        ttl in "[ -~]{0,12}",
        sub in "[ -~]{0,6}",
        fork_offset in "[ -~]{0,40}",
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let (_stop, stopping) = tokio::sync::watch::channel(false);
            let app = app(AppState::new(Arc::new(MemoryStorage::new()), ServerConfig::default(), stopping));
            let requests = vec![
                Request::put("/j").header("content-type", "application/json").header("stream-ttl", ttl.as_str()).body(Body::from(body.clone())),
                Request::put("/j").header("content-type", "application/json").body(Body::empty()),
                Request::post("/j")
                    .header("content-type", "application/json")
                    .header("producer-id", "p")
                    .header("producer-epoch", epoch.as_str())
                    .header("producer-seq", seq.as_str())
                    .body(Body::from(body.clone())),
                Request::put("/f")
                    .header("stream-forked-from", "/j")
                    .header("stream-fork-offset", fork_offset.as_str())
                    .header("stream-fork-sub-offset", sub.as_str())
                    .body(Body::empty()),
            ];
            for request in requests {
                let Ok(request) = request else { continue };
                let response = app.clone().oneshot(request).await.expect("infallible");
                let status = response.status();
                let bytes = response.into_body().collect().await.expect("body").to_bytes();
                prop_assert!(!status.is_server_error(), "{status}: {bytes:?}");
                if status == StatusCode::BAD_REQUEST {
                    prop_assert!(!bytes.is_empty(), "a 400 says why");
                }
            }
            Ok(())
        })?;
    }
}

#[test]
fn the_zero_offset_is_the_empty_tail() {
    assert_eq!(
        parse::offset("x", "0000000000000000_0000000000000000").ok(),
        Some(Offset::ZERO)
    );
    assert!(
        parse::offset("x", "-1").is_err(),
        "sentinels are for reads only"
    );
}
