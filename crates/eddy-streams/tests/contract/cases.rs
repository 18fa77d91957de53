//! The bodies of the `Storage` contract cases, shared by every harness that
//! runs them (this crate's backends, and the remote HTTP client in
//! `eddy-server`). Each case is an `async fn(Arc<dyn Storage>)` on a fresh
//! store; [`every_case!`] lists them all.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use eddy_streams::{
    Append, ErrorKind, Expiry, Fork, Limits, ManualClock, Offset, Payload, ProducerPosition,
    ReadFrom, Storage, StreamConfig, StreamError, StreamPath, Wait,
};

#[path = "incarnations.rs"]
mod incarnations;
pub use incarnations::*;

#[path = "documents.rs"]
mod documents;
pub use documents::*;

#[path = "retention.rs"]
mod retention;
pub use retention::*;

#[path = "compaction.rs"]
mod compaction;
pub use compaction::*;

#[path = "producer_expiry.rs"]
mod producer_expiry;
pub use producer_expiry::*;

/// Calls `$run!(case, case, ...)` with every contract case.
macro_rules! every_case {
    ($run:ident) => {
        $run!(
            create_is_idempotent_for_the_same_config,
            create_with_another_config_conflicts,
            create_with_initial_data_and_closed,
            append_returns_increasing_canonical_offsets,
            json_arrays_flatten_one_level,
            large_batches_keep_every_message_in_order,
            bad_json_and_empty_arrays_write_nothing,
            content_type_mismatch_writes_nothing,
            byte_streams_keep_each_append_whole,
            read_pages_by_size_and_reports_the_tail,
            read_sentinels_and_bad_offsets,
            unknown_and_deleted_streams_differ,
            recreate_after_delete_is_fresh,
            producer_next_duplicate_gap_and_fencing,
            producer_new_epoch_starts_at_zero,
            producer_state_is_per_stream_and_producer,
            producers_beyond_the_limit_are_refused_known_ones_append,
            released_producers_make_room_and_start_again,
            expected_tail_mismatch_writes_nothing,
            stream_seq_must_increase,
            close_alone_and_with_final_append,
            closing_producer_retry_succeeds,
            oversized_append_is_refused,
            wait_is_level_triggered,
            wait_wakes_on_append_and_times_out,
            committed_reports_every_commit,
            expires_at_in_the_past_reads_as_absent,
            list_filters_by_prefix,
            list_pages_follow_their_cursor,
            concurrent_appenders_lose_nothing,
            fork_inherits_the_prefix_and_branches,
            fork_sub_offsets_and_bad_offsets,
            fork_is_idempotent_and_checks_its_config,
            deleting_a_forked_source_soft_deletes_it,
            a_recreated_stream_refuses_the_old_streams_offsets,
            a_fork_takes_its_sources_offsets_up_to_the_branch,
            a_fork_at_a_replaced_streams_offset_is_refused,
            appends_of_more_messages_than_the_limit_are_refused,
            forks_that_may_copy_more_than_the_limit_are_refused,
            values_the_store_keeps_are_bounded,
            documents_are_written_by_compare_and_set,
            documents_are_scanned_by_prefix_in_pages,
            oversized_documents_and_keys_write_nothing,
            concurrent_document_puts_have_one_winner,
            documents_are_not_streams,
        );
    };
}
pub(crate) use every_case;

/// Calls `$run!(case, case, ...)` with every case that moves the store's
/// clock: each is an `async fn(Arc<dyn Storage>, Arc<ManualClock>)`.
macro_rules! every_clocked_case {
    ($run:ident) => {
        $run!(
            ttl_expired_stream_reads_as_absent,
            an_expired_fork_releases_its_source,
            a_source_whose_forks_expired_deletes_at_once,
            an_expired_source_with_live_forks_is_soft_deleted,
            a_fork_of_a_fork_outlives_its_expired_parent,
            recreate_waits_for_the_forks_of_an_expired_source,
            an_expired_stream_created_again_is_a_new_incarnation,
            producer_state_expires_after_the_window,
            a_full_stream_takes_a_new_producer_once_one_expired,
            a_restore_keeps_when_producers_last_wrote,
        );
    };
}
pub(crate) use every_clocked_case;

/// The cases of the sweep of expired streams and old tombstones, for the
/// stores that sweep their own records (memory, SQLite, PostgreSQL,
/// DynamoDB): a remote store is swept by its server.
macro_rules! every_sweeping_case {
    ($run:ident) => {
        $run!(expired_streams_and_old_tombstones_are_swept_in_steps);
    };
}
pub(crate) use every_sweeping_case;

/// The sweep of expired producer states, for the stores that sweep their
/// own records (memory, SQLite, PostgreSQL, DynamoDB).
macro_rules! every_producer_sweeping_case {
    ($run:ident) => {
        $run!(the_sweep_drops_expired_producers_in_steps);
    };
}
pub(crate) use every_producer_sweeping_case;

/// Retention policies and the sweep's drops, for the stores that sweep
/// their own records (memory, SQLite, PostgreSQL, DynamoDB): a remote
/// store is swept by its server.
macro_rules! every_retention_case {
    ($run:ident) => {
        $run!(
            retention_keeps_the_last_messages_and_offsets_never_change,
            retention_by_bytes_keeps_the_newest_within_the_bound,
            retention_by_age_drops_what_is_older,
            a_sweep_step_drops_at_most_a_mebibyte,
            idempotent_producers_deduplicate_across_a_drop,
            a_fork_keeps_what_it_inherited_when_its_source_drops,
            a_retention_policy_is_part_of_the_config,
            appends_racing_the_sweep_leave_a_consistent_stream,
        );
    };
}
pub(crate) use every_retention_case;

/// Compaction, for the stores that compact (memory, SQLite, PostgreSQL,
/// DynamoDB).
macro_rules! every_compaction_case {
    ($run:ident) => {
        $run!(
            the_sweep_keeps_the_last_hour_whole_and_the_latest_of_every_row,
            deletes_go_after_their_lifetime,
            reads_say_where_a_delete_was_dropped,
            appends_during_a_pass_are_kept,
            a_fork_of_a_compacted_stream_inherits_what_is_kept,
            retention_after_compaction_weighs_the_kept_messages,
        );
    };
}
pub(crate) use every_compaction_case;

/// The producers per stream every harness's store allows
/// (`max_producers_per_stream`): as many as the concurrent appenders case
/// uses, so that case also shows a stream may fill its limit.
pub const MAX_PRODUCERS: usize = 8;

/// What one write may do in every harness's store: more messages per
/// append than the large batches case sends, and a small fork copy.
pub const LIMITS: Limits = Limits {
    max_append_messages: 300,
    max_fork_bytes: 4096,
};

pub fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("valid path")
}

pub async fn read_all(store: &dyn Storage, p: &StreamPath) -> Vec<String> {
    let chunk = store
        .read(p, ReadFrom::Beginning, usize::MAX)
        .await
        .expect("read");
    chunk
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
}

pub async fn json_stream(store: &dyn Storage, name: &str) -> StreamPath {
    let p = path(name);
    store
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    p
}

pub async fn create_is_idempotent_for_the_same_config(store: Arc<dyn Storage>) {
    let p = path("a/b");
    let first = store
        .create(&p, StreamConfig::json(), Payload::empty())
        .await
        .expect("create");
    assert!(first.created);
    store.append(&p, Append::body("1")).await.expect("append");
    let again = store
        .create(
            &p,
            StreamConfig::bytes("Application/JSON; charset=utf-8"),
            Payload::empty(),
        )
        .await
        .expect("same config");
    assert!(!again.created);
    assert_eq!(
        again.info.tail,
        first.info.tail.with_position(1),
        "a repeated create keeps the data"
    );
}

pub async fn create_with_another_config_conflicts(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "conflict").await;
    for other in [
        StreamConfig::bytes("text/plain"),
        StreamConfig::json().with_ttl(Duration::from_secs(60)),
        StreamConfig::json().closed(),
    ] {
        let err = store.create(&p, other, Payload::empty()).await.err();
        assert_eq!(err.map(|e| e.code()), Some("stream/config-conflict"));
    }
    let ttl = path("ttl");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(60));
    store
        .create(&ttl, config.clone(), Payload::empty())
        .await
        .expect("create");
    assert!(
        !store
            .create(&ttl, config, Payload::empty())
            .await
            .expect("same ttl")
            .created
    );
}

pub async fn create_with_initial_data_and_closed(store: Arc<dyn Storage>) {
    let p = path("initial");
    let created = store
        .create(
            &p,
            StreamConfig::json().closed(),
            Payload::Body(Bytes::from("[1,2,3]")),
        )
        .await
        .expect("create");
    assert_eq!(created.info.tail.position(), 3);
    assert!(created.info.closed);
    assert_eq!(read_all(&*store, &p).await, ["1", "2", "3"]);
    let err = store.append(&p, Append::body("4")).await.err();
    assert_eq!(
        err,
        Some(StreamError::Closed {
            path: "initial".into(),
            final_offset: created.info.tail
        })
    );
    let empty = path("empty-array");
    let created = store
        .create(
            &empty,
            StreamConfig::json(),
            Payload::Body(Bytes::from("[]")),
        )
        .await
        .expect("`[]` creates an empty stream");
    assert_eq!(created.info.tail.position(), 0);
}

pub async fn append_returns_increasing_canonical_offsets(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "offsets").await;
    let mut last = store.head(&p).await.expect("head").tail;
    assert!(last.incarnation() > 0, "a new stream has an incarnation");
    assert!(last.to_string().ends_with("_0000000000000000"), "{last}");
    for i in 0..20 {
        let next = store
            .append(&p, Append::body(format!("{i}")))
            .await
            .expect("append")
            .next_offset;
        assert!(next.to_string() > last.to_string(), "{next} after {last}");
        assert_eq!(next.to_string().len(), 33);
        last = next;
    }
}

pub async fn large_batches_keep_every_message_in_order(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "large-batch").await;
    for batch in [1usize, 31, 32, 33, 100, 257] {
        let before = store.head(&p).await.expect("head").tail.position();
        let items: Vec<String> = (0..batch)
            .map(|i| format!("{}", before + i as u64))
            .collect();
        let appended = store
            .append(&p, Append::body(format!("[{}]", items.join(","))))
            .await
            .expect("append");
        assert_eq!(appended.next_offset.position(), before + batch as u64);
    }
    let all = read_all(&*store, &p).await;
    let expected: Vec<String> = (0..all.len()).map(|i| i.to_string()).collect();
    assert_eq!(all.len(), 1 + 31 + 32 + 33 + 100 + 257);
    assert_eq!(all, expected, "each message sits at its own position");
}

pub async fn json_arrays_flatten_one_level(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "flatten").await;
    store
        .append(&p, Append::body("[[1,2],[3,4]]"))
        .await
        .expect("append");
    store
        .append(&p, Append::body(r#"{"a":[1]}"#))
        .await
        .expect("append");
    store
        .append(&p, Append::messages(vec![Bytes::from("[5,6]")]))
        .await
        .expect("pre-split messages stay whole");
    assert_eq!(
        read_all(&*store, &p).await,
        ["[1,2]", "[3,4]", r#"{"a":[1]}"#, "[5,6]"]
    );
}

pub async fn bad_json_and_empty_arrays_write_nothing(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "bad-json").await;
    for (body, code) in [
        ("{", "json/invalid"),
        ("[]", "json/empty-array"),
        ("", "append/empty"),
    ] {
        let err = store.append(&p, Append::body(body)).await.err();
        assert_eq!(err.map(|e| e.code()), Some(code), "{body:?}");
    }
    let err = store
        .append(
            &p,
            Append::messages(vec![Bytes::from("1"), Bytes::from("nope")]),
        )
        .await
        .err();
    assert_eq!(err.map(|e| e.code()), Some("json/invalid"));
    assert_eq!(store.head(&p).await.expect("head").tail.position(), 0);
}

pub async fn content_type_mismatch_writes_nothing(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "ct").await;
    let err = store
        .append(&p, Append::body("1").with_content_type("text/plain"))
        .await
        .err();
    assert_eq!(err.map(|e| e.code()), Some("append/content-type-mismatch"));
    store
        .append(
            &p,
            Append::body("1").with_content_type("application/json; charset=utf-8"),
        )
        .await
        .expect("parameters are ignored");
    assert_eq!(store.head(&p).await.expect("head").tail.position(), 1);
}

pub async fn byte_streams_keep_each_append_whole(store: Arc<dyn Storage>) {
    let p = path("bytes");
    store
        .create(&p, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("create");
    store
        .append(&p, Append::body("[1,2]"))
        .await
        .expect("append");
    store
        .append(&p, Append::body("hello\nworld"))
        .await
        .expect("append");
    assert_eq!(read_all(&*store, &p).await, ["[1,2]", "hello\nworld"]);
}

pub async fn read_pages_by_size_and_reports_the_tail(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "paging").await;
    let items: Vec<String> = (0..10).map(|i| format!("\"{i:08}\"")).collect();
    store
        .append(&p, Append::body(format!("[{}]", items.join(","))))
        .await
        .expect("append");
    let mut from = ReadFrom::Beginning;
    let mut seen = Vec::new();
    loop {
        let chunk = store.read(&p, from, 25).await.expect("read");
        assert!(!chunk.messages.is_empty());
        assert!(
            chunk.messages.len() <= 2,
            "25 bytes hold two 10-byte messages"
        );
        seen.extend(
            chunk
                .messages
                .iter()
                .map(|m| String::from_utf8_lossy(m).into_owned()),
        );
        if chunk.up_to_date {
            assert_eq!(chunk.next_offset.position(), 10);
            break;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
    assert_eq!(seen, items);
    let one = store.read(&p, ReadFrom::Beginning, 1).await.expect("read");
    assert_eq!(
        one.messages.len(),
        1,
        "a read returns one message even over the limit"
    );
    assert!(!one.up_to_date);
}

pub async fn read_sentinels_and_bad_offsets(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "sentinels").await;
    store
        .append(&p, Append::body("[1,2]"))
        .await
        .expect("append");
    let tail = store
        .read(&p, ReadFrom::Tail, 1024)
        .await
        .expect("read now");
    assert!(tail.messages.is_empty() && tail.up_to_date);
    assert_eq!(tail.next_offset.position(), 2);
    let mid = store
        .read(
            &p,
            ReadFrom::Offset(tail.next_offset.with_position(1)),
            1024,
        )
        .await
        .expect("read");
    assert_eq!(mid.messages, vec![Bytes::from("2")]);
    let beyond = store
        .read(
            &p,
            ReadFrom::Offset(tail.next_offset.with_position(3)),
            1024,
        )
        .await
        .err();
    assert_eq!(beyond.map(|e| e.code()), Some("offset/beyond-tail"));
    assert_eq!(
        "12_34".parse::<ReadFrom>().err().map(|e| e.code()),
        Some("offset/invalid")
    );
}

pub async fn unknown_and_deleted_streams_differ(store: Arc<dyn Storage>) {
    let never = path("never");
    assert_eq!(
        store.head(&never).await.err(),
        Some(StreamError::NotFound {
            path: "never".into()
        })
    );
    let err = store.append(&never, Append::body("1")).await.err();
    assert_eq!(err.map(|e| e.code()), Some("stream/not-found"));
    let p = json_stream(&*store, "doomed").await;
    store.delete(&p).await.expect("delete");
    assert_eq!(
        store.head(&p).await.err(),
        Some(StreamError::Gone {
            path: "doomed".into()
        })
    );
    let read = store.read(&p, ReadFrom::Beginning, 10).await.err();
    assert_eq!(read.map(|e| e.code()), Some("stream/gone"));
    let append = store.append(&p, Append::body("1")).await.err();
    assert_eq!(append.map(|e| e.code()), Some("stream/gone"));
    assert_eq!(
        store.delete(&never).await.err().map(|e| e.code()),
        Some("stream/not-found")
    );
}

pub async fn recreate_after_delete_is_fresh(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "phoenix").await;
    let producer = ProducerPosition::new("w", 3, 0);
    store
        .append(&p, Append::body("[1,2]").with_producer(producer))
        .await
        .expect("append");
    store.delete(&p).await.expect("delete");
    let created = store
        .create(&p, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("recreate with another config");
    assert!(created.created);
    assert_eq!(created.info.tail.position(), 0);
    let again = store
        .append(
            &p,
            Append::body("x").with_producer(ProducerPosition::new("w", 0, 0)),
        )
        .await
        .expect("producer state is gone with the old stream");
    assert!(!again.duplicate);
    assert_eq!(read_all(&*store, &p).await, ["x"]);
}

pub async fn producer_next_duplicate_gap_and_fencing(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "producer").await;
    let at = |epoch, seq| {
        Append::body(format!("{seq}")).with_producer(ProducerPosition::new("w", epoch, seq))
    };
    let err = store.append(&p, at(0, 1)).await.err();
    assert_eq!(
        err,
        Some(StreamError::ProducerSeqGap {
            producer: "w".into(),
            expected: 0,
            received: 1
        })
    );
    for seq in 0..3 {
        let ok = store.append(&p, at(0, seq)).await.expect("append");
        assert_eq!((ok.duplicate, ok.producer), (false, Some((0, seq))));
    }
    let dup = store.append(&p, at(0, 1)).await.expect("duplicate");
    assert!(dup.duplicate);
    assert_eq!(
        dup.producer,
        Some((0, 2)),
        "a duplicate reports the highest accepted seq"
    );
    assert_eq!(dup.next_offset.position(), 3);
    let gap = store.append(&p, at(0, 5)).await.err();
    assert_eq!(
        gap,
        Some(StreamError::ProducerSeqGap {
            producer: "w".into(),
            expected: 3,
            received: 5
        })
    );
    store.append(&p, at(1, 0)).await.expect("new epoch");
    let fenced = store.append(&p, at(0, 3)).await.err();
    assert_eq!(
        fenced,
        Some(StreamError::ProducerFenced {
            producer: "w".into(),
            current: 1,
            received: 0
        })
    );
    assert_eq!(read_all(&*store, &p).await, ["0", "1", "2", "0"]);
}

pub async fn producer_new_epoch_starts_at_zero(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "epoch").await;
    let at = |epoch, seq| Append::body("1").with_producer(ProducerPosition::new("w", epoch, seq));
    store.append(&p, at(0, 0)).await.expect("append");
    let err = store.append(&p, at(2, 1)).await.err();
    assert_eq!(err.map(|e| e.code()), Some("producer/epoch-start"));
    assert_eq!(store.head(&p).await.expect("head").tail.position(), 1);
    let first = store
        .append(&p, at(7, 0))
        .await
        .expect("a new producer may start at any epoch");
    assert_eq!(first.producer, Some((7, 0)));
}

pub async fn producer_state_is_per_stream_and_producer(store: Arc<dyn Storage>) {
    let a = json_stream(&*store, "ps/a").await;
    let b = json_stream(&*store, "ps/b").await;
    let at = |id: &str, seq| Append::body("1").with_producer(ProducerPosition::new(id, 0, seq));
    store.append(&a, at("w", 0)).await.expect("append");
    assert!(
        !store
            .append(&b, at("w", 0))
            .await
            .expect("other stream")
            .duplicate
    );
    assert!(
        !store
            .append(&a, at("v", 0))
            .await
            .expect("other producer")
            .duplicate
    );
    assert!(store.append(&a, at("w", 0)).await.expect("dup").duplicate);
}

/// Regression: producer states were unlimited; a client could make a
/// stream keep ever more of them by sending new producer ids.
pub async fn producers_beyond_the_limit_are_refused_known_ones_append(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "limited").await;
    let at = |id: &str, seq| Append::body("1").with_producer(ProducerPosition::new(id, 0, seq));
    for n in 0..MAX_PRODUCERS {
        store
            .append(&p, at(&format!("w{n}"), 0))
            .await
            .expect("room for a new producer");
    }
    let refused = store
        .append(&p, at("late", 0))
        .await
        .expect_err("over the limit");
    assert_eq!(
        refused,
        StreamError::TooManyProducers {
            path: "limited".into(),
            producer: "late".into(),
            limit: MAX_PRODUCERS,
        }
    );
    assert_eq!(
        (refused.kind(), refused.is_retryable()),
        (ErrorKind::LimitReached, false)
    );
    assert_eq!(
        read_all(&*store, &p).await.len(),
        MAX_PRODUCERS,
        "nothing written"
    );

    let known = store
        .append(&p, at("w0", 1))
        .await
        .expect("a known producer appends");
    assert_eq!((known.duplicate, known.producer), (false, Some((0, 1))));
    let again = store.append(&p, at("w0", 1)).await.expect("its retry");
    assert!(again.duplicate);
    store
        .append(&p, Append::body("2"))
        .await
        .expect("appends without a producer");

    let other = json_stream(&*store, "limited/other").await;
    store
        .append(&other, at("late", 0))
        .await
        .expect("the limit is per stream");
    store.delete(&p).await.expect("delete");
    let p = json_stream(&*store, "limited").await;
    store
        .append(&p, at("late", 0))
        .await
        .expect("a recreated stream starts without producers");
}

/// A released producer's state is dropped: it no longer counts against
/// the limit, and its next append starts it again at sequence 0. A store
/// that cannot release (a remote one) refuses and changes nothing.
pub async fn released_producers_make_room_and_start_again(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "released").await;
    let at = |id: &str, seq| Append::body("1").with_producer(ProducerPosition::new(id, 0, seq));
    for n in 0..MAX_PRODUCERS {
        store
            .append(&p, at(&format!("w{n}"), 0))
            .await
            .expect("room for a new producer");
    }
    let released = match store.release_producer(&p, "w0").await {
        Err(StreamError::InvalidArgument(_)) => {
            let refused = store.append(&p, at("late", 0)).await;
            assert!(matches!(refused, Err(StreamError::TooManyProducers { .. })));
            return;
        }
        released => released.expect("release"),
    };
    assert!(released);
    store.append(&p, at("late", 0)).await.expect("room again");
    let gap = store.append(&p, at("w0", 1)).await.expect_err("w0 is new");
    assert!(
        matches!(gap, StreamError::ProducerSeqGap { expected: 0, .. }),
        "{gap:?}"
    );
    assert!(!store.release_producer(&p, "never").await.expect("unknown"));
    let missing = StreamPath::new("released/missing").expect("path");
    let absent = store.release_producer(&missing, "w1").await;
    assert!(
        matches!(absent, Err(StreamError::NotFound { .. })),
        "{absent:?}"
    );
    assert_eq!(read_all(&*store, &p).await.len(), MAX_PRODUCERS + 1);
}

pub async fn expected_tail_mismatch_writes_nothing(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "cas").await;
    store
        .append(&p, Append::body("1").expecting_tail(Offset::ZERO))
        .await
        .expect("first");
    let err = store
        .append(&p, Append::body("2").expecting_tail(Offset::ZERO))
        .await
        .err();
    let tail = store.head(&p).await.expect("head").tail;
    assert_eq!(tail.position(), 1);
    assert_eq!(
        err,
        Some(StreamError::OffsetMismatch {
            expected: Offset::ZERO,
            actual: tail
        })
    );
    assert_eq!(read_all(&*store, &p).await, ["1"]);
}

pub async fn stream_seq_must_increase(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "stream-seq").await;
    store
        .append(&p, Append::body("1").with_stream_seq("09"))
        .await
        .expect("09");
    store
        .append(&p, Append::body("1").with_stream_seq("10"))
        .await
        .expect("10 > 09");
    store
        .append(&p, Append::body("1").with_stream_seq("2"))
        .await
        .expect("\"2\" > \"10\" bytewise");
    for bad in ["10", "09", "0"] {
        let err = store
            .append(&p, Append::body("1").with_stream_seq(bad))
            .await
            .err();
        assert_eq!(
            err.map(|e| e.code()),
            Some("append/stream-seq-conflict"),
            "{bad}"
        );
    }
    assert_eq!(store.head(&p).await.expect("head").tail.position(), 3);
}

pub async fn close_alone_and_with_final_append(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "close-alone").await;
    store.append(&p, Append::body("1")).await.expect("append");
    let closed = store.append(&p, Append::close_only()).await.expect("close");
    assert!(closed.closed);
    assert_eq!(closed.next_offset.position(), 1);
    assert!(
        store
            .append(&p, Append::close_only())
            .await
            .expect("close again")
            .closed
    );
    let err = store.append(&p, Append::body("2")).await.err();
    assert_eq!(
        err,
        Some(StreamError::Closed {
            path: "close-alone".into(),
            final_offset: closed.next_offset
        })
    );
    let chunk = store
        .read(&p, ReadFrom::Beginning, 1024)
        .await
        .expect("read");
    assert!(chunk.closed && chunk.up_to_date);

    let q = json_stream(&*store, "close-final").await;
    store
        .append(&q, Append::body("[1,2]"))
        .await
        .expect("append");
    let last = store
        .append(&q, Append::body("3").closing())
        .await
        .expect("append and close");
    assert_eq!((last.next_offset.position(), last.closed), (3, true));
    let partial = store.read(&q, ReadFrom::Beginning, 1).await.expect("read");
    assert!(
        !partial.closed,
        "only a read that reaches the tail reports the close"
    );
    assert!(store.head(&q).await.expect("head").closed);
}

pub async fn closing_producer_retry_succeeds(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "close-producer").await;
    let closing = || {
        Append::body("1")
            .with_producer(ProducerPosition::new("w", 0, 0))
            .closing()
    };
    let first = store.append(&p, closing()).await.expect("close");
    assert!(!first.duplicate && first.closed);
    let retry = store.append(&p, closing()).await.expect("retry");
    assert!(retry.duplicate && retry.closed);
    assert_eq!(retry.next_offset.position(), 1);
    let other = Append::body("1")
        .with_producer(ProducerPosition::new("w", 0, 1))
        .closing();
    assert_eq!(
        store.append(&p, other).await.err().map(|e| e.code()),
        Some("stream/closed")
    );
    assert_eq!(read_all(&*store, &p).await, ["1"]);
}

pub async fn oversized_append_is_refused(store: Arc<dyn Storage>) {
    let p = path("big");
    store
        .create(
            &p,
            StreamConfig::bytes("application/octet-stream"),
            Payload::empty(),
        )
        .await
        .expect("create");
    let big = Bytes::from(vec![b'x'; eddy_streams::DEFAULT_MAX_APPEND_BYTES + 1]);
    let err = store.append(&p, Append::body(big)).await.err();
    assert_eq!(err.map(|e| e.code()), Some("append/too-large"));
    assert_eq!(store.head(&p).await.expect("head").bytes, 0);
}

pub async fn appends_of_more_messages_than_the_limit_are_refused(store: Arc<dyn Storage>) {
    let limit = LIMITS.max_append_messages;
    let array = |n: usize| format!("[{}]", vec!["1"; n].join(","));
    let p = json_stream(&*store, "many").await;
    store
        .append(&p, Append::body(array(limit)))
        .await
        .expect("an append at the limit");
    let refused = Some(StreamError::TooManyMessages { limit });
    let over = store.append(&p, Append::body(array(limit + 1))).await;
    assert_eq!(over.err(), refused);
    let split = (0..=limit).map(|_| Bytes::from_static(b"1")).collect();
    let over = store
        .append(&p, Append::new(Payload::Messages(split)))
        .await;
    assert_eq!(over.err(), refused);
    assert_eq!(
        store.head(&p).await.expect("head").tail.position(),
        limit as u64
    );
    // A create's initial data is bounded the same.
    let created = store
        .create(
            &path("many-2"),
            StreamConfig::json(),
            Payload::Body(array(limit + 1).into()),
        )
        .await;
    assert_eq!(created.err(), refused);
    let absent = store.head(&path("many-2")).await.err();
    assert_eq!(absent.map(|e| e.code()), Some("stream/not-found"));
}

pub async fn forks_that_may_copy_more_than_the_limit_are_refused(store: Arc<dyn Storage>) {
    let limit = LIMITS.max_fork_bytes;
    let src = path("big/src");
    store
        .create(&src, StreamConfig::bytes("text/plain"), Payload::empty())
        .await
        .expect("create");
    // Eight messages that cost exactly the limit to copy.
    let size = limit / 8 - eddy_streams::FORK_MESSAGE_COST;
    for _ in 0..8 {
        let message = vec![b'x'; usize::try_from(size).expect("size")];
        store
            .append(&src, Append::body(message))
            .await
            .expect("append");
    }
    let at_limit = store.fork(&path("big/fork-1"), Fork::of(src.clone())).await;
    assert_eq!(
        at_limit.expect("a fork at the limit").info.bytes,
        limit - 8 * eddy_streams::FORK_MESSAGE_COST
    );
    store.append(&src, Append::body("y")).await.expect("append");
    let over = store.fork(&path("big/fork-2"), Fork::of(src.clone())).await;
    let bytes = limit + 1 + eddy_streams::FORK_MESSAGE_COST;
    assert_eq!(
        over.err(),
        Some(StreamError::ForkTooLarge {
            source_path: src.to_string(),
            bytes,
            limit,
        })
    );
    let absent = store.head(&path("big/fork-2")).await.err();
    assert_eq!(absent.map(|e| e.code()), Some("stream/not-found"));
    // A fork at the beginning copies nothing.
    let empty = Fork::of(src.clone()).at(Offset::ZERO);
    let created = store.fork(&path("big/fork-3"), empty).await;
    assert_eq!(created.expect("a fork of nothing").info.bytes, 0);
}

pub async fn wait_is_level_triggered(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "level").await;
    store.append(&p, Append::body("1")).await.expect("append");
    let waited = store
        .wait(&p, Offset::ZERO, Duration::from_secs(5))
        .await
        .expect("wait");
    assert!(matches!(waited, Wait::Changed(info) if info.tail.position() == 1));
}

pub async fn wait_wakes_on_append_and_times_out(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "live").await;
    let timed_out = store
        .wait(&p, Offset::ZERO, Duration::from_millis(50))
        .await
        .expect("wait");
    assert!(matches!(timed_out, Wait::TimedOut(_)));
    let writer = Arc::clone(&store);
    let target = p.clone();
    let append = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.append(&target, Append::body("1")).await
    });
    let waited = store
        .wait(&p, Offset::ZERO, Duration::from_secs(10))
        .await
        .expect("wait");
    assert!(matches!(waited, Wait::Changed(info) if info.tail.position() == 1));
    append.await.expect("join").expect("append");
    let closer = Arc::clone(&store);
    let target = p.clone();
    tokio::spawn(async move { closer.append(&target, Append::close_only()).await });
    let tail = store.head(&p).await.expect("head").tail;
    let closed = store
        .wait(&p, tail, Duration::from_secs(10))
        .await
        .expect("wait");
    assert!(matches!(closed, Wait::Changed(info) if info.closed));
}

pub async fn committed_reports_every_commit(store: Arc<dyn Storage>) {
    let mut feed = store.committed();
    let p = json_stream(&*store, "feed").await;
    store
        .append(&p, Append::body("[1,2]"))
        .await
        .expect("append");
    store.append(&p, Append::close_only()).await.expect("close");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = tokio::time::timeout(Duration::from_secs(5), feed.recv())
            .await
            .expect("in time")
            .expect("event");
        seen.push((event.path, event.tail, event.closed));
    }
    let tail = store.head(&p).await.expect("head").tail;
    assert_eq!(
        seen,
        [
            ("feed".to_owned(), tail.with_position(0), false),
            ("feed".to_owned(), tail.with_position(2), false),
            ("feed".to_owned(), tail.with_position(2), true),
        ]
    );
}

pub async fn ttl_expired_stream_reads_as_absent(store: Arc<dyn Storage>, clock: Arc<ManualClock>) {
    let p = path("short-lived");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(1));
    store
        .create(&p, config.clone(), Payload::Body(Bytes::from("1")))
        .await
        .expect("create");
    clock.advance(Duration::from_millis(600));
    store
        .read(&p, ReadFrom::Beginning, 10)
        .await
        .expect("a read slides the ttl");
    clock.advance(Duration::from_millis(600));
    store
        .head(&p)
        .await
        .expect("still alive: the read refreshed it");
    clock.advance(Duration::from_millis(1100));
    assert_eq!(
        store.head(&p).await.err().map(|e| e.code()),
        Some("stream/not-found")
    );
    let fresh = store
        .create(&p, config, Payload::empty())
        .await
        .expect("create again");
    assert!(fresh.created && fresh.info.tail.position() == 0);
}

pub async fn expires_at_in_the_past_reads_as_absent(store: Arc<dyn Storage>) {
    let p = path("expired");
    let past = SystemTime::now() - Duration::from_secs(1);
    store
        .create(
            &p,
            StreamConfig::json().with_expires_at(past),
            Payload::empty(),
        )
        .await
        .expect("create");
    assert_eq!(
        store
            .read(&p, ReadFrom::Beginning, 10)
            .await
            .err()
            .map(|e| e.code()),
        Some("stream/not-found")
    );
}

pub async fn list_filters_by_prefix(store: Arc<dyn Storage>) {
    for name in ["l/b", "l/a", "other"] {
        json_stream(&*store, name).await;
    }
    store.delete(&path("l/b")).await.expect("delete");
    json_stream(&*store, "l/c").await;
    let listed: Vec<String> = store
        .list("l/")
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.path)
        .collect();
    assert_eq!(listed, ["l/a", "l/c"]);
}

/// A listing read page by page (`list_page`) is the whole listing, in
/// order, each page at most its limit, whatever the store's own pages.
pub async fn list_pages_follow_their_cursor(store: Arc<dyn Storage>) {
    for name in ["p/e", "p/a", "p/d", "p/b", "p/c", "q/a", "o/z"] {
        json_stream(&*store, name).await;
    }
    store.delete(&path("p/d")).await.expect("delete");
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let page = store
            .list_page("p/", after.as_deref(), 2)
            .await
            .expect("page");
        assert!(page.streams.len() <= 2, "{page:?}");
        listed.extend(page.streams.into_iter().map(|i| i.path));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(listed, ["p/a", "p/b", "p/c", "p/e"]);
    // The paths alone, page by page, follow the same cursor.
    let mut paths = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let page = store
            .list_paths_page("p/", after.as_deref(), 2)
            .await
            .expect("paths page");
        assert!(page.paths.len() <= 2, "{page:?}");
        paths.extend(page.paths);
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(paths, listed);
    // A cursor before the prefix starts at it; one past it ends.
    let first = store.list_page("p/", Some("a"), 1).await.expect("page");
    assert_eq!(first.streams.len(), 1);
    assert_eq!(first.streams[0].path, "p/a");
    let none = store.list_page("p/", Some("z"), 5).await.expect("page");
    assert_eq!((none.streams.len(), none.next), (0, None));
    let first = store.list_paths_page("p/", Some("a"), 1).await;
    assert_eq!(first.expect("paths page").paths, ["p/a"]);
    let none = store.list_paths_page("p/", Some("z"), 5).await;
    assert_eq!(none.expect("paths page"), eddy_streams::PathPage::default());
    assert_eq!(store.count("q/").await.expect("count"), 1);
}

pub async fn concurrent_appenders_lose_nothing(store: Arc<dyn Storage>) {
    let p = json_stream(&*store, "many").await;
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let store = Arc::clone(&store);
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for seq in 0..25u64 {
                let append = Append::body(format!("\"{writer}-{seq}\""))
                    .with_producer(ProducerPosition::new(format!("w{writer}"), 0, seq));
                store.append(&p, append).await.expect("append");
            }
        }));
    }
    for task in tasks {
        task.await.expect("join");
    }
    let all = read_all(&*store, &p).await;
    assert_eq!(all.len(), 200);
    for writer in 0..8 {
        let mine: Vec<&String> = all
            .iter()
            .filter(|m| m.starts_with(&format!("\"{writer}-")))
            .collect();
        let expected: Vec<String> = (0..25).map(|s| format!("\"{writer}-{s}\"")).collect();
        assert_eq!(
            mine,
            expected.iter().collect::<Vec<_>>(),
            "each writer's order is kept"
        );
    }
}

pub async fn fork_inherits_the_prefix_and_branches(store: Arc<dyn Storage>) {
    let src = json_stream(&*store, "fork/src").await;
    store
        .append(&src, Append::body("[1,2,3]"))
        .await
        .expect("append");
    let src_tail = store.head(&src).await.expect("head").tail;
    let at = Fork::of(src.clone()).at(src_tail.with_position(2));
    let fork = path("fork/at-2");
    let created = store.fork(&fork, at).await.expect("fork");
    assert!(created.created);
    assert_eq!(created.info.tail.position(), 2);
    assert!(
        created.info.config.is_json(),
        "the content type is inherited"
    );
    assert_eq!(read_all(&*store, &fork).await, ["1", "2"]);
    store
        .append(&fork, Append::body("\"f\""))
        .await
        .expect("append to fork");
    store
        .append(&src, Append::body("4"))
        .await
        .expect("append to source");
    assert_eq!(read_all(&*store, &fork).await, ["1", "2", "\"f\""]);
    assert_eq!(read_all(&*store, &src).await, ["1", "2", "3", "4"]);
    let mid = store
        .read(
            &fork,
            ReadFrom::Offset(created.info.tail.with_position(1)),
            1 << 20,
        )
        .await
        .expect("read");
    assert_eq!(mid.messages, vec![Bytes::from("2"), Bytes::from("\"f\"")]);

    let head = path("fork/at-tail");
    let created = store
        .fork(&head, Fork::of(src.clone()))
        .await
        .expect("fork at tail");
    assert_eq!(created.info.tail.position(), 4);

    store
        .append(&src, Append::close_only())
        .await
        .expect("close source");
    let open = store
        .fork(&path("fork/of-closed"), Fork::of(src.clone()))
        .await
        .expect("fork");
    assert!(!open.info.closed, "a fork of a closed stream starts open");

    let producer = ProducerPosition::new("w", 0, 0);
    let fresh = store
        .append(&fork, Append::body("1").with_producer(producer))
        .await
        .expect("producer state is not inherited");
    assert!(!fresh.duplicate);
    let missing = store
        .fork(&path("fork/none"), Fork::of(path("fork/missing")))
        .await
        .err();
    assert_eq!(missing.map(|e| e.code()), Some("stream/not-found"));
}

pub async fn fork_sub_offsets_and_bad_offsets(store: Arc<dyn Storage>) {
    let text = path("sub/text");
    store
        .create(
            &text,
            StreamConfig::bytes("text/plain"),
            Payload::Body(Bytes::from("abcdef")),
        )
        .await
        .expect("create");
    let l1 = path("sub/l1");
    store
        .fork(&l1, Fork::of(text.clone()).at(Offset::ZERO).sub_offset(4))
        .await
        .expect("fork");
    assert_eq!(read_all(&*store, &l1).await, ["abcd"]);
    let l2 = path("sub/l2");
    store
        .fork(&l2, Fork::of(l1.clone()).at(Offset::ZERO).sub_offset(2))
        .await
        .expect("fork");
    store.append(&l2, Append::body("Z")).await.expect("append");
    assert_eq!(read_all(&*store, &l2).await, ["ab", "Z"]);
    let over = store
        .fork(
            &path("sub/over"),
            Fork::of(text.clone()).at(Offset::ZERO).sub_offset(7),
        )
        .await;
    assert_eq!(over.err().map(|e| e.code()), Some("invalid-argument"));
    // At the tail there is no message to keep part of (the DynamoDB
    // backend answered a storage failure).
    let at_tail = store
        .fork(&path("sub/at-tail"), Fork::of(text.clone()).sub_offset(1))
        .await;
    assert_eq!(at_tail.err().map(|e| e.code()), Some("invalid-argument"));

    let json = json_stream(&*store, "sub/json").await;
    store
        .append(&json, Append::body("[1,2,3,4]"))
        .await
        .expect("append");
    let j = path("sub/j");
    store
        .fork(&j, Fork::of(json.clone()).at(Offset::ZERO).sub_offset(2))
        .await
        .expect("fork");
    assert_eq!(read_all(&*store, &j).await, ["1", "2"]);
    let over = store
        .fork(
            &path("sub/j-over"),
            Fork::of(json.clone()).at(Offset::ZERO).sub_offset(5),
        )
        .await;
    assert_eq!(over.err().map(|e| e.code()), Some("invalid-argument"));

    let json_tail = store.head(&json).await.expect("head").tail;
    let beyond = Fork::of(json.clone()).at(json_tail.with_position(99));
    let err = store.fork(&path("sub/beyond"), beyond).await.err();
    assert_eq!(err.map(|e| e.code()), Some("offset/beyond-tail"));
    let ct = Fork::of(json.clone()).with_content_type("text/plain");
    let err = store.fork(&path("sub/ct"), ct).await.err();
    assert_eq!(err.map(|e| e.code()), Some("append/content-type-mismatch"));
    assert!(
        store.head(&path("sub/ct")).await.is_err(),
        "a refused fork writes nothing"
    );
    store.delete(&j).await.expect("delete the one fork");
    store
        .delete(&json)
        .await
        .expect("the refused forks hold no reference to the source");
    assert_eq!(
        store.head(&json).await.err().map(|e| e.code()),
        Some("stream/gone")
    );
}

pub async fn fork_is_idempotent_and_checks_its_config(store: Arc<dyn Storage>) {
    let src = path("idem/src");
    let config = StreamConfig::bytes("text/plain").with_ttl(Duration::from_secs(3600));
    store
        .create(&src, config, Payload::Body(Bytes::from("hello")))
        .await
        .expect("create");
    let fork = path("idem/fork");
    let request = Fork::of(src.clone()).at(Offset::ZERO).sub_offset(2);
    let first = store.fork(&fork, request.clone()).await.expect("fork");
    assert!(first.created);
    assert_eq!(
        first.info.config.expiry,
        Expiry::Ttl(3600),
        "the expiry is inherited"
    );
    let again = store.fork(&fork, request).await.expect("same fork again");
    assert!(!again.created);
    let other = Fork::of(src.clone()).at(Offset::ZERO).sub_offset(3);
    let err = store.fork(&fork, other).await.err();
    assert_eq!(err.map(|e| e.code()), Some("stream/config-conflict"));
    let own_ttl = Fork::of(src.clone()).with_expiry(Expiry::Ttl(60));
    let created = store.fork(&path("idem/ttl"), own_ttl).await.expect("fork");
    assert_eq!(created.info.config.expiry, Expiry::Ttl(60));
    let plain = json_stream(&*store, "idem/plain").await;
    let err = store.fork(&plain, Fork::of(src.clone())).await.err();
    assert_eq!(err.map(|e| e.code()), Some("stream/config-conflict"));
}

pub async fn deleting_a_forked_source_soft_deletes_it(store: Arc<dyn Storage>) {
    let l0 = json_stream(&*store, "gc/l0").await;
    store
        .append(&l0, Append::body("[1,2]"))
        .await
        .expect("append");
    let l1 = path("gc/l1");
    let l2 = path("gc/l2");
    store.fork(&l1, Fork::of(l0.clone())).await.expect("fork");
    store.fork(&l2, Fork::of(l1.clone())).await.expect("fork");
    store.delete(&l0).await.expect("soft delete");
    let soft = |e: Option<StreamError>| e.map(|e| e.code());
    assert_eq!(
        soft(store.head(&l0).await.err()),
        Some("stream/soft-deleted")
    );
    assert_eq!(
        soft(store.read(&l0, ReadFrom::Beginning, 10).await.err()),
        Some("stream/soft-deleted")
    );
    assert_eq!(
        soft(store.append(&l0, Append::body("3")).await.err()),
        Some("stream/soft-deleted")
    );
    assert_eq!(
        soft(store.delete(&l0).await.err()),
        Some("stream/soft-deleted")
    );
    let recreate = store
        .create(&l0, StreamConfig::json(), Payload::empty())
        .await
        .err();
    assert_eq!(soft(recreate), Some("stream/soft-deleted"));
    let refork = store.fork(&path("gc/x"), Fork::of(l0.clone())).await.err();
    assert_eq!(soft(refork), Some("stream/soft-deleted"));
    assert!(store
        .list("gc/")
        .await
        .expect("list")
        .iter()
        .all(|i| i.path != "gc/l0"));
    assert_eq!(read_all(&*store, &l2).await, ["1", "2"], "forks still read");

    store.delete(&l1).await.expect("soft delete the middle");
    assert_eq!(
        soft(store.head(&l1).await.err()),
        Some("stream/soft-deleted")
    );
    store.delete(&l2).await.expect("delete the last fork");
    for p in [&l0, &l1, &l2] {
        assert_eq!(
            soft(store.head(p).await.err()),
            Some("stream/gone"),
            "{p} is collected"
        );
    }
    assert!(
        store
            .create(&l0, StreamConfig::json(), Payload::empty())
            .await
            .expect("free")
            .created
    );

    let kept = json_stream(&*store, "gc/kept").await;
    store
        .fork(&path("gc/kept-fork"), Fork::of(kept.clone()))
        .await
        .expect("fork");
    store
        .delete(&path("gc/kept-fork"))
        .await
        .expect("delete fork");
    store
        .head(&kept)
        .await
        .expect("a source whose forks are deleted stays alive");
    store.delete(&kept).await.expect("and deletes at once");
    assert_eq!(soft(store.head(&kept).await.err()), Some("stream/gone"));
}

/// A fork with a TTL of its own, for the expiry cases.
fn short_lived_fork(source: &StreamPath) -> Fork {
    Fork::of(source.clone()).with_expiry(Expiry::Ttl(1))
}

/// A fork that outlives the expiry cases (a TTL rather than none, so that
/// the request is the same over HTTP, where a fork without an expiry
/// header inherits its source's).
fn long_lived_fork(source: &StreamPath) -> Fork {
    Fork::of(source.clone()).with_expiry(Expiry::Ttl(3600))
}

/// Regression: the memory backend dropped an expired fork without
/// releasing its source, so deleting the source afterwards only
/// soft-deleted it, for ever.
pub async fn an_expired_fork_releases_its_source(store: Arc<dyn Storage>, clock: Arc<ManualClock>) {
    let source = json_stream(&*store, "release/src").await;
    let fork = path("release/fork");
    store
        .fork(&fork, short_lived_fork(&source))
        .await
        .expect("fork");
    clock.advance(Duration::from_secs(2));
    let err = store.append(&fork, Append::body("1")).await.err();
    assert_eq!(err.map(|e| e.code()), Some("stream/not-found"));
    store.delete(&source).await.expect("delete the source");
    assert_eq!(
        store.head(&source).await.err().map(|e| e.code()),
        Some("stream/gone"),
        "no fork is left, so the delete is final"
    );
}

/// Regression: a source whose only fork had expired unnoticed (no call had
/// touched the fork since) was soft-deleted instead of deleted.
pub async fn a_source_whose_forks_expired_deletes_at_once(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let source = json_stream(&*store, "lazy/src").await;
    store
        .fork(&path("lazy/fork"), short_lived_fork(&source))
        .await
        .expect("fork");
    clock.advance(Duration::from_secs(2));
    store.delete(&source).await.expect("delete the source");
    assert_eq!(
        store.head(&source).await.err().map(|e| e.code()),
        Some("stream/gone")
    );
    assert!(
        store
            .create(&source, StreamConfig::json(), Payload::empty())
            .await
            .expect("the path is free")
            .created
    );
}

/// Regression: an expired stream that live forks still read from was
/// dropped at once (memory) or when next written (SQLite), freeing its path
/// while the forks still referred to it.
pub async fn an_expired_source_with_live_forks_is_soft_deleted(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let source = path("exp/src");
    store
        .create(
            &source,
            StreamConfig::json().with_ttl(Duration::from_secs(1)),
            Payload::Body(Bytes::from("[1,2]")),
        )
        .await
        .expect("create");
    let fork = path("exp/fork");
    store
        .fork(&fork, long_lived_fork(&source))
        .await
        .expect("fork");
    clock.advance(Duration::from_secs(2));
    let code = |e: Option<StreamError>| e.map(|e| e.code());
    assert_eq!(
        code(store.head(&source).await.err()),
        Some("stream/soft-deleted")
    );
    assert_eq!(
        code(store.append(&source, Append::body("3")).await.err()),
        Some("stream/soft-deleted")
    );
    assert!(store
        .list("exp/")
        .await
        .expect("list")
        .iter()
        .all(|i| i.path != "exp/src"));
    assert_eq!(
        read_all(&*store, &fork).await,
        ["1", "2"],
        "the fork still reads"
    );
    store.delete(&fork).await.expect("delete the fork");
    assert_eq!(
        code(store.head(&source).await.err()),
        Some("stream/not-found"),
        "the expired source goes with its last fork, as expired, not deleted"
    );
}

/// Regression: in a chain source → middle → leaf, an expired middle
/// stream lost its place in the chain, so deleting the leaf did not
/// release the source.
pub async fn a_fork_of_a_fork_outlives_its_expired_parent(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let source = json_stream(&*store, "chain/src").await;
    store
        .append(&source, Append::body("[1,2]"))
        .await
        .expect("append");
    let middle = path("chain/middle");
    let leaf = path("chain/leaf");
    store
        .fork(&middle, short_lived_fork(&source))
        .await
        .expect("fork");
    store
        .fork(&leaf, long_lived_fork(&middle))
        .await
        .expect("fork of the fork");
    clock.advance(Duration::from_secs(2));
    let code = |e: Option<StreamError>| e.map(|e| e.code());
    assert_eq!(
        code(store.head(&middle).await.err()),
        Some("stream/soft-deleted")
    );
    let refork = store
        .fork(&path("chain/other"), Fork::of(middle.clone()))
        .await;
    assert_eq!(code(refork.err()), Some("stream/soft-deleted"));
    store
        .append(&leaf, Append::body("3"))
        .await
        .expect("the leaf lives on");
    assert_eq!(read_all(&*store, &leaf).await, ["1", "2", "3"]);
    store.delete(&source).await.expect("soft delete the source");
    assert_eq!(
        code(store.head(&source).await.err()),
        Some("stream/soft-deleted")
    );
    store.delete(&leaf).await.expect("delete the leaf");
    assert_eq!(
        code(store.head(&middle).await.err()),
        Some("stream/not-found")
    );
    assert_eq!(
        code(store.head(&source).await.err()),
        Some("stream/gone"),
        "the chain is collected up to the deleted source"
    );
}

/// Regression: SQLite dropped an expired source that live forks still
/// referred to, so the path could be created again, and deleting an old
/// fork later released the new stream's fork count.
pub async fn recreate_waits_for_the_forks_of_an_expired_source(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let source = path("again/src");
    let config = StreamConfig::json().with_ttl(Duration::from_secs(1));
    store
        .create(&source, config.clone(), Payload::empty())
        .await
        .expect("create");
    let old_fork = path("again/old");
    store
        .fork(&old_fork, long_lived_fork(&source))
        .await
        .expect("fork");
    clock.advance(Duration::from_secs(2));
    let code = |e: Option<StreamError>| e.map(|e| e.code());
    let refused = store
        .create(&source, StreamConfig::json(), Payload::empty())
        .await;
    assert_eq!(
        code(refused.err()),
        Some("stream/soft-deleted"),
        "live forks still use the path"
    );
    store.delete(&old_fork).await.expect("delete the old fork");
    let fresh = store
        .create(&source, StreamConfig::json(), Payload::empty())
        .await
        .expect("the path is free now");
    assert!(fresh.created && fresh.info.tail.position() == 0);
    let new_fork = path("again/new");
    store
        .fork(&new_fork, Fork::of(source.clone()))
        .await
        .expect("fork");
    store.delete(&source).await.expect("soft delete");
    assert_eq!(
        code(store.head(&source).await.err()),
        Some("stream/soft-deleted")
    );
    store.delete(&new_fork).await.expect("delete the new fork");
    assert_eq!(code(store.head(&source).await.err()), Some("stream/gone"));
}

pub async fn expired_streams_and_old_tombstones_are_swept_in_steps(
    store: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
) {
    let short = StreamConfig::bytes("text/plain").with_ttl(Duration::from_secs(1));
    for name in ["sweep/a", "sweep/b", "sweep/c"] {
        store
            .create(&path(name), short.clone(), Payload::Body("data".into()))
            .await
            .expect("create");
    }
    let gone = path("sweep/gone");
    let kept = path("sweep/kept");
    for p in [&gone, &kept] {
        store
            .create(
                p,
                StreamConfig::bytes("text/plain"),
                Payload::Body("x".into()),
            )
            .await
            .expect("create");
    }
    let old_tail = store.head(&gone).await.expect("head").tail;
    store.delete(&gone).await.expect("delete");
    let code = |r: Result<eddy_streams::StreamInfo, StreamError>| r.err().map(|e| e.code());
    // Expired or deleted, nothing goes before its stream is older than
    // the grace.
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.sweep(10).await, Ok(0));
    assert_eq!(code(store.head(&gone).await), Some("stream/gone"));
    clock.advance(eddy_streams::SWEEP_GRACE);
    // One stream and one tombstone per step of one, then the rest.
    assert_eq!(store.sweep(1).await, Ok(2));
    assert_eq!(store.sweep(10).await, Ok(2));
    assert_eq!(store.sweep(10).await, Ok(0));
    assert_eq!(code(store.head(&gone).await), Some("stream/not-found"));
    assert_eq!(
        code(store.head(&path("sweep/a")).await),
        Some("stream/not-found")
    );
    assert!(store.head(&kept).await.is_ok(), "a live stream stays");
    // A stream created again at a path whose tombstone went still
    // refuses the old stream's offsets.
    store
        .create(
            &gone,
            StreamConfig::bytes("text/plain"),
            Payload::Body("new".into()),
        )
        .await
        .expect("create again");
    let stale = store.read(&gone, ReadFrom::Offset(old_tail), 1 << 20).await;
    assert_eq!(stale.err().map(|e| e.code()), Some("offset/stale"));
}

/// Regression (issue 33): a content type, a `Stream-Seq` and a producer id
/// were kept whatever their length, in a record some backends rewrite on
/// every write (on DynamoDB an item that fails every write past 400 KB).
/// Each is refused past [`eddy_streams::MAX_STORED_VALUE_BYTES`], with
/// nothing written; one at the limit is kept.
pub async fn values_the_store_keeps_are_bounded(store: Arc<dyn Storage>) {
    let max = eddy_streams::MAX_STORED_VALUE_BYTES;
    let content_type =
        |len: usize| format!("text/plain; x={}", "a".repeat(len - "text/plain; x=".len()));
    let long = path("kept/long-type");
    let refused = store
        .create(
            &long,
            StreamConfig::bytes(content_type(max + 1)),
            Payload::empty(),
        )
        .await;
    assert_eq!(refused.err().map(|e| e.code()), Some("invalid-argument"));
    let absent = store.head(&long).await.err();
    assert_eq!(absent.map(|e| e.code()), Some("stream/not-found"));
    store
        .create(
            &long,
            StreamConfig::bytes(content_type(max)),
            Payload::empty(),
        )
        .await
        .expect("a content type at the limit");

    let p = json_stream(&*store, "kept/values").await;
    let seq = store
        .append(&p, Append::body("1").with_stream_seq("9".repeat(max + 1)))
        .await;
    assert_eq!(seq.err().map(|e| e.code()), Some("invalid-argument"));
    let producer = ProducerPosition::new("p".repeat(max + 1), 0, 0);
    let produced = store
        .append(&p, Append::body("1").with_producer(producer))
        .await;
    assert_eq!(produced.err().map(|e| e.code()), Some("invalid-argument"));
    assert_eq!(store.head(&p).await.expect("head").tail.position(), 0);
    store
        .append(
            &p,
            Append::body("1")
                .with_stream_seq("9".repeat(max))
                .with_producer(ProducerPosition::new("p".repeat(max), 0, 0)),
        )
        .await
        .expect("values at the limit");
}
