//! Round trips to the database per call, counted by a proxy between the
//! store and PostgreSQL (`proxy.rs`): an append costs at most one round
//! trip of its own (its group's statement, which commits), a catch-up
//! read one query, and live readers are woken by one notification per
//! commit per store, not by a query per reader.
//!
//! Each count is taken after a warm-up, so the driver has prepared the
//! statements on the connections involved.

use std::sync::Arc;
use std::time::Duration;

use eddy_streams::{
    Append, Payload, PgOptions, PgStorage, ProducerPosition, ReadFrom, Storage, StreamConfig,
    StreamPath, Wait,
};
use futures::stream::{FuturesUnordered, StreamExt};

use super::proxy::Proxy;
use super::{run, RowLock, Schema};

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("valid path")
}

/// A store on `schema` that reaches the database through `proxy`.
async fn open_through(proxy: &Proxy, options: PgOptions) -> PgStorage {
    PgStorage::open(PgOptions {
        url: proxy.url().to_owned(),
        ..options
    })
    .await
    .expect("open the PostgreSQL store")
}

/// The round trips `calls` makes, as counted by `proxy`, per call.
async fn per_call<F, Fut>(proxy: &Proxy, calls: u64, mut call: F) -> f64
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let before = proxy.round_trips();
    for n in 0..calls {
        call(n).await;
    }
    (proxy.round_trips() - before) as f64 / calls as f64
}

/// Regression (issue 27): an append was a transaction of its own with a
/// statement per record write (`BEGIN`, a locking load, the messages, the
/// record, the producer, the notification, `COMMIT`, and a ping at each
/// end of the pool checkout: 8 round trips or more), and a catch-up read
/// was a read-only transaction of four statements plus the pings, which
/// transferred every message each time, even of a stream it had read.
#[test]
fn an_append_costs_one_round_trip_and_a_catch_up_read_one_query() {
    let Some(schema) = Schema::fresh("round_trips") else {
        return;
    };
    run(async move {
        let proxy = Proxy::start(&schema.url).await;
        let store = open_through(&proxy, schema.options()).await;
        let one = path("trips/one");
        store
            .create(&one, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        let append = |n: u64| Append::body(format!("{n}"));
        for n in 0..3 {
            store.append(&one, append(n)).await.expect("warm up");
        }
        let plain = per_call(&proxy, 20, |n| {
            let store = &store;
            let one = &one;
            async move {
                store.append(one, append(n)).await.expect("append");
            }
        })
        .await;
        let producer = |seq: u64| append(seq).with_producer(ProducerPosition::new("p", 0, seq));
        store.append(&one, producer(0)).await.expect("warm up");
        let produced = per_call(&proxy, 20, |n| {
            let store = &store;
            let one = &one;
            async move {
                store.append(one, producer(n + 1)).await.expect("append");
            }
        })
        .await;

        // 200 messages of 1 KB, written by this store, and as many written
        // by another store (this one's memory does not hold them).
        let kb = path("trips/kb");
        let other = path("trips/other");
        let writer = schema.open(Arc::new(eddy_streams::SystemClock)).await;
        for (store, p) in [(&store, &kb), (&writer, &other)] {
            store
                .create(p, StreamConfig::bytes("text/plain"), Payload::empty())
                .await
                .expect("create");
            for _ in 0..200 {
                store
                    .append(p, Append::body(vec![b'x'; 1024]))
                    .await
                    .expect("append");
            }
        }
        let read = |p: StreamPath| {
            let store = &store;
            async move {
                let chunk = store
                    .read(&p, ReadFrom::Beginning, 1 << 20)
                    .await
                    .expect("read");
                assert_eq!(chunk.messages.len(), 200);
            }
        };
        let before = proxy.received();
        read(other.clone()).await;
        let first_read = proxy.received() - before;
        read(kb.clone()).await;
        let own = per_call(&proxy, 20, |_| read(kb.clone())).await;
        let before = proxy.received();
        let others = per_call(&proxy, 20, |_| read(other.clone())).await;
        let later_reads = (proxy.received() - before) / 20;
        eprintln!(
            "round trips: append {plain:.2}, producer append {produced:.2}, \
             catch-up read {own:.2} (written here), {others:.2} (written by another store)"
        );
        assert!(plain <= 1.0, "an append took {plain} round trips");
        assert!(
            produced <= 1.0,
            "a producer append took {produced} round trips"
        );
        assert!(own <= 1.0, "a read took {own} round trips");
        assert!(others <= 1.0, "a read took {others} round trips");
        // The messages came once; later reads take them from memory.
        eprintln!(
            "bytes received: {first_read} by the first read, {later_reads} by each later one"
        );
        assert!(first_read > 200 * 1024, "{first_read}");
        assert!(later_reads < 2 * 1024, "{later_reads}");
        store.close().await;
        writer.close().await;
        schema.drop().await;
    });
}

/// Regression (issue 27): concurrent appends each ran a transaction and a
/// `COMMIT` of their own. Appends that arrive while a group is being
/// written (here: blocked on a row lock another session holds) are
/// written together, by one statement that commits them all.
#[test]
fn concurrent_appends_to_one_stream_and_to_many_share_one_commit() {
    let Some(schema) = Schema::fresh("shared_commit") else {
        return;
    };
    run(async move {
        let proxy = Proxy::start(&schema.url).await;
        let store = open_through(&proxy, schema.options()).await;
        let one = path("shared/one");
        let many: Vec<StreamPath> = (0..32).map(|n| path(&format!("shared/{n}"))).collect();
        for p in std::iter::once(&one).chain(&many) {
            store
                .create(p, StreamConfig::json(), Payload::empty())
                .await
                .expect("create");
            store.append(p, Append::body("0")).await.expect("warm up");
        }
        // Another session holds every stream row: the next group waits.
        let mut rows = RowLock::hold(&schema).await;
        let before = proxy.round_trips();
        let first = store.append(&one, Append::body("1"));
        let mut first = std::pin::pin!(first);
        rows.until_waited_on(&mut first).await;
        // Every later append is queued (polled once) while the first waits.
        let mut later: FuturesUnordered<_> = many
            .iter()
            .chain(std::iter::repeat_n(&one, 31))
            .map(|p| store.append(p, Append::body("2")))
            .collect();
        assert!(futures::poll!(later.next()).is_pending());
        rows.release().await;
        first.await.expect("the first append");
        let mut appended = 1;
        while let Some(outcome) = later.next().await {
            outcome.expect("append");
            appended += 1;
        }
        let round_trips = proxy.round_trips() - before;
        eprintln!("{appended} concurrent appends took {round_trips} round trips");
        assert_eq!(appended, 64);
        assert!(
            round_trips <= 4,
            "{appended} concurrent appends took {round_trips} round trips"
        );
        let info = store.head(&one).await.expect("head");
        assert_eq!(info.tail.position(), 33, "one stream: 1 + 1 + 31 messages");
        drop(later);
        store.close().await;
        schema.drop().await;
    });
}

/// Regression (issue 27): a commit woke each waiting reader to look at its
/// stream again, with a query of its own, in every store (5 round trips
/// each), and each waiter re-read its stream every second besides. Now a
/// store answers its own readers from the commit, and another store's
/// readers from one query per notification. 5 000 readers wait in each of
/// two stores; a waiter's first look costs at most one query (its head;
/// looks that come together share one), and the wake-up one more per
/// store: the writer's append, and the other's read of the heads its
/// notification names.
#[test]
fn readers_in_two_stores_are_woken_by_one_notification_per_store() {
    let Some(schema) = Schema::fresh("many_readers") else {
        return;
    };
    const READERS: u64 = 5_000;
    run(async move {
        let options = PgOptions {
            recheck: Duration::from_secs(3600),
            max_connections: 4,
            ..schema.options()
        };
        let (proxy_a, proxy_b) = (
            Proxy::start(&schema.url).await,
            Proxy::start(&schema.url).await,
        );
        let a = Arc::new(open_through(&proxy_a, options.clone()).await);
        let b = Arc::new(open_through(&proxy_b, options).await);
        let p = path("readers/live");
        let empty = a
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create")
            .info
            .tail;
        // Two rounds, the second counted: the first prepares every
        // statement on every connection it opens.
        let mut spent = (0, 0);
        for round in 0..2u64 {
            let (before_a, before_b) = (proxy_a.round_trips(), proxy_b.round_trips());
            let waiters: FuturesUnordered<_> = [&a, &b]
                .into_iter()
                .flat_map(|store| std::iter::repeat_n(store, READERS as usize))
                .map(|store| {
                    let store = Arc::clone(store);
                    let p = p.clone();
                    let after = empty.with_position(round);
                    tokio::spawn(
                        async move { store.wait(&p, after, Duration::from_secs(60)).await },
                    )
                })
                .collect();
            a.append(&p, Append::body("1")).await.expect("append");
            let woken: Vec<_> = waiters.collect().await;
            for waited in woken {
                let waited = waited.expect("join").expect("wait");
                assert!(
                    matches!(&waited, Wait::Changed(info) if info.tail.position() == round + 1),
                    "{waited:?}"
                );
            }
            spent = (
                proxy_a.round_trips() - before_a,
                proxy_b.round_trips() - before_b,
            );
        }
        let (spent_a, spent_b) = spent;
        eprintln!(
            "{READERS} readers per store: the writing store took {spent_a} round trips, \
             the other {spent_b}"
        );
        // At most a look per reader, and the append or the notified heads (and the
        // one round trip that prepares that statement, should it land on a
        // connection that has not run it yet).
        let bound = READERS + 2;
        assert!(spent_a <= bound, "the writing store took {spent_a}");
        assert!(spent_b <= bound, "the other store took {spent_b}");
        a.close().await;
        b.close().await;
        schema.drop().await;
    });
}

/// Regression (issue 35): a create was a transaction of its own (`BEGIN`,
/// a locking load, the tombstone, its removal, the insert, the update, the
/// notification, `COMMIT`, and the pool's pings: 9 round trips or more),
/// so streams created on first use cost PostgreSQL far more than the
/// appends to them. Creates that arrive together now join the writer's
/// group, appends beside them: after the blocked group, one load (of the
/// stream appended to) and one statement that commits them all, then a
/// load and a statement for the deleted path (first tried as free, its
/// tombstone makes the insert fail), besides a prepare or two. Each keeps the engine's answer: a new stream (with its
/// initial messages), the same stream again (`created: false`), another
/// configuration refused, two creates of one path in one group, a path
/// deleted before (a new incarnation), and an append to a stream created
/// in the same group.
#[test]
fn concurrent_creates_share_one_commit_with_the_appends_beside_them() {
    let Some(schema) = Schema::fresh("shared_creates") else {
        return;
    };
    const NEW: usize = 48;
    run(async move {
        let proxy = Proxy::start(&schema.url).await;
        let store = open_through(&proxy, schema.options()).await;
        let text = || StreamConfig::bytes("text/plain");
        let blocker = path("creates/blocker");
        let existing = path("creates/existing");
        let deleted = path("creates/deleted");
        // Warm-up: every statement of the group, on the writer's connection.
        for p in [&blocker, &existing, &deleted] {
            store
                .create(p, text(), Payload::from(bytes::Bytes::from("warm")))
                .await
                .expect("create");
            store.append(p, Append::body("0")).await.expect("warm up");
        }
        let before_delete = store.head(&deleted).await.expect("head");
        store.delete(&deleted).await.expect("delete");
        let fresh: Vec<StreamPath> = (0..NEW)
            .map(|n| path(&format!("creates/new-{n}")))
            .collect();
        let twice = path("creates/twice");
        let appended_to = path("creates/appended-to");

        // Another session holds every stream row: the next group waits.
        let mut rows = RowLock::hold(&schema).await;
        let before = proxy.round_trips();
        let first = store.append(&blocker, Append::body("1"));
        let mut first = std::pin::pin!(first);
        rows.until_waited_on(&mut first).await;
        let creates: FuturesUnordered<_> = fresh
            .iter()
            .enumerate()
            .map(|(n, p)| {
                // Half of them with messages of their own.
                let initial = if n % 2 == 0 {
                    Payload::from(bytes::Bytes::from(format!("first of {n}")))
                } else {
                    Payload::empty()
                };
                (p, text(), initial)
            })
            .chain([
                (&existing, text(), Payload::empty()),
                (&twice, text(), Payload::empty()),
                (&twice, text(), Payload::empty()),
                (&deleted, text(), Payload::empty()),
                (&appended_to, text(), Payload::empty()),
            ])
            .map(|(p, config, initial)| store.create(p, config, initial))
            .collect();
        let mut creates = creates;
        let refused = store.create(&existing, StreamConfig::json(), Payload::empty());
        let mut refused = std::pin::pin!(refused);
        let appended = store.append(&appended_to, Append::body("after its create"));
        let mut appended = std::pin::pin!(appended);
        // Every create is queued (polled once) while the first append waits.
        assert!(futures::poll!(creates.next()).is_pending());
        assert!(futures::poll!(refused.as_mut()).is_pending());
        assert!(futures::poll!(appended.as_mut()).is_pending());
        rows.release().await;
        first.await.expect("the first append");
        let mut made = 0;
        let mut again = 0;
        while let Some(outcome) = creates.next().await {
            if outcome.expect("create").created {
                made += 1;
            } else {
                again += 1;
            }
        }
        let refused = refused.await;
        assert!(
            matches!(
                refused,
                Err(eddy_streams::StreamError::ConfigConflict { .. })
            ),
            "{refused:?}"
        );
        let appended = appended.await;
        let round_trips = proxy.round_trips() - before;
        eprintln!(
            "{} concurrent creates and an append took {round_trips} round trips",
            NEW + 6
        );
        // The new ones, one of the two creates of one path, the deleted
        // path and the stream appended to; `existing` and the other create
        // of `twice` found their stream.
        assert_eq!((made, again), (NEW + 3, 2));
        assert!(
            round_trips <= 8,
            "{} concurrent creates took {round_trips} round trips",
            NEW + 6
        );

        let appended = appended.expect("an append to a stream created beside it");

        // What the group wrote, as another store reads it.
        let other = schema.open(Arc::new(eddy_streams::SystemClock)).await;
        for (n, p) in fresh.iter().enumerate() {
            let chunk = other
                .read(p, ReadFrom::Beginning, 1 << 20)
                .await
                .expect("read a created stream");
            let expected: Vec<bytes::Bytes> = if n % 2 == 0 {
                vec![format!("first of {n}").into()]
            } else {
                Vec::new()
            };
            assert_eq!(chunk.messages, expected, "{p}");
        }
        let recreated = other.head(&deleted).await.expect("head");
        assert_eq!(
            recreated.tail.position(),
            0,
            "a new stream at a deleted path"
        );
        assert_ne!(recreated.tail, before_delete.tail.with_position(0));
        let chunk = other
            .read(&appended_to, ReadFrom::Beginning, 1 << 20)
            .await
            .expect("read");
        assert_eq!(chunk.messages, vec![bytes::Bytes::from("after its create")]);
        assert_eq!(appended.next_offset, chunk.next_offset);
        store.close().await;
        other.close().await;
        schema.drop().await;
    });
}
