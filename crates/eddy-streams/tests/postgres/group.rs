//! Group commit on PostgreSQL: a failed group writes nothing and answers
//! every append of it with a retryable error; a store's copy of its
//! streams never hides what other stores wrote; reads that take messages
//! from memory agree with the database.

use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{
    Append, Offset, Payload, PgStorage, ProducerPosition, ReadFrom, Storage, StreamConfig,
    StreamPath, SystemClock,
};
use futures::stream::{FuturesUnordered, StreamExt};

use super::{run, RowLock, Schema};

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("valid path")
}

async fn open(schema: &Schema) -> PgStorage {
    schema.open(Arc::new(SystemClock)).await
}

async fn tail(store: &PgStorage, p: &StreamPath) -> Offset {
    store.head(p).await.expect("head").tail
}

async fn read_all(store: &PgStorage, p: &StreamPath) -> Vec<Bytes> {
    store
        .read(p, ReadFrom::Beginning, usize::MAX)
        .await
        .expect("read")
        .messages
}

/// Appends that share a group whose statement fails (here: a trigger of
/// the test refuses one message) are all refused as retryable, none of
/// them is written, and the next appends succeed.
#[test]
fn a_failed_group_answers_each_append_as_retryable_and_writes_nothing() {
    let Some(schema) = Schema::fresh("failed_group") else {
        return;
    };
    run(async move {
        let store = open(&schema).await;
        let one = path("failed/one");
        let many: Vec<StreamPath> = (0..8).map(|n| path(&format!("failed/{n}"))).collect();
        for p in std::iter::once(&one).chain(&many) {
            store
                .create(p, StreamConfig::json(), Payload::empty())
                .await
                .expect("create");
            store.append(p, Append::body("0")).await.expect("warm up");
        }
        schema
            .execute(&format!(
                "CREATE FUNCTION \"{0}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF NEW.data = convert_to('\"boom\"', 'UTF8') THEN
                         RAISE EXCEPTION 'refused by the test';
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER refuse BEFORE INSERT ON \"{0}\".messages
                     FOR EACH ROW EXECUTE FUNCTION \"{0}\".refuse();",
                schema.name
            ))
            .await;
        let mut rows = RowLock::hold(&schema).await;
        let first = store.append(&one, Append::body("1"));
        let mut first = std::pin::pin!(first);
        rows.until_waited_on(&mut first).await;
        // The next group: one refused message among appends to many streams
        // and to the first one.
        let mut group: FuturesUnordered<_> = many
            .iter()
            .map(|p| store.append(p, Append::body("2")))
            .chain(std::iter::once(
                store.append(&one, Append::body("\"boom\"")),
            ))
            .chain(std::iter::once(store.append(&one, Append::body("3"))))
            .collect();
        assert!(futures::poll!(group.next()).is_pending());
        rows.release().await;
        first.await.expect("the group before commits");
        let mut refused = 0;
        while let Some(outcome) = group.next().await {
            let err = outcome.expect_err("the whole group fails");
            assert!(err.is_retryable(), "{err}");
            refused += 1;
        }
        assert_eq!(refused, 10);
        for p in &many {
            assert_eq!(
                tail(&store, p).await.position(),
                1,
                "nothing written to {p}"
            );
        }
        assert_eq!(tail(&store, &one).await.position(), 2);
        // A retry without the refused message succeeds.
        for p in &many {
            let appended = store.append(p, Append::body("2")).await.expect("retry");
            assert_eq!(appended.next_offset.position(), 2);
        }
        drop(group);
        store.close().await;
        schema.drop().await;
    });
}

/// Another store writes a stream this store has appended to (so it holds
/// a copy of its record): appends, producer deduplication, a released
/// producer and a re-created stream all see what the other store did.
#[test]
fn appends_see_what_another_store_wrote_since() {
    let Some(schema) = Schema::fresh("stale_copy") else {
        return;
    };
    run(async move {
        let (a, b) = (open(&schema).await, open(&schema).await);
        let p = path("stale/shared");
        a.create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        a.append(&p, Append::body("\"a1\"")).await.expect("a1");
        b.append(&p, Append::body("\"b1\"")).await.expect("b1");
        let a2 = a.append(&p, Append::body("\"a2\"")).await.expect("a2");
        assert_eq!(
            a2.next_offset.position(),
            3,
            "after the other store's message"
        );
        assert_eq!(
            read_all(&a, &p).await,
            vec![
                Bytes::from("\"a1\""),
                Bytes::from("\"b1\""),
                Bytes::from("\"a2\"")
            ]
        );

        // A producer the other store wrote first is a duplicate here.
        let produced = |seq: u64| {
            Append::body(format!("\"p{seq}\"")).with_producer(ProducerPosition::new("p", 0, seq))
        };
        b.append(&p, produced(0)).await.expect("b: p0");
        let again = a.append(&p, produced(0)).await.expect("a: p0");
        assert!(again.duplicate, "{again:?}");
        assert_eq!(again.next_offset.position(), 4);
        let next = a.append(&p, produced(1)).await.expect("a: p1");
        assert!(!next.duplicate);
        assert_eq!(next.next_offset.position(), 5);

        // Released by the other store (which moves no stream version): the
        // producer starts again at 0 here.
        assert!(b.release_producer(&p, "p").await.expect("release"));
        let restarted = a.append(&p, produced(0)).await.expect("a: p0 again");
        assert!(!restarted.duplicate, "{restarted:?}");
        assert_eq!(restarted.next_offset.position(), 6);

        // Deleted and created again by the other store: a new stream.
        b.delete(&p).await.expect("delete");
        b.create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create again");
        let fresh = a.append(&p, Append::body("\"new\"")).await.expect("append");
        assert_eq!(fresh.next_offset.position(), 1);
        assert_eq!(read_all(&a, &p).await, vec![Bytes::from("\"new\"")]);
        assert_eq!(read_all(&b, &p).await, vec![Bytes::from("\"new\"")]);
        a.close().await;
        b.close().await;
        schema.drop().await;
    });
}

/// The messages a read returns from `start`: at least one, then more
/// while their total stays within `max_bytes`.
fn expected(all: &[Bytes], start: usize, max_bytes: usize) -> Vec<Bytes> {
    let mut total = 0;
    let mut out = Vec::new();
    for message in &all[start..] {
        total += message.len();
        if !out.is_empty() && total > max_bytes {
            break;
        }
        out.push(message.clone());
    }
    out
}

/// Two stores append to one stream in turns; after every append both read
/// it from several offsets and with several budgets. Each store's memory
/// holds only the messages it wrote, in runs the other store's messages
/// interrupt, so reads mix memory and the database in every way.
#[test]
fn reads_of_a_stream_two_stores_write_return_every_message_in_order() {
    let Some(schema) = Schema::fresh("mixed_reads") else {
        return;
    };
    run(async move {
        let stores = [open(&schema).await, open(&schema).await];
        let p = path("mixed/stream");
        let empty = stores[0]
            .create(&p, StreamConfig::bytes("text/plain"), Payload::empty())
            .await
            .expect("create")
            .info
            .tail;
        let mut all: Vec<Bytes> = Vec::new();
        for round in 0..40usize {
            // Runs of one, two and three appends by each store.
            let writer = &stores[(round / (1 + round % 3)) % 2];
            let message = Bytes::from(format!("m{round}-{}", "x".repeat(round % 7)));
            writer
                .append(&p, Append::body(message.clone()))
                .await
                .expect("append");
            all.push(message);
            for store in &stores {
                for start in [0, all.len() / 2, all.len() - 1] {
                    for max_bytes in [1, 20, 1 << 20] {
                        let from = if start == 0 {
                            ReadFrom::Beginning
                        } else {
                            ReadFrom::Offset(empty.with_position(start as u64))
                        };
                        let chunk = store.read(&p, from, max_bytes).await.expect("read");
                        assert_eq!(
                            chunk.messages,
                            expected(&all, start, max_bytes),
                            "round {round}, from {start}, within {max_bytes}"
                        );
                        assert_eq!(chunk.start, empty.with_position(start as u64));
                        let next = start + chunk.messages.len();
                        assert_eq!(chunk.next_offset, empty.with_position(next as u64));
                        assert_eq!(chunk.up_to_date, next == all.len());
                    }
                }
            }
        }
        for store in stores {
            store.close().await;
        }
        schema.drop().await;
    });
}

/// Regression: the store's own read connections were reused without a
/// ping, so after the database ended them (a restart, an administrator),
/// the next read through each failed. A read runs again on a fresh
/// connection when its own is dead; the writer takes a fresh one after.
#[test]
fn reads_and_appends_survive_the_database_ending_their_connections() {
    let Some(schema) = Schema::fresh("dead_read_connections") else {
        return;
    };
    run(async move {
        let store = open(&schema).await;
        let p = path("dead/stream");
        store
            .create(&p, StreamConfig::json(), Payload::empty())
            .await
            .expect("create");
        store.append(&p, Append::body("1")).await.expect("append");
        assert_eq!(read_all(&store, &p).await.len(), 1);
        // Every idle session of this store's schema, ended.
        let pool = eddy_streams::sqlx::PgPool::connect(&schema.url)
            .await
            .expect("connect");
        let ended: Vec<bool> = eddy_streams::sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE state = 'idle' AND query LIKE $1",
        )
        .bind(format!("%\"{}\".%", schema.name))
        .fetch_all(&pool)
        .await
        .expect("terminate");
        assert!(!ended.is_empty(), "the store had idle connections");
        pool.close().await;
        assert_eq!(read_all(&store, &p).await.len(), 1, "read again");
        assert_eq!(tail(&store, &p).await.position(), 1);
        // The writer's connection was ended too: an append whose group
        // statement ran on it is refused as retryable (whether a statement
        // the server answered so committed is not known), and the next one
        // goes through.
        let first = store.append(&p, Append::body("2")).await;
        if let Err(err) = &first {
            assert!(err.is_retryable(), "{err}");
        }
        let next = store.append(&p, Append::body("3")).await.expect("append");
        let written = if first.is_ok() { 3 } else { 2 };
        assert_eq!(next.next_offset.position(), written);
        store.close().await;
        schema.drop().await;
    });
}
