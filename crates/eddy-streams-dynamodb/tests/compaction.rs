//! Compaction on DynamoDB: the property test of eddy-streams
//! (`compaction/history.rs`, included by path) on the embedded table and
//! (feature `aws`) on moto, and the cases this backend adds: packs
//! rewritten with holes, reads inside a compacted range, forks, and steps
//! that fail or lose a race.

use std::sync::{Arc, OnceLock};

use eddy_streams::ManualClock;
use proptest::prelude::*;

use crate::common;

#[path = "../../eddy-streams/tests/compaction/history.rs"]
#[allow(dead_code)]
mod history;
use history::{check, next_case, policy, probes, steps, Backend};

/// The store on a fresh embedded table, opened once on one runtime
/// (each case uses streams of its own).
fn embedded() -> &'static (tokio::runtime::Runtime, Backend) {
    static BACKEND: OnceLock<(tokio::runtime::Runtime, Backend)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let clock = Arc::new(ManualClock::starting_now());
        let store = common::clocked_store(&common::embedded(), &clock);
        let backend = Backend {
            name: "dynamodb (embedded)",
            store: Arc::new(store),
            clock,
        };
        (common::runtime(), backend)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// 40 cases, as on the other stores.
    #[test]
    fn compacted_streams_materialize_as_the_full_history(
        policy in policy(),
        steps in steps(),
        probes in probes(),
    ) {
        let (runtime, backend) = embedded();
        runtime.block_on(check(backend, next_case(), policy, &steps, &probes));
    }
}

/// The property test on moto: fewer cases, each a few hundred requests
/// to a server that answers one at a time.
#[cfg(feature = "aws")]
mod moto {
    use std::sync::{Arc, OnceLock};

    use eddy_streams::ManualClock;
    use proptest::prelude::*;

    use super::history::{check, next_case, policy, probes, steps, Backend};
    use crate::common;

    /// The store on a fresh moto table, or `None` when moto is skipped.
    fn on_moto() -> &'static (tokio::runtime::Runtime, Option<Backend>) {
        static BACKEND: OnceLock<(tokio::runtime::Runtime, Option<Backend>)> = OnceLock::new();
        BACKEND.get_or_init(|| {
            let runtime = common::runtime();
            let backend = runtime.block_on(common::moto()).map(|table| {
                let clock = Arc::new(ManualClock::starting_now());
                let store = common::clocked_store(&table, &clock);
                Backend {
                    name: "dynamodb (moto)",
                    store: Arc::new(store),
                    clock,
                }
            });
            (runtime, backend)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        #[test]
        fn compacted_streams_materialize_as_the_full_history_on_moto(
            policy in policy(),
            steps in steps(),
            probes in probes(),
        ) {
            let (runtime, backend) = on_moto();
            if let Some(backend) = backend {
                runtime.block_on(check(backend, next_case(), policy, &steps, &probes));
            }
        }
    }
}

mod packs {
    //! Packs with holes, reads inside a compacted range, forks, and the
    //! transaction bound of a step.

    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;

    use eddy_dynamo::{AttributeValue, Item, Table, TableError, TransactWriteItem};
    use eddy_streams::{
        Append, Compaction, Fork, Payload, ReadFrom, Storage, StreamConfig, StreamPath,
    };

    use crate::common;
    pub use crate::contract::cases::kept;

    pub fn path(s: &str) -> StreamPath {
        StreamPath::new(s).expect("path")
    }

    pub fn change(key: &str, value: u64) -> String {
        format!(
            r#"{{"type":"row","key":"{key}","value":{value},"headers":{{"operation":"upsert"}}}}"#
        )
    }

    pub async fn append(store: &dyn Storage, p: &StreamPath, changes: &[(&str, u64)]) {
        let body: Vec<String> = changes.iter().map(|(k, v)| change(k, *v)).collect();
        store
            .append(p, Append::body(format!("[{}]", body.join(","))))
            .await
            .expect("append");
    }

    pub fn positions(read: &[(u64, String)]) -> Vec<u64> {
        read.iter().map(|(p, _)| *p).collect()
    }

    /// The data partition id of the stream at `p`.
    async fn stream_id(table: &dyn Table, p: &StreamPath) -> String {
        let item = table
            .get_item(common::key(&format!("ds|s|{p}"), "-"))
            .await
            .expect("get")
            .expect("a path item");
        match item.get("id") {
            Some(AttributeValue::S(id)) => id.clone(),
            _ => panic!("a path item without id"),
        }
    }

    /// The message items of the stream at `p`, in order.
    async fn message_items(table: &dyn Table, p: &StreamPath) -> Vec<Item> {
        let id = stream_id(table, p).await;
        let query = eddy_dynamo::Query::partition(AttributeValue::S(format!("ds|d|{id}")));
        let page = table.query(query).await.expect("query");
        assert!(page.last_evaluated_key.is_none(), "one page");
        page.items
            .into_iter()
            .filter(
                |item| matches!(item.get("sk"), Some(AttributeValue::S(s)) if s.starts_with("m|")),
            )
            .collect()
    }

    /// A stream of four packs: `0..6` (k0 k1 k2 k0 k1 k3), `6..8` (k0
    /// k1), `8` (k2), `9..11` (k0 k1). A pass drops 7: the first pack
    /// keeps only 5 (rewritten), the second goes whole.
    pub async fn four_packs(store: &dyn Storage, p: &StreamPath) {
        let config = StreamConfig::json().with_compaction(Compaction::ON);
        store
            .create(p, config, Payload::empty())
            .await
            .expect("create");
        append(
            store,
            p,
            &[
                ("k0", 0),
                ("k1", 1),
                ("k2", 2),
                ("k0", 3),
                ("k1", 4),
                ("k3", 5),
            ],
        )
        .await;
        append(store, p, &[("k0", 6), ("k1", 7)]).await;
        append(store, p, &[("k2", 8)]).await;
        append(store, p, &[("k0", 9), ("k1", 10)]).await;
    }

    /// The latest of every key stays at its offset; a pack that keeps
    /// some is rewritten listing them, one that keeps none is deleted;
    /// reads at offsets inside the compacted range (in a rewritten pack,
    /// in a deleted one) return the kept messages after them, never
    /// `offset/dropped`; the byte count is the kept messages'. A fork
    /// inside the range inherits what is kept below its branch point,
    /// with its bytes, and compacts only its own messages; its source
    /// drops nothing below that point while the fork is there (nothing
    /// at all while a fork reference does not say where it branched).
    pub async fn holes_in_packs(table: Arc<dyn Table>) {
        let store =
            common::clocked_store(&table, &Arc::new(eddy_streams::ManualClock::starting_now()));
        let p = path("compacted/packs");
        four_packs(&store, &p).await;
        assert_eq!(message_items(&*table, &p).await.len(), 4);
        assert_eq!(store.compact(&p).await, Ok(7));
        let all = kept(&store, &p, ReadFrom::Beginning).await;
        assert_eq!(positions(&all), [5, 8, 9, 10]);
        assert_eq!(all[0].1, change("k3", 5));
        let info = store.head(&p).await.expect("head");
        assert_eq!(info.tail.position(), 11, "offsets never change");
        let bytes: usize = all.iter().map(|(_, m)| m.len()).sum();
        assert_eq!(info.bytes, bytes as u64);

        let items = message_items(&*table, &p).await;
        assert_eq!(items.len(), 3, "the pack that kept nothing is deleted");
        let listed: Vec<&AttributeValue> = items.iter().filter_map(|i| i.get("p")).collect();
        assert_eq!(
            listed,
            [&AttributeValue::L(vec![AttributeValue::N("5".into())])],
            "the rewritten pack lists what it keeps; the others are whole"
        );

        for (at, expected) in [
            (0, vec![5, 8, 9, 10]),
            (2, vec![5, 8, 9, 10]),
            (6, vec![8, 9, 10]),
            (7, vec![8, 9, 10]),
            (11, vec![]),
        ] {
            let from = ReadFrom::Offset(info.tail.with_position(at));
            assert_eq!(
                positions(&kept(&store, &p, from).await),
                expected,
                "from {at}"
            );
        }
        // A small page inside the range.
        let chunk = store
            .read(&p, ReadFrom::Offset(info.tail.with_position(1)), 1)
            .await
            .expect("read");
        assert_eq!(chunk.offset_of(0).position(), 5);
        assert_eq!(chunk.next_offset.position(), 6);

        // A second pass finds nothing more.
        assert_eq!(store.compact(&p).await, Ok(0));

        let fork = path("compacted/packs-fork");
        store
            .fork(&fork, Fork::of(p.clone()).at(info.tail.with_position(9)))
            .await
            .expect("fork");
        let inherited = kept(&store, &fork, ReadFrom::Beginning).await;
        assert_eq!(positions(&inherited), [5, 8]);
        let fork_info = store.head(&fork).await.expect("head");
        let bytes: usize = inherited.iter().map(|(_, m)| m.len()).sum();
        assert_eq!(
            fork_info.bytes, bytes as u64,
            "the fork counts what it inherits"
        );
        append(&store, &fork, &[("k3", 11), ("k2", 12)]).await;
        assert_eq!(
            store.compact(&fork).await,
            Ok(0),
            "its inherited messages are its source's items"
        );
        append(&store, &p, &[("k0", 11), ("k3", 12)]).await;
        assert_eq!(
            store.compact(&p).await,
            Ok(1),
            "from its fork's branch point (9) on: k0 at 9"
        );
        assert_eq!(
            positions(&kept(&store, &p, ReadFrom::Beginning).await),
            [5, 8, 10, 11, 12],
            "below it, the fork reads its items: k3 at 5 stays"
        );
        assert_eq!(
            positions(&kept(&store, &fork, ReadFrom::Beginning).await),
            [5, 8, 9, 10]
        );
        // A fork reference from before branch points were kept: the
        // source drops nothing while it is there.
        let reference = common::key(
            &format!("ds|f|{}", stream_id(&*table, &p).await),
            fork.as_str(),
        );
        table
            .put_item(eddy_dynamo::Put::new(reference))
            .await
            .expect("an old reference");
        append(&store, &p, &[("k0", 13)]).await;
        assert_eq!(
            store.compact(&p).await,
            Ok(0),
            "its branch point is not known"
        );
        store.delete(&fork).await.expect("delete the fork");
        assert_eq!(
            store.compact(&p).await,
            Ok(2),
            "without forks, all of it: k3 at 5, k0 at 11"
        );
        assert_eq!(
            positions(&kept(&store, &p, ReadFrom::Beginning).await),
            [8, 10, 12, 13]
        );
    }

    #[test]
    fn packs_have_holes_and_reads_inside_them_return_what_is_kept() {
        common::runtime().block_on(holes_in_packs(common::embedded()));
    }

    /// A read that crosses a deleted pack reads the stream's path item
    /// once more (positions no item holds could be a removal under the
    /// read); one that meets only holes inside packs, or none, does not.
    #[test]
    fn a_read_across_a_deleted_pack_checks_the_stream_once() {
        common::runtime().block_on(async {
            let table = common::embedded();
            let store =
                common::clocked_store(&table, &Arc::new(eddy_streams::ManualClock::starting_now()));
            let p = path("compacted/reads");
            four_packs(&store, &p).await;
            assert_eq!(store.compact(&p).await, Ok(7));
            let tail = store.head(&p).await.expect("head").tail;
            let reads = |from: u64| {
                let (table, store, p) = (Arc::clone(&table), &store, p.clone());
                async move {
                    let before = table.request_stats();
                    let from = ReadFrom::Offset(tail.with_position(from));
                    let chunk = store.read(&p, from, 1 << 20).await.expect("read");
                    let positions: Vec<u64> = (0..chunk.messages.len())
                        .map(|i| chunk.offset_of(i).position())
                        .collect();
                    (positions, (table.request_stats() - before).reads)
                }
            };
            // Across the deleted pack 6..8: its path item, a Query, and
            // the path item again.
            assert_eq!(reads(0).await, (vec![5, 8, 9, 10], 3));
            assert_eq!(reads(6).await, (vec![8, 9, 10], 3));
            // Inside the rewritten pack, then whole ones: no check.
            assert_eq!(reads(8).await, (vec![8, 9, 10], 2));
        });
    }

    /// A backup of a compacted stream keeps its holes, and its import on
    /// DynamoDB restores the kept messages at their positions, with the
    /// same bytes.
    #[test]
    fn a_compacted_stream_is_backed_up_and_restored_with_its_holes() {
        common::runtime().block_on(async {
            let clock = Arc::new(eddy_streams::ManualClock::starting_now());
            let store = common::clocked_store(&common::embedded(), &clock);
            let p = path("compacted/backup");
            four_packs(&store, &p).await;
            assert_eq!(store.compact(&p).await, Ok(7));
            let mut backup = Vec::new();
            eddy_streams::export(&store, "", &mut backup, &mut ())
                .await
                .expect("export");
            let restored = common::clocked_store(&common::embedded(), &clock);
            eddy_streams::import(&restored, &mut backup.as_slice(), false, &mut ())
                .await
                .expect("import");
            assert_eq!(
                kept(&restored, &p, ReadFrom::Beginning).await,
                kept(&store, &p, ReadFrom::Beginning).await
            );
            let (a, b) = (
                store.head(&p).await.expect("head"),
                restored.head(&p).await.expect("head"),
            );
            assert_eq!((a.tail.position(), a.bytes), (b.tail.position(), b.bytes));
            // The restored stream compacts on: a newer change of k3.
            append(&restored, &p, &[("k3", 11)]).await;
            assert_eq!(restored.compact(&p).await, Ok(1));
            assert_eq!(
                positions(&kept(&restored, &p, ReadFrom::Beginning).await),
                [8, 9, 10, 11]
            );
        });
    }

    /// What a counting table saw of transactions.
    #[derive(Default)]
    struct Counted {
        transactions: AtomicU64,
        most_items: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl common::Hooks for Counted {
        async fn transact_write_items(
            &self,
            table: &dyn Table,
            items: Vec<TransactWriteItem>,
        ) -> Result<(), TableError> {
            self.transactions.fetch_add(1, Ordering::SeqCst);
            self.most_items.fetch_max(items.len(), Ordering::SeqCst);
            table.transact_write_items(items).await
        }
    }

    /// 300 changes of one row, each in an item of its own: a pass drops
    /// 299 items in steps that each fit one transaction (96 items read a
    /// step: 100 less the path item, its retention entry moved and a
    /// margin), four steps and the one that ends the pass; each step
    /// reads its path item and makes two `Query`s (the pack across where
    /// the pass stopped, and one page of the items below), the last only
    /// its path item (nothing is left below).
    #[test]
    fn a_step_writes_at_most_one_transaction() {
        common::runtime().block_on(async {
            let table = common::Hooked::new(common::embedded(), Counted::default());
            let store = eddy_streams_dynamodb::open(
                Arc::clone(&table) as Arc<dyn Table>,
                eddy_streams_dynamodb::options(),
            )
            .expect("open");
            let p = path("compacted/many");
            let config = StreamConfig::json().with_compaction(Compaction::ON);
            store
                .create(&p, config, Payload::empty())
                .await
                .expect("create");
            for n in 0..300 {
                append(&store, &p, &[("k0", n)]).await;
            }
            table.hooks.transactions.store(0, Ordering::SeqCst);
            table.hooks.most_items.store(0, Ordering::SeqCst);
            let before = table.table.request_stats();
            assert_eq!(store.compact(&p).await, Ok(299));
            let reads = (table.table.request_stats() - before).reads;
            assert_eq!(
                reads,
                4 * 3 + 1,
                "a step reads its path item and makes two Querys"
            );
            let transactions = table.hooks.transactions.load(Ordering::SeqCst);
            let most = table.hooks.most_items.load(Ordering::SeqCst);
            assert!(most <= 100, "{most} items in one transaction");
            assert_eq!(
                transactions, 5,
                "299 deletes, 96 a step, and the pass's end"
            );
            assert_eq!(
                positions(&kept(&store, &p, ReadFrom::Beginning).await),
                [299]
            );
            assert_eq!(message_items(&*table.table, &p).await.len(), 1);
        });
    }
}

mod faults {
    //! Steps whose commit fails, or loses a race, change nothing.

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use eddy_dynamo::{Table, TableError, TransactWriteItem};
    use eddy_streams::{Append, ReadFrom, Storage, StreamPath};

    use super::packs::{change, four_packs, kept, path, positions};
    use crate::common;

    /// Fails the next transaction unapplied (a timeout), or first commits
    /// a rival's append to the stream (a race the step then loses).
    #[derive(Default)]
    struct Faulty {
        fail_next: AtomicBool,
        rival: Mutex<Option<(Arc<dyn Storage>, StreamPath)>>,
    }

    #[async_trait::async_trait]
    impl common::Hooks for Faulty {
        async fn transact_write_items(
            &self,
            table: &dyn Table,
            items: Vec<TransactWriteItem>,
        ) -> Result<(), TableError> {
            if self.fail_next.swap(false, Ordering::SeqCst) {
                return Err(TableError::Unavailable {
                    message: "the request timed out".into(),
                    source: None,
                });
            }
            let rival = self.rival.lock().expect("rival").take();
            if let Some((store, p)) = rival {
                store
                    .append(&p, Append::body(change("k3", 99)))
                    .await
                    .expect("the rival's append");
            }
            table.transact_write_items(items).await
        }
    }

    fn faulty_store() -> (
        Arc<common::Hooked<Faulty>>,
        eddy_streams_dynamodb::DynamoStorage,
    ) {
        let table = common::Hooked::new(common::embedded(), Faulty::default());
        let store = eddy_streams_dynamodb::open(
            Arc::clone(&table) as Arc<dyn Table>,
            eddy_streams_dynamodb::options(),
        )
        .expect("open");
        (table, store)
    }

    /// A step whose transaction fails (not applied) fails the pass and
    /// drops nothing: the stream reads as before, with its bytes; the
    /// next pass drops what it should, once.
    #[test]
    fn a_step_that_fails_drops_nothing() {
        common::runtime().block_on(async {
            let (table, store) = faulty_store();
            let p = path("faulty/failed");
            four_packs(&store, &p).await;
            let before = kept(&store, &p, ReadFrom::Beginning).await;
            let bytes = store.head(&p).await.expect("head").bytes;
            table.hooks.fail_next.store(true, Ordering::SeqCst);
            let failed = store.compact(&p).await.expect_err("the step failed");
            assert_eq!(failed.code(), "storage-failure", "{failed}");
            assert_eq!(kept(&store, &p, ReadFrom::Beginning).await, before);
            assert_eq!(store.head(&p).await.expect("head").bytes, bytes);
            assert_eq!(store.compact(&p).await, Ok(7));
            assert_eq!(
                positions(&kept(&store, &p, ReadFrom::Beginning).await),
                [5, 8, 9, 10]
            );
        });
    }

    /// A step that lost a race to an append (the stream's path item
    /// changed under it) writes nothing and runs again on the new state:
    /// the append stays, everything superseded goes once, and the byte
    /// count is exact.
    #[test]
    fn a_step_that_lost_a_race_runs_again() {
        common::runtime().block_on(async {
            let (table, store) = faulty_store();
            let p = path("faulty/raced");
            four_packs(&store, &p).await;
            let rival = eddy_streams_dynamodb::open(
                Arc::clone(&table.table),
                eddy_streams_dynamodb::options(),
            )
            .expect("open");
            *table.hooks.rival.lock().expect("rival") = Some((Arc::new(rival), p.clone()));
            // k3's change at 5 is superseded by the rival's at 11.
            assert_eq!(store.compact(&p).await, Ok(8));
            let after = kept(&store, &p, ReadFrom::Beginning).await;
            assert_eq!(positions(&after), [8, 9, 10, 11]);
            assert_eq!(after[3].1, change("k3", 99));
            let bytes: usize = after.iter().map(|(_, m)| m.len()).sum();
            assert_eq!(store.head(&p).await.expect("head").bytes, bytes as u64);
        });
    }
}

#[cfg(feature = "aws")]
mod moto_packs {
    use crate::common;

    #[test]
    fn packs_have_holes_and_reads_inside_them_return_what_is_kept_on_moto() {
        common::runtime().block_on(async {
            if let Some(table) = common::moto().await {
                super::packs::holes_in_packs(table).await;
            }
        });
    }
}
