//! Property tests for offsets and the idempotent producer rules.

use std::collections::{HashMap, HashSet};

use eddy_streams::{
    Append, MemoryStorage, Offset, Payload, ProducerPosition, ReadFrom, SqliteStorage, Storage,
    StreamConfig, StreamError, StreamPath,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn offset_strings_sort_like_positions(
        incarnation in 0u64..10_000_000_000_000_000,
        a in 0u64..10_000_000_000,
        b in 0u64..10_000_000_000,
    ) {
        let (x, y) = (Offset::new(incarnation, a), Offset::new(incarnation, b));
        prop_assert_eq!(x.to_string().cmp(&y.to_string()), a.cmp(&b));
        prop_assert_eq!(x.to_string().parse::<Offset>().ok(), Some(x));
    }

    #[test]
    fn malformed_offsets_never_parse_or_panic(s in "\\PC{0,40}") {
        let parsed = s.parse::<ReadFrom>();
        let canonical = s.len() == 33
            && s.as_bytes()[16] == b'_'
            && s.bytes().enumerate().all(|(i, b)| i == 16 || b.is_ascii_digit());
        prop_assert_eq!(parsed.is_ok(), canonical || s == "-1" || s == "now");
    }
}

/// One producer append in a generated history.
#[derive(Clone, Debug)]
struct Step {
    producer: u8,
    epoch: u64,
    seq: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0u8..2, 0u64..3, 0u64..5).prop_map(|(producer, epoch, seq)| Step {
            producer,
            epoch,
            seq,
        }),
        1..40,
    )
}

/// Applies a history and checks the producer guarantees: a message is
/// written at most once per (producer, epoch, seq); within an epoch the
/// written seqs of a producer run 0, 1, 2, … without gaps; epochs never go
/// back; a duplicate writes nothing; every refusal writes nothing.
async fn check_history(store: &dyn Storage, history: &[Step]) -> Result<(), TestCaseError> {
    let path = StreamPath::new("p").map_err(|e| TestCaseError::fail(e.to_string()))?;
    store
        .create(&path, StreamConfig::json(), Payload::empty())
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut written: Vec<(u8, u64, u64)> = Vec::new();
    for step in history {
        let before = store
            .head(&path)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .tail;
        let body = format!("[{},{},{}]", step.producer, step.epoch, step.seq);
        let append = Append::messages(vec![body.into()]).with_producer(ProducerPosition::new(
            format!("w{}", step.producer),
            step.epoch,
            step.seq,
        ));
        let outcome = store.append(&path, append).await;
        let after = store
            .head(&path)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .tail;
        match outcome {
            Ok(appended) if !appended.duplicate => {
                prop_assert_eq!(after.position(), before.position() + 1);
                written.push((step.producer, step.epoch, step.seq));
            }
            Ok(_) => prop_assert_eq!(after, before, "a duplicate wrote"),
            Err(
                StreamError::ProducerSeqGap { .. }
                | StreamError::ProducerFenced { .. }
                | StreamError::ProducerEpochStart { .. },
            ) => prop_assert_eq!(after, before, "a refused append wrote"),
            Err(other) => return Err(TestCaseError::fail(format!("unexpected error {other}"))),
        }
    }
    let unique: HashSet<_> = written.iter().collect();
    prop_assert_eq!(unique.len(), written.len(), "a position was written twice");
    let mut last: HashMap<u8, (u64, u64)> = HashMap::new();
    for &(producer, epoch, seq) in &written {
        match last.get(&producer) {
            None => prop_assert_eq!(seq, 0),
            Some(&(e, s)) if e == epoch => prop_assert_eq!(seq, s + 1),
            Some(&(e, _)) => {
                prop_assert!(epoch > e, "epoch went back");
                prop_assert_eq!(seq, 0);
            }
        }
        last.insert(producer, (epoch, seq));
    }
    let chunk = store
        .read(&path, ReadFrom::Beginning, usize::MAX)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let stored: Vec<(u8, u64, u64)> = chunk
        .messages
        .iter()
        .map(|m| serde_json::from_slice(m))
        .collect::<Result<_, _>>()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(stored, written);
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

proptest! {
    #[test]
    fn producer_rules_hold_in_memory(history in steps()) {
        runtime().block_on(check_history(&MemoryStorage::new(), &history))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn producer_rules_hold_in_sqlite(history in steps()) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let store = SqliteStorage::open(dir.path()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime().block_on(check_history(&store, &history))?;
    }
}
