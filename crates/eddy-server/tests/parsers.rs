//! Property tests of the request parsers through the router: arbitrary
//! headers and bodies never panic, and bad input is a 400 with a message,
//! never a 5xx. (Each parser's own property tests are beside it.)

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use eddy_server::{app, AppState, ServerConfig};
use eddy_streams::MemoryStorage;
use http_body_util::BodyExt;
use proptest::prelude::*;
use tower::ServiceExt;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

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
