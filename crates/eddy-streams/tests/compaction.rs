//! Property tests of compaction, on the stores of this crate (memory,
//! SQLite and, with `DATABASE_URL`, PostgreSQL; `eddy-streams-dynamodb`
//! runs the same body, `compaction/history.rs`, on DynamoDB): random
//! state changes
//! (insert, update, upsert, delete of a few rows in two collections),
//! resets, snapshot controls and messages that are not state messages,
//! appended to a compacted stream and to a plain one alike, with
//! compaction (a pass now, or the sweep) and the clock moving at random
//! points. Then:
//!
//! - the compacted stream's messages are some of the plain one's, at the
//!   same offsets, in the same order, and its byte count is theirs;
//! - read from `-1`, whole or a small page at a time, it materializes
//!   the plain stream's rows (and snapshot state);
//! - a reader that read the plain stream up to any offset and reads on
//!   from there in the compacted one ends with the same rows, unless it
//!   is before where the stream says it dropped a delete past its
//!   lifetime (none while no delete outlived it);
//! - a reader within the lag (messages, bytes, age) sees every message.

use std::sync::{Arc, OnceLock};

use eddy_streams::{ManualClock, MemoryStorage, SqliteOptions, SqliteStorage};
use proptest::prelude::*;

mod history;
use history::{check, next_case, policy, probes, steps, Backend};

/// The stores the cases run on, opened once on one runtime.
fn backends() -> &'static (tokio::runtime::Runtime, Vec<Backend>) {
    static BACKENDS: OnceLock<(tokio::runtime::Runtime, Vec<Backend>)> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let mut backends = Vec::new();
        let clock = Arc::new(ManualClock::starting_now());
        backends.push(Backend {
            name: "memory",
            store: Arc::new(MemoryStorage::new().with_clock(clock.clone())),
            clock,
        });
        let clock = Arc::new(ManualClock::starting_now());
        let dir = Box::leak(Box::new(tempfile::tempdir().expect("tempdir")));
        let options = SqliteOptions {
            clock: clock.clone(),
            ..SqliteOptions::default()
        };
        let sqlite = SqliteStorage::open_with(dir.path(), options).expect("open sqlite");
        backends.push(Backend {
            name: "sqlite",
            store: Arc::new(sqlite),
            clock,
        });
        #[cfg(feature = "postgres")]
        if let Some(schema) = crate::postgres::Schema::fresh("compaction_properties") {
            let clock = Arc::new(ManualClock::starting_now());
            let store = runtime.block_on(schema.open(clock.clone()));
            backends.push(Backend {
                name: "postgres",
                store: Arc::new(store),
                clock,
            });
        }
        (runtime, backends)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn compacted_streams_materialize_as_the_full_history(
        policy in policy(),
        steps in steps(),
        probes in probes(),
    ) {
        let case = next_case();
        let (runtime, backends) = backends();
        for backend in backends {
            runtime.block_on(check(backend, case, policy, &steps, &probes));
        }
    }
}
