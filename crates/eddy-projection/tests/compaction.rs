//! Inputs that accept compaction (issue 34): a binding whose input is
//! declared with `accept_compaction` reads a compacted state stream, each
//! entry at the store's own offset, and materializes the rows a binding
//! of the full history does; a plain binding of the same stream is
//! `history-unavailable`; a pinned unit whose range a later pass thinned
//! is `range-unreproducible`, and its pin stays.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use eddy_projection::{Commit, Declare, Host, Projection, Range, RunOptions, Status};
use eddy_streams::{
    Append, Compaction, JsonStream, MemoryStorage, Offset, Payload, ReadFrom, Route, Storage,
    StreamConfig, StreamPath,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::run::bound_key;
use crate::support::{runtime, Faulty, Op, When};

/// The parameters of a binding: which table stream it reads.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Table {
    table: String,
}

fn table(name: &str) -> Table {
    Table { table: name.into() }
}

/// A materialized row: its value, and the position of the change that
/// wrote it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Row {
    value: i64,
    at: u64,
}

type Rows = BTreeMap<String, Row>;

/// Every entry a handler saw: its offset and its message.
type Seen = Arc<Mutex<Vec<(Offset, Value)>>>;

/// One change of the table, as the test writes it.
#[derive(Clone, Debug)]
enum Change {
    Upsert(&'static str, i64),
    Delete(&'static str),
}

impl Change {
    fn message(&self) -> String {
        match self {
            Change::Upsert(key, value) => json!({
                "type": "row", "key": key, "value": value,
                "headers": {"operation": "upsert"},
            }),
            Change::Delete(key) => json!({
                "type": "row", "key": key,
                "headers": {"operation": "delete"},
            }),
        }
        .to_string()
    }
}

/// `rows` after the change `message` at `offset`.
fn apply(mut rows: Rows, offset: Offset, message: &Value) -> Rows {
    let key = message["key"].as_str().unwrap_or_default().to_owned();
    match message["headers"]["operation"].as_str() {
        Some("delete") => {
            rows.remove(&key);
        }
        _ => {
            let value = message["value"].as_i64().unwrap_or_default();
            let at = offset.position();
            rows.insert(key, Row { value, at });
        }
    }
    rows
}

/// The rows of the full history `changes`, the first at position 0.
fn model(changes: &[Change]) -> Rows {
    changes
        .iter()
        .enumerate()
        .fold(Rows::new(), |rows, (i, c)| {
            let message: Value = serde_json::from_str(&c.message()).unwrap_or_default();
            apply(rows, Offset::new(0, i as u64), &message)
        })
}

fn route() -> Route {
    Route::new("tables/:table").expect("route")
}

fn path(name: &str) -> StreamPath {
    StreamPath::new(format!("tables/{name}")).expect("path")
}

/// A per-entry fold that materializes the table's rows; its input
/// accepts compaction when `accept`.
fn entry_rows(accept: bool) -> (Projection<Table, Rows>, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let declare = Declare::<Table>::new("entry-rows");
    let input = declare.input_route::<Value>("changes", route());
    if accept {
        declare.accept_compaction(&input);
    }
    let projection = declare
        .fold(Rows::new())
        .on(input, move |rows, entry, _| {
            let mut seen = record.lock().expect("seen");
            seen.push((entry.offset, entry.item.clone()));
            apply(rows, entry.offset, entry.item)
        })
        .build()
        .expect("declare");
    (projection, seen)
}

/// The same rows from a batch handler that pins its units (a producer
/// commit), reading offsets through `Slice::offset_of`.
fn batch_rows() -> (Projection<Table, Rows>, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let sink = JsonStream::<i64>::new("Test/Sink", "sinks/:table").expect("route");
    let declare = Declare::<Table>::new("batch-rows");
    let input = declare.input_route::<Value>("changes", route());
    declare.accept_compaction(&input);
    declare.output("sink", &sink);
    let projection = declare
        .map_accum_batch(Commit::producer(), Rows::new(), move |rows, batch, _, _| {
            let slice = batch.slice(input);
            let mut seen = record.lock().expect("seen");
            let mut rows = rows;
            for (index, item) in slice.items.iter().enumerate() {
                let offset = slice.offset_of(index).expect("each item has an offset");
                seen.push((offset, item.clone()));
                rows = apply(rows, offset, item);
            }
            rows
        })
        .expect("declare");
    (projection, seen)
}

/// Creates the table `name`, compacted up to its tail when `compacted`.
async fn create(store: &dyn Storage, name: &str, compacted: bool) {
    create_with(store, name, compacted.then_some(Compaction::ON)).await;
}

async fn create_with(store: &dyn Storage, name: &str, compaction: Option<Compaction>) {
    let config = match compaction {
        Some(policy) => StreamConfig::json().with_compaction(policy),
        None => StreamConfig::json(),
    };
    store
        .create(&path(name), config, Payload::empty())
        .await
        .expect("create");
}

async fn write(store: &dyn Storage, name: &str, changes: &[Change]) {
    for change in changes {
        store
            .append(&path(name), Append::body(change.message()))
            .await
            .expect("append");
    }
}

/// Every message of the table `name`, by offset.
async fn messages(store: &dyn Storage, name: &str) -> BTreeMap<Offset, Value> {
    let mut all = BTreeMap::new();
    let mut from = ReadFrom::Beginning;
    loop {
        let chunk = store.read(&path(name), from, 1 << 20).await.expect("read");
        for (index, message) in chunk.messages.iter().enumerate() {
            let value = serde_json::from_slice(message).expect("json");
            all.insert(chunk.offset_of(index), value);
        }
        if chunk.up_to_date {
            return all;
        }
        from = ReadFrom::Offset(chunk.next_offset);
    }
}

/// Checks that every entry seen is a message the compacted stream held at
/// that offset, and was the full history's message at that position.
async fn seen_at_store_offsets(store: &dyn Storage, seen: &Seen, full: &[Change]) {
    let incarnation = store
        .head(&path("compacted"))
        .await
        .expect("head")
        .tail
        .incarnation();
    let seen = seen.lock().expect("seen").clone();
    assert!(!seen.is_empty());
    for (offset, message) in seen {
        assert_eq!(offset.incarnation(), incarnation, "the stream's own offset");
        let position = usize::try_from(offset.position()).expect("position");
        let written: Value = serde_json::from_str(&full[position].message()).expect("json");
        assert_eq!(message, written, "the message at {offset}");
    }
}

/// Compacts the table `name`; how many messages the pass dropped.
async fn compact(store: &dyn Storage, name: &str) -> u64 {
    store.compact(&path(name)).await.expect("compact")
}

fn first() -> Vec<Change> {
    use Change::*;
    vec![
        Upsert("a", 1),
        Upsert("b", 1),
        Upsert("a", 2),
        Delete("b"),
        Upsert("c", 1),
        Upsert("c", 2),
        Upsert("a", 3),
    ]
}

fn second() -> Vec<Change> {
    use Change::*;
    vec![Upsert("b", 2), Upsert("c", 2), Delete("a"), Upsert("c", 3)]
}

fn third() -> Vec<Change> {
    use Change::*;
    vec![Upsert("a", 4), Upsert("b", 3), Upsert("b", 4)]
}

/// Units of two items, so that runs go through the read-ahead buffer.
fn small_units() -> RunOptions {
    RunOptions::default().with_unit_size(2)
}

/// A host whose `batch_rows` binding of the compacted table pinned its
/// unit and failed to settle it: its next run replays the pinned range.
async fn pin_a_thinned_unit(
    store: &Arc<dyn Storage>,
    changes: &[Change],
    options: RunOptions,
) -> (Host, Seen, eddy_projection::Bound<Table, Rows>) {
    create(store.as_ref(), "compacted", true).await;
    write(store.as_ref(), "compacted", changes).await;
    assert!(compact(store.as_ref(), "compacted").await > 0);
    let faulty = Arc::new(Faulty::new(store.clone()));
    let host = Host::new(faulty.clone());
    let (projection, seen) = batch_rows();
    let bound = projection.at(table("compacted")).expect("bind");
    // The handler emits nothing: append 0 pins, append 1 settles.
    faulty.fail_nth(Some(Op::Append), 1, When::Before);
    host.run(&bound, options)
        .await
        .expect_err("the settle fails");
    let pinned = pinned_range(&host, &bound).await.expect("pinned");
    let thinned = pinned
        .thinned
        .clone()
        .expect("the pin records what compaction kept");
    assert_eq!(thinned.items, pinned.len());
    assert!(pinned.len() < pinned.to.position() - pinned.from.position());
    (host, seen, bound)
}

/// The range of the binding's pinned unit, if it has one.
async fn pinned_range(host: &Host, bound: &eddy_projection::Bound<Table, Rows>) -> Option<Range> {
    let loaded = host
        .checkpoints()
        .load(&bound_key(bound))
        .await
        .expect("load");
    let pending = loaded.checkpoint?.pending?;
    pending.ranges.get("changes").cloned()
}

mod cases {
    use super::*;

    pub async fn an_accepting_binding_of_a_compacted_stream_ends_with_the_full_rows(
        store: Arc<dyn Storage>,
    ) {
        let host = Host::new(store.clone());
        let (projection, seen) = entry_rows(true);
        let compacted = projection.at(table("compacted")).expect("bind");
        let (projection, full_seen) = entry_rows(true);
        let full = projection.at(table("full")).expect("bind");
        let mut history = Vec::new();
        for (name, compacted) in [("compacted", true), ("full", false)] {
            create(store.as_ref(), name, compacted).await;
        }
        // Compacted before the first run, between runs, and between the
        // units of one run.
        for (changes, limit) in [(first(), None), (second(), Some(1)), (third(), None)] {
            for name in ["compacted", "full"] {
                write(store.as_ref(), name, &changes).await;
            }
            history.extend(changes);
            assert!(compact(store.as_ref(), "compacted").await > 0);
            let options = match limit {
                Some(limit) => small_units().with_limit(limit),
                None => small_units(),
            };
            host.run(&compacted, options.clone()).await.expect("run");
            host.run(&full, options).await.expect("run");
            compact(store.as_ref(), "compacted").await;
        }
        let done = host.run(&compacted, small_units()).await.expect("run");
        assert_eq!(done.status, Status::CaughtUp);
        host.run(&full, small_units()).await.expect("run");
        let rows = host.read(&compacted).await.expect("read");
        assert_eq!(rows, host.read(&full).await.expect("read"));
        assert_eq!(rows, model(&history));
        assert!(
            seen.lock().expect("seen").len() < full_seen.lock().expect("seen").len(),
            "compaction dropped messages before the binding read them"
        );
        seen_at_store_offsets(store.as_ref(), &seen, &history).await;
        // What the stream keeps now is a subset of what was seen.
        let kept = messages(store.as_ref(), "compacted").await;
        let seen: BTreeMap<Offset, Value> = seen.lock().expect("seen").iter().cloned().collect();
        for (offset, message) in kept {
            assert_eq!(seen.get(&offset), Some(&message), "{offset}");
        }
    }

    pub async fn a_plain_binding_of_a_compacted_stream_is_history_unavailable(
        store: Arc<dyn Storage>,
    ) {
        create(store.as_ref(), "compacted", true).await;
        write(store.as_ref(), "compacted", &first()).await;
        assert!(compact(store.as_ref(), "compacted").await > 0);
        let host = Host::new(store.clone());
        let (projection, seen) = entry_rows(false);
        let plain = projection.at(table("compacted")).expect("bind");
        let failed = host
            .run(&plain, RunOptions::default())
            .await
            .expect_err("a thinned range");
        assert_eq!(failed.code(), "history-unavailable");
        assert!(failed.to_string().contains("accept_compaction"), "{failed}");
        assert!(seen.lock().expect("seen").is_empty(), "no entry handled");
    }

    pub async fn a_pinned_thinned_range_replays_its_items(store: Arc<dyn Storage>) {
        let (host, seen, bound) = pin_a_thinned_unit(&store, &first(), RunOptions::default()).await;
        let first_try = seen.lock().expect("seen").clone();
        seen.lock().expect("seen").clear();
        host.run(&bound, RunOptions::default())
            .await
            .expect("replay");
        assert_eq!(*seen.lock().expect("seen"), first_try, "the same items");
        assert_eq!(pinned_range(&host, &bound).await, None, "settled");
        assert_eq!(host.read(&bound).await.expect("read"), model(&first()));
        seen_at_store_offsets(store.as_ref(), &seen, &first()).await;
    }

    /// A pinned range ends at the next message kept after its last item;
    /// a pass that drops that message after the pin leaves the range's
    /// items as they were, and the replay runs on them.
    pub async fn a_pinned_range_whose_end_message_went_replays(store: Arc<dyn Storage>) {
        use Change::*;
        let changes = [
            Upsert("x", 1),
            Upsert("y", 1),
            Upsert("z", 1),
            Upsert("y", 2),
        ];
        let one = RunOptions::default().with_unit_size(1);
        let (host, seen, bound) = pin_a_thinned_unit(&store, &changes, one.clone()).await;
        let pinned = pinned_range(&host, &bound).await.expect("pinned");
        assert_eq!((pinned.len(), pinned.to.position()), (1, 2), "x1 up to z1");
        let later = [Upsert("z", 2)];
        write(store.as_ref(), "compacted", &later).await;
        assert!(compact(store.as_ref(), "compacted").await > 0, "z1 goes");
        seen.lock().expect("seen").clear();
        host.run(&bound, one).await.expect("replay and go on");
        let history = [changes.as_slice(), &later].concat();
        assert_eq!(host.read(&bound).await.expect("read"), model(&history));
        let first = seen.lock().expect("seen").first().cloned();
        assert_eq!(
            first.map(|(offset, _)| offset.position()),
            Some(0),
            "x1 again"
        );
    }

    pub async fn a_pinned_range_thinned_again_is_unreproducible(store: Arc<dyn Storage>) {
        let (host, seen, bound) = pin_a_thinned_unit(&store, &first(), RunOptions::default()).await;
        let pinned = pinned_range(&host, &bound).await;
        // Later changes supersede rows of the pinned range: a pass drops
        // their older changes, inside the range.
        write(store.as_ref(), "compacted", &second()).await;
        assert!(compact(store.as_ref(), "compacted").await > 0);
        seen.lock().expect("seen").clear();
        for _ in 0..2 {
            let failed = host
                .run(&bound, RunOptions::default())
                .await
                .expect_err("replay");
            assert_eq!(failed.code(), "range-unreproducible", "{failed}");
        }
        assert!(
            seen.lock().expect("seen").is_empty(),
            "the handler never ran"
        );
        assert_eq!(pinned_range(&host, &bound).await, pinned, "the pin stays");
    }

    pub async fn a_pinned_range_of_a_plain_input_thinned_is_unreproducible(
        store: Arc<dyn Storage>,
    ) {
        create(store.as_ref(), "compacted", true).await;
        write(store.as_ref(), "compacted", &first()).await;
        let faulty = Arc::new(Faulty::new(store.clone()));
        let host = Host::new(faulty.clone());
        let sink = JsonStream::<i64>::new("Test/Sink", "sinks/:table").expect("route");
        let declare = Declare::<Table>::new("plain-batch");
        let input = declare.input_route::<Value>("changes", route());
        declare.output("sink", &sink);
        let projection = declare
            .map_accum_batch(Commit::producer(), 0_usize, move |n, batch, _, _| {
                n + batch.items(input).len()
            })
            .expect("declare");
        let bound = projection.at(table("compacted")).expect("bind");
        faulty.fail_nth(Some(Op::Append), 1, When::Before);
        host.run(&bound, RunOptions::default())
            .await
            .expect_err("the settle fails");
        write(store.as_ref(), "compacted", &second()).await;
        assert!(compact(store.as_ref(), "compacted").await > 0);
        let failed = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("replay");
        assert_eq!(failed.code(), "range-unreproducible", "{failed}");
        assert!(failed.to_string().contains("compaction"), "{failed}");
    }
}

macro_rules! compaction_cases {
    ($runner:path) => {
        $runner!(
            an_accepting_binding_of_a_compacted_stream_ends_with_the_full_rows,
            a_plain_binding_of_a_compacted_stream_is_history_unavailable,
            a_pinned_thinned_range_replays_its_items,
            a_pinned_range_whose_end_message_went_replays,
            a_pinned_range_thinned_again_is_unreproducible,
            a_pinned_range_of_a_plain_input_thinned_is_unreproducible,
        );
    };
}

compaction_cases!(crate::on_backends);

/// The same cases on PostgreSQL (the database at `DATABASE_URL`), each on
/// a schema of its own.
#[cfg(feature = "postgres")]
mod postgres {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    use eddy_streams::{ManualClock, PgOptions, PgStorage, Storage};

    use super::cases;

    /// Runs `case` on a fresh PostgreSQL store; says so, or that it was
    /// skipped (a failure when `EDDY_REQUIRE_POSTGRES` is set).
    pub(super) fn on_postgres(name: &str, case: crate::support::Case) {
        on_postgres_with(name, move |store, _| case(store));
    }

    /// Runs `case` on a fresh PostgreSQL store (a schema of its own)
    /// reading the clock `case` gets.
    pub(super) fn on_postgres_with(
        name: &str,
        case: impl FnOnce(
            Arc<dyn Storage>,
            Arc<ManualClock>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        let Some(url) = crate::support::postgres_url(name) else {
            return;
        };
        eprintln!("`{name}` on postgres");
        let schema = crate::support::fresh_schema("compaction");
        crate::support::runtime().block_on(async {
            let clock = Arc::new(ManualClock::starting_now());
            let options = PgOptions {
                clock: clock.clone(),
                ..PgOptions::new(&url).with_schema(&schema)
            };
            let store: Arc<dyn Storage> =
                Arc::new(PgStorage::open(options).await.expect("open postgres"));
            case(store, clock).await;
            crate::support::drop_pg_schema(&url, &schema).await;
        });
    }

    macro_rules! on_postgres {
        ($($name:ident),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    on_postgres(stringify!($name), |store| Box::pin(cases::$name(store)));
                }
            )*
        };
    }

    compaction_cases!(on_postgres);
}

/// Cases about deletes dropped past their lifetime: each gets a store
/// whose clock it moves.
mod lifetime {
    use std::time::Duration;

    use eddy_streams::ManualClock;

    use super::*;

    type Bound = eddy_projection::Bound<Table, Rows>;

    /// A binding of the table `compacted` that materializes its rows and
    /// accepts compaction, declared as `name`.
    fn rows_binding(name: &str) -> Bound {
        let declare = Declare::<Table>::new(name);
        let input = declare.input_route::<Value>("changes", route());
        declare.accept_compaction(&input);
        declare
            .fold(Rows::new())
            .on(input, |rows, entry, _| {
                apply(rows, entry.offset, entry.item)
            })
            .build()
            .expect("declare")
            .at(table("compacted"))
            .expect("bind")
    }

    /// A binding reads a table, then a row of it is deleted (a second
    /// binding reads that far) and the delete outlives its one-minute
    /// lifetime; a pass drops it with the row's older change. Returns the
    /// host, the two bindings, and the history written.
    async fn a_read_table_whose_delete_went(
        store: &Arc<dyn Storage>,
        clock: &ManualClock,
    ) -> (Host, Bound, Bound, Vec<Change>) {
        use Change::*;
        let policy = "deletes=1m".parse().expect("policy");
        create_with(store.as_ref(), "compacted", Some(policy)).await;
        let mut history = vec![
            Upsert("a", 1),
            Upsert("e", 1),
            Upsert("b", 1),
            Upsert("c", 1),
        ];
        write(store.as_ref(), "compacted", &history).await;
        let host = Host::new(store.clone());
        let bound = rows_binding("early-rows");
        host.run(&bound, RunOptions::default()).await.expect("run");
        assert!(host.read(&bound).await.expect("read").contains_key("b"));
        let later = vec![Delete("b"), Upsert("c", 2)];
        write(store.as_ref(), "compacted", &later).await;
        history.extend(later);
        let read_the_delete = rows_binding("late-rows");
        host.run(&read_the_delete, RunOptions::default())
            .await
            .expect("run");
        clock.advance(Duration::from_secs(61));
        // b's upsert and delete, c's first upsert.
        assert_eq!(compact(store.as_ref(), "compacted").await, 3);
        let info = store.head(&path("compacted")).await.expect("head");
        let dropped = info.dropped_deletes.expect("the stream says so");
        assert_eq!(dropped.before.position(), 5);
        (host, bound, read_the_delete, history)
    }

    /// A binding that read a row before its delete, and resumes before
    /// where a pass dropped that delete, would keep the row: it stops with
    /// `history-unavailable`, saying where and how to go on; rebuilt from
    /// the start it holds exactly the live rows.
    pub async fn a_binding_that_may_have_missed_a_dropped_delete_stops(
        store: Arc<dyn Storage>,
        clock: Arc<ManualClock>,
    ) {
        let (host, bound, _, history) = a_read_table_whose_delete_went(&store, &clock).await;
        let failed = host
            .run(&bound, RunOptions::default())
            .await
            .expect_err("the binding may have missed b's delete");
        assert_eq!(failed.code(), "history-unavailable", "{failed}");
        let message = failed.to_string();
        let tail = store.head(&path("compacted")).await.expect("head").tail;
        for said in [
            "delete".to_owned(),
            tail.with_position(4).to_string(),
            "delete lifetime".to_owned(),
            "from the start".to_owned(),
        ] {
            assert!(message.contains(&said), "`{said}` in: {message}");
        }
        assert!(
            host.read(&bound).await.expect("read").contains_key("b"),
            "nothing was committed"
        );
        host.forget(&bound).await.expect("forget");
        host.run(&bound, RunOptions::default())
            .await
            .expect("a rebuild from the start");
        assert_eq!(host.read(&bound).await.expect("read"), model(&history));
    }

    /// A binding that starts after the pass, from the stream's start, is
    /// right whatever the pass dropped, also when it reads in many small
    /// units over many runs (resuming each time before the mark); one
    /// that had read past the dropped delete goes on too.
    pub async fn bindings_that_cannot_have_missed_a_dropped_delete_go_on(
        store: Arc<dyn Storage>,
        clock: Arc<ManualClock>,
    ) {
        let (host, _, read_the_delete, mut history) =
            a_read_table_whose_delete_went(&store, &clock).await;
        // Another binding of the same stream, from its start.
        let fresh = rows_binding("fresh-rows");
        // a's and e's upserts (0, 1), each in a run of its own: the
        // second resumes at 1, before the dropped delete (at 4).
        let one = RunOptions::default().with_unit_size(1).with_limit(1);
        for _ in 0..3 {
            host.run(&fresh, one.clone()).await.expect("run");
        }
        let more = vec![Change::Upsert("d", 1)];
        write(store.as_ref(), "compacted", &more).await;
        history.extend(more);
        for bound in [&fresh, &read_the_delete] {
            host.run(bound, RunOptions::default()).await.expect("run");
            assert_eq!(host.read(bound).await.expect("read"), model(&history));
        }
    }

    type Case = fn(
        Arc<dyn Storage>,
        Arc<ManualClock>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

    /// Runs `case` on a fresh memory store, SQLite store, and remote
    /// client of a server over SQLite, each reading a clock `case` moves.
    pub(super) fn on_clocked_backends(name: &str, case: Case) {
        let runtime = runtime();
        let dir = tempfile::tempdir().expect("tempdir");
        let sqlite = |at: &str, clock: &Arc<ManualClock>| {
            let options = eddy_streams::SqliteOptions {
                clock: clock.clone(),
                ..eddy_streams::SqliteOptions::default()
            };
            eddy_streams::SqliteStorage::open_with(dir.path().join(at), options)
                .expect("open sqlite")
        };
        eprintln!("case `{name}` on memory");
        let clock = Arc::new(ManualClock::starting_now());
        let memory = MemoryStorage::new().with_clock(clock.clone());
        runtime.block_on(case(Arc::new(memory), clock));
        eprintln!("case `{name}` on sqlite");
        let clock = Arc::new(ManualClock::starting_now());
        runtime.block_on(case(Arc::new(sqlite("local", &clock)), clock));
        eprintln!("case `{name}` over HTTP");
        let clock = Arc::new(ManualClock::starting_now());
        let store = Arc::new(sqlite("served", &clock));
        runtime.block_on(async {
            let (remote, server) = crate::support::served(store).await;
            case(remote, clock).await;
            server.stop().await.expect("stop");
        });
    }

    macro_rules! lifetime_cases {
        ($($name:ident),* $(,)?) => {
            mod memory_sqlite_http {
                $(
                    #[test]
                    fn $name() {
                        super::on_clocked_backends(stringify!($name), |store, clock| {
                            Box::pin(super::$name(store, clock))
                        });
                    }
                )*
            }
            #[cfg(feature = "postgres")]
            mod postgres {
                $(
                    #[test]
                    fn $name() {
                        crate::compaction::postgres::on_postgres_with(stringify!($name), |store, clock| {
                            Box::pin(super::$name(store, clock))
                        });
                    }
                )*
            }
        };
    }

    lifetime_cases!(
        a_binding_that_may_have_missed_a_dropped_delete_stops,
        bindings_that_cannot_have_missed_a_dropped_delete_go_on,
    );
}

/// A pin written before ranges recorded what compaction kept still loads:
/// a whole range.
#[test]
fn a_range_pinned_before_thinned_ranges_loads_as_whole() {
    let from = Offset::new(3, 0);
    let to = Offset::new(3, 4);
    let old = json!({"from": from.to_string(), "to": to.to_string()});
    let range: Range = serde_json::from_value(old).expect("an old pin's range");
    assert_eq!((range.len(), range.thinned), (4, None));
}

/// One step of a property case.
#[derive(Clone, Debug)]
enum Step {
    Write(Change),
    Compact,
    /// Runs both bindings with units of this many items.
    Run(usize),
}

fn step() -> impl Strategy<Value = Step> {
    const KEYS: [&str; 3] = ["a", "b", "c"];
    prop_oneof![
        6 => (0..KEYS.len(), -50i64..50).prop_map(|(k, v)| Step::Write(Change::Upsert(KEYS[k], v))),
        2 => (0..KEYS.len()).prop_map(|k| Step::Write(Change::Delete(KEYS[k]))),
        2 => Just(Step::Compact),
        2 => (1usize..4).prop_map(Step::Run),
    ]
}

/// Runs `steps` on a compacted table with a per-entry and a pinning batch
/// binding that accept compaction: after every run (and at the end) each
/// holds the rows of the full history.
async fn compacted_runs(steps: &[Step], lag: Option<u64>) {
    let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let policy = match lag {
        Some(messages) => format!("messages={messages}").parse().expect("policy"),
        None => Compaction::ON,
    };
    create_with(store.as_ref(), "compacted", Some(policy)).await;
    let host = Host::new(store.clone());
    let entries = entry_rows(true).0.at(table("compacted")).expect("bind");
    let batches = batch_rows().0.at(table("compacted")).expect("bind");
    let mut history = Vec::new();
    for step in steps.iter().chain([&Step::Run(2)]) {
        match step {
            Step::Write(change) => {
                write(store.as_ref(), "compacted", std::slice::from_ref(change)).await;
                history.push(change.clone());
            }
            Step::Compact => {
                compact(store.as_ref(), "compacted").await;
            }
            Step::Run(size) => {
                let options = RunOptions::default().with_unit_size(*size);
                host.run(&entries, options.clone()).await.expect("run");
                host.run(&batches, options).await.expect("run");
                let rows = model(&history);
                assert_eq!(host.read(&entries).await.expect("read"), rows);
                assert_eq!(host.read(&batches).await.expect("read"), rows);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn accepting_bindings_of_a_compacted_stream_hold_the_rows_of_its_history(
        steps in prop::collection::vec(step(), 0..40),
        lag in prop::option::of(1u64..4),
    ) {
        runtime().block_on(compacted_runs(&steps, lag));
    }
}
