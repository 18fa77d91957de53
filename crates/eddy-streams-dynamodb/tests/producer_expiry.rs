//! Producer expiry on DynamoDB: what an append by a new producer at the
//! stream's cap costs (DESIGN.md, "Making room at the producer cap").

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::backend::RecordOptions;
use eddy_streams::{
    Append, ManualClock, Payload, ProducerPosition, Storage, StreamConfig, StreamError, StreamPath,
    DEFAULT_PRODUCER_EXPIRY,
};

use crate::common;

const CAP: usize = 1_200;

fn by(id: &str) -> Append {
    Append::body("1").with_producer(ProducerPosition::new(id, 0, 0))
}

/// At the cap with none expired, a new producer reads at most 1 000
/// producer items (4 queries) and is refused; once they expired, it reads
/// one page, deletes 16 in its own transaction, and the next 15 new
/// producers need no read of the others.
#[test]
fn a_new_producer_at_the_cap_reads_at_most_four_pages() {
    common::runtime().block_on(async {
        let table = common::embedded();
        let clock = Arc::new(ManualClock::starting_now());
        let options = RecordOptions {
            clock: clock.clone(),
            max_producers_per_stream: CAP,
            ..eddy_streams_dynamodb::options()
        };
        let store = eddy_streams_dynamodb::open(Arc::clone(&table), options).expect("open");
        let p = StreamPath::new("capped").expect("path");
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        for n in 0..CAP {
            store
                .append(&p, by(&format!("row-{n:05}")))
                .await
                .expect("room");
        }

        let before = table.request_stats();
        let refused = store.append(&p, by("late")).await;
        assert!(
            matches!(refused, Err(StreamError::TooManyProducers { .. })),
            "{refused:?}"
        );
        let cost = table.request_stats() - before;
        // The path item, the producer's item, four pages of 250.
        assert_eq!((cost.reads, cost.transactions), (6, 0), "{cost:?}");
        assert!(cost.items_read <= 1_002, "{cost:?}");

        clock.advance(DEFAULT_PRODUCER_EXPIRY + Duration::from_secs(1));
        let before = table.request_stats();
        store.append(&p, by("late")).await.expect("room made");
        let cost = table.request_stats() - before;
        assert_eq!((cost.reads, cost.transactions), (3, 1), "{cost:?}");
        for n in 0..15 {
            let before = table.request_stats();
            store
                .append(&p, by(&format!("later-{n}")))
                .await
                .expect("room left by the step");
            let cost = table.request_stats() - before;
            assert_eq!(cost.reads, 2, "no page read below the cap: {cost:?}");
        }
        let refused = store.append(&p, by("one-more")).await;
        assert!(refused.is_ok(), "another step: {refused:?}");
    });
}
