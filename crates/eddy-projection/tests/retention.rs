//! Inputs whose streams keep only part of their history (issue 34 §3): a
//! binding whose unread messages a retention policy dropped fails with
//! `history-unavailable`, naming the earliest offset kept and how to go
//! on, until its input accepts dropped history; then it goes on from the
//! earliest message kept. A pinned range that was dropped is
//! `range-unreproducible`. A binding whose unread range a compaction pass
//! thinned is `history-unavailable` too, never a silently other result;
//! one within the compaction lag reads on.

use std::sync::Arc;

use bytes::Bytes;
use eddy_projection::{Declare, Host, Projection, RunOptions};
use eddy_streams::{
    Append, Compaction, Payload, Retention, Route, Storage, StreamConfig, StreamPath,
};

use crate::support::{order, orders};
use crate::terminal::{pin_a_failed_unit, replay_is_unreproducible_and_the_pin_stays};

/// Creates `orders` keeping its last `keep` messages, with orders
/// `range` (order `i` of amount `i`).
async fn seed_kept(store: &dyn Storage, keep: u64, range: std::ops::Range<usize>) {
    let retention: Retention = format!("messages={keep}").parse().expect("policy");
    let path = StreamPath::new("orders").expect("path");
    store
        .create(
            &path,
            StreamConfig::json().with_retention(retention),
            Payload::empty(),
        )
        .await
        .expect("create");
    append(store, range).await;
}

async fn append(store: &dyn Storage, range: std::ops::Range<usize>) {
    let items: Vec<_> = range.map(|i| order(i, i as f64)).collect();
    orders().append(store, &(), &items).await.expect("append");
}

/// Sweeps until the store drops nothing more.
async fn sweep(store: &dyn Storage) {
    while store.sweep(64).await.expect("sweep") > 0 {}
}

/// The sum of the orders' amounts; its input accepts dropped history
/// when `accept`.
fn sum(accept: bool) -> Projection<(), f64> {
    let declare = Declare::<()>::new("sum");
    let input = declare.input("orders", &orders());
    if accept {
        declare.accept_dropped_history(&input);
    }
    declare
        .fold(0.0)
        .on(input, |sum, entry, _| sum + entry.item.amount)
        .build()
        .expect("declare")
}

/// The earliest offset the stream keeps, as text.
async fn earliest(store: &dyn Storage) -> String {
    let path = StreamPath::new("orders").expect("path");
    store.head(&path).await.expect("head").earliest.to_string()
}

/// How many messages a binding of the state stream `rows` has handled.
fn counter() -> Projection<(), u64> {
    let declare = Declare::<()>::new("counter");
    let route = Route::new("rows").expect("route");
    let input = declare.input_bytes("rows", route);
    declare
        .fold(0_u64)
        .on(input, |count, _: eddy_projection::Entry<'_, Bytes>, _| {
            count + 1
        })
        .build()
        .expect("declare")
}

/// `n` upserts of one row of the state stream `rows`.
async fn upserts(store: &dyn Storage, n: u64) {
    let path = StreamPath::new("rows").expect("path");
    for value in 0..n {
        let change = format!(
            r#"{{"type":"row","key":"k","value":{value},"headers":{{"operation":"upsert"}}}}"#
        );
        store
            .append(&path, Append::body(change))
            .await
            .expect("append");
    }
}

mod cases {
    use super::*;

    pub async fn dropped_unread_messages_are_history_unavailable_until_accepted(
        store: Arc<dyn Storage>,
    ) {
        seed_kept(store.as_ref(), 3, 0..2).await;
        let host = Host::new(store.clone());
        let strict = sum(false).at(()).expect("bind");
        host.run(&strict, RunOptions::default()).await.expect("run");
        assert_eq!(host.read(&strict).await.expect("read"), 1.0);
        // 2..=4 are dropped before the binding reads them; 5..=7 are kept.
        append(store.as_ref(), 2..8).await;
        sweep(store.as_ref()).await;
        let failed = host
            .run(&strict, RunOptions::default())
            .await
            .expect_err("dropped history");
        assert_eq!(failed.code(), "history-unavailable");
        let message = failed.to_string();
        let kept = earliest(store.as_ref()).await;
        assert!(
            message.contains(&format!("the earliest kept is {kept}"))
                && message.contains("accept_dropped_history"),
            "{message}"
        );
        // Nothing moved: the state is still the first two orders'.
        assert_eq!(host.read(&strict).await.expect("read"), 1.0);

        let accepting = sum(true).at(()).expect("bind");
        let run = host
            .run(&accepting, RunOptions::default())
            .await
            .expect("goes on");
        assert_eq!(run.items, 3);
        assert_eq!(
            host.read(&accepting).await.expect("read"),
            1.0 + 5.0 + 6.0 + 7.0
        );
    }

    pub async fn a_new_binding_on_a_stream_with_a_dropped_prefix_is_history_unavailable(
        store: Arc<dyn Storage>,
    ) {
        seed_kept(store.as_ref(), 2, 0..5).await;
        sweep(store.as_ref()).await;
        let host = Host::new(store.clone());
        let failed = host
            .run(&sum(false).at(()).expect("bind"), RunOptions::default())
            .await
            .expect_err("the first messages are gone");
        assert_eq!(failed.code(), "history-unavailable");
        let accepting = sum(true).at(()).expect("bind");
        host.run(&accepting, RunOptions::default())
            .await
            .expect("starts at the earliest kept");
        assert_eq!(host.read(&accepting).await.expect("read"), 3.0 + 4.0);
    }

    pub async fn a_pinned_range_dropped_by_retention_is_unreproducible(store: Arc<dyn Storage>) {
        seed_kept(store.as_ref(), 2, 0..2).await;
        let (host, bound) = pin_a_failed_unit(&store).await;
        append(store.as_ref(), 2..6).await;
        sweep(store.as_ref()).await;
        replay_is_unreproducible_and_the_pin_stays(&host, &bound).await;
    }

    pub async fn a_compacted_unread_range_is_history_unavailable(store: Arc<dyn Storage>) {
        let path = StreamPath::new("rows").expect("path");
        let policy: Compaction = "messages=2".parse().expect("policy");
        store
            .create(
                &path,
                StreamConfig::json().with_compaction(policy),
                Payload::empty(),
            )
            .await
            .expect("create");
        upserts(store.as_ref(), 3).await;
        let host = Host::new(store.clone());
        let early = counter().at(()).expect("bind");
        host.run(&early, RunOptions::default()).await.expect("run");
        upserts(store.as_ref(), 5).await;
        // The head (the last two) stays whole; the six before it that the
        // binding has not read go but their latest row.
        assert!(store.compact(&path).await.expect("compact") > 0);
        let failed = host
            .run(&early, RunOptions::default())
            .await
            .expect_err("a thinned range");
        assert_eq!(failed.code(), "history-unavailable");
        assert!(failed.to_string().contains("compaction"), "{failed}");
        assert_eq!(host.read(&early).await.expect("read"), 3, "nothing moved");
    }
}

crate::on_backends!(
    dropped_unread_messages_are_history_unavailable_until_accepted,
    a_new_binding_on_a_stream_with_a_dropped_prefix_is_history_unavailable,
    a_pinned_range_dropped_by_retention_is_unreproducible,
    a_compacted_unread_range_is_history_unavailable,
);
