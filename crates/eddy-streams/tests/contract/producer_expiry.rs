//! Contract cases of producer expiry: a producer's state is kept for the
//! store's producer expiry (the default, seven days, in every harness)
//! after its last accepted write, then forgotten.

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{
    Append, Clock, ManualClock, ProducerPosition, Storage, StreamError, StreamPath,
    DEFAULT_PRODUCER_EXPIRY,
};

use super::{json_stream, read_all, MAX_PRODUCERS};

fn write(id: &str, epoch: u64, seq: u64) -> Append {
    Append::body("1").with_producer(ProducerPosition::new(id, epoch, seq))
}

/// Less than the window: a state this idle is kept.
const WITHIN: Duration = Duration::from_secs(DEFAULT_PRODUCER_EXPIRY.as_secs() - 60);

/// Retries are deduplicated within the window; after it the producer is
/// forgotten, and its old position is accepted as a new producer's.
pub async fn producer_state_expires_after_the_window(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let p = json_stream(&*store, "expiry/one").await;
    store.append(&p, write("w", 3, 0)).await.expect("first");
    clock.advance(WITHIN);
    let retry = store.append(&p, write("w", 3, 0)).await.expect("retry");
    assert!(retry.duplicate, "deduplicated within the window");
    let fenced = store.append(&p, write("w", 1, 0)).await;
    assert!(
        matches!(fenced, Err(StreamError::ProducerFenced { .. })),
        "{fenced:?}"
    );
    store.append(&p, write("w", 3, 1)).await.expect("next");
    // The window runs from the last accepted write, not the first.
    clock.advance(WITHIN);
    let retry = store.append(&p, write("w", 3, 1)).await.expect("retry");
    assert!(retry.duplicate, "still within the window of its last write");
    clock.advance(Duration::from_secs(120));
    let fresh = store
        .append(&p, write("w", 1, 0))
        .await
        .expect("an expired producer starts afresh, even at an old epoch");
    assert_eq!((fresh.duplicate, fresh.producer), (false, Some((1, 0))));
    assert_eq!(read_all(&*store, &p).await.len(), 3);
}

/// A stream at the producer cap accepts a new producer once one of its
/// producers expired (that one is dropped), and refuses while none has.
pub async fn a_full_stream_takes_a_new_producer_once_one_expired(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let p = json_stream(&*store, "expiry/full").await;
    for n in 0..MAX_PRODUCERS {
        store
            .append(&p, write(&format!("w{n}"), 0, 0))
            .await
            .expect("room");
    }
    let refused = store.append(&p, write("late", 0, 0)).await;
    assert!(
        matches!(refused, Err(StreamError::TooManyProducers { .. })),
        "{refused:?}"
    );
    clock.advance(Duration::from_secs(DEFAULT_PRODUCER_EXPIRY.as_secs() / 2));
    for n in 1..MAX_PRODUCERS {
        store
            .append(&p, write(&format!("w{n}"), 0, 1))
            .await
            .expect("known producers write");
    }
    let refused = store.append(&p, write("late", 0, 0)).await;
    assert!(
        matches!(refused, Err(StreamError::TooManyProducers { .. })),
        "none expired yet: {refused:?}"
    );
    clock.advance(Duration::from_secs(
        DEFAULT_PRODUCER_EXPIRY.as_secs() / 2 + 60,
    ));
    store
        .append(&p, write("late", 0, 0))
        .await
        .expect("w0 expired: room for a new producer");
    let refused = store.append(&p, write("later", 0, 0)).await;
    assert!(
        matches!(refused, Err(StreamError::TooManyProducers { .. })),
        "full again: {refused:?}"
    );
    let gap = store.append(&p, write("w0", 0, 1)).await;
    assert!(
        matches!(gap, Err(StreamError::ProducerSeqGap { expected: 0, .. })),
        "w0 was forgotten: {gap:?}"
    );
    let retry = store.append(&p, write("w1", 0, 1)).await.expect("retry");
    assert!(retry.duplicate, "the others are kept");
}

/// A restore keeps when each producer last wrote: a restored producer
/// expires when the original would have. A store that cannot take
/// snapshots (a remote one) is left alone.
pub async fn a_restore_keeps_when_producers_last_wrote(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let p = json_stream(&*store, "expiry/original").await;
    store.append(&p, write("w", 0, 0)).await.expect("write");
    let snapshot = match store.snapshot(&p).await {
        Err(StreamError::InvalidArgument(_)) => return,
        snapshot => snapshot.expect("snapshot"),
    };
    assert_eq!(
        snapshot
            .producers
            .iter()
            .map(|p| p.last_ms)
            .collect::<Vec<_>>(),
        [Some(clock.now_ms())]
    );
    clock.advance(WITHIN);
    let copy = StreamPath::new("expiry/copy").expect("path");
    let messages = store
        .read(&p, eddy_streams::ReadFrom::Beginning, 1 << 20)
        .await
        .expect("read")
        .messages;
    let restored = eddy_streams::StreamSnapshot {
        path: copy.clone(),
        ..snapshot.clone()
    };
    store
        .restore(&restored, 0, messages)
        .await
        .expect("restore");
    assert_eq!(
        store.snapshot(&copy).await.expect("snapshot").producers,
        snapshot.producers
    );
    let retry = store.append(&copy, write("w", 0, 0)).await.expect("retry");
    assert!(retry.duplicate, "within the original's window");
    clock.advance(Duration::from_secs(120));
    let fresh = store.append(&copy, write("w", 0, 0)).await.expect("fresh");
    assert!(!fresh.duplicate, "expired when the original's would have");
}

/// The sweep drops expired producer states in steps, and keeps the
/// others.
pub async fn the_sweep_drops_expired_producers_in_steps(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let p = json_stream(&*store, "expiry/swept").await;
    for id in ["a", "b", "c", "kept"] {
        store.append(&p, write(id, 0, 0)).await.expect("write");
    }
    assert_eq!(store.sweep(10).await, Ok(0), "nothing expired yet");
    clock.advance(WITHIN);
    store.append(&p, write("kept", 0, 1)).await.expect("write");
    clock.advance(Duration::from_secs(120));
    assert_eq!(store.sweep(2).await, Ok(2));
    assert_eq!(store.sweep(10).await, Ok(1));
    assert_eq!(store.sweep(10).await, Ok(0));
    let snapshot = store.snapshot(&p).await.expect("snapshot");
    let kept: Vec<_> = snapshot
        .producers
        .iter()
        .map(|p| p.position.id.as_str())
        .collect();
    assert_eq!(kept, ["kept"]);
}
