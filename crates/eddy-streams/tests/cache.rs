//! SQLite serves recent data from its in-memory cache: whatever the cache
//! holds or has dropped, every read answers what memory answers.

use std::sync::Arc;

use eddy_streams::{
    Append, Clock, Fork, ManualClock, MemoryStorage, Offset, Payload, ReadChunk, ReadFrom,
    SqliteOptions, SqliteStorage, Storage, StreamConfig, StreamError, StreamPath,
};
use proptest::prelude::*;

/// One call in a generated history on a few paths.
#[derive(Clone, Debug)]
enum Call {
    Create {
        path: u8,
        json: bool,
    },
    Append {
        path: u8,
        size: usize,
        count: usize,
    },
    Read {
        path: u8,
        from: u64,
        /// Whose offset: the stream's own (0), the zero incarnation's
        /// (1), or one incarnation earlier's (2).
        incarnation: u8,
        max_bytes: usize,
    },
    Head {
        path: u8,
    },
    Delete {
        path: u8,
    },
    Fork {
        path: u8,
        source: u8,
    },
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let path = 0u8..3;
    let call = prop_oneof![
        (path.clone(), any::<bool>()).prop_map(|(path, json)| Call::Create { path, json }),
        (path.clone(), 1usize..300, 1usize..4).prop_map(|(path, size, count)| Call::Append {
            path,
            size,
            count
        }),
        (path.clone(), 0u64..12, 0u8..3, 1usize..2000).prop_map(
            |(path, from, incarnation, max_bytes)| Call::Read {
                path,
                from,
                incarnation,
                max_bytes
            }
        ),
        path.clone().prop_map(|path| Call::Head { path }),
        path.clone().prop_map(|path| Call::Delete { path }),
        (path.clone(), path).prop_map(|(path, source)| Call::Fork { path, source }),
    ];
    prop::collection::vec(call, 1..60)
}

fn path(n: u8) -> StreamPath {
    StreamPath::new(format!("cache/{n}")).expect("path")
}

/// What a call answered, comparable across backends.
#[derive(Debug, PartialEq)]
enum Answer {
    Done(String),
    Chunk(Box<ReadChunk>),
    Failed(&'static str),
}

async fn run(store: &dyn Storage, call: &Call) -> Answer {
    let failed = |e: StreamError| Answer::Failed(e.code());
    let done = |s: String| Answer::Done(s);
    match call {
        Call::Create { path: p, json } => {
            let config = if *json {
                StreamConfig::json()
            } else {
                StreamConfig::bytes("text/plain")
            };
            let created = store.create(&path(*p), config, Payload::empty()).await;
            created.map_or_else(failed, |c| done(format!("{c:?}")))
        }
        Call::Append {
            path: p,
            size,
            count,
        } => {
            let messages = (0..*count)
                .map(|i| bytes::Bytes::from(format!("\"{}\"", "x".repeat(size + i))))
                .collect();
            let appended = store.append(&path(*p), Append::messages(messages)).await;
            appended.map_or_else(failed, |a| done(format!("{a:?}")))
        }
        Call::Read {
            path: p,
            from,
            incarnation,
            max_bytes,
        } => {
            let current = store
                .head(&path(*p))
                .await
                .map_or(0, |h| h.tail.incarnation());
            let incarnation = match incarnation {
                0 => current,
                1 => 0,
                _ => current.saturating_sub(1),
            };
            let from = ReadFrom::Offset(Offset::new(incarnation, *from));
            let read = store.read(&path(*p), from, *max_bytes).await;
            read.map_or_else(failed, |chunk| Answer::Chunk(Box::new(chunk)))
        }
        Call::Head { path: p } => {
            let head = store.head(&path(*p)).await;
            head.map_or_else(failed, |h| done(format!("{h:?}")))
        }
        Call::Delete { path: p } => {
            let deleted = store.delete(&path(*p)).await;
            deleted.map_or_else(failed, |()| done("deleted".into()))
        }
        Call::Fork { path: p, source } => {
            let forked = store.fork(&path(*p), Fork::of(path(*source))).await;
            forked.map_or_else(failed, |c| done(format!("{c:?}")))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// SQLite with a cache of a few hundred bytes (most reads miss or hit
    /// a cut-off cache) or of the default size answers every call as
    /// memory does.
    #[test]
    fn sqlite_with_any_cache_answers_like_memory(history in calls(), cache_bytes in prop_oneof![Just(600usize), Just(eddy_streams::DEFAULT_CACHE_BYTES)]) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        // One clock stopped at one time: both stores hand out the same
        // incarnations to the same history.
        let now = ManualClock::starting_now().now_ms();
        let clock = || Arc::new(ManualClock::at(now));
        let options = SqliteOptions { cache_bytes, clock: clock(), ..SqliteOptions::default() };
        let sqlite = SqliteStorage::open_with(dir.path(), options).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let memory = MemoryStorage::new().with_clock(clock());
        runtime.block_on(async {
            for call in &history {
                let expected = run(&memory, call).await;
                let answered = run(&sqlite, call).await;
                prop_assert_eq!(answered, expected, "{:?}", call);
            }
            Ok(())
        })?;
    }
}
