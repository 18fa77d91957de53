//! The contract on the embedded tables, plus what only they offer (TTL
//! sweeps, reopening a SQLite file).

use eddy_dynamo::{n, s, ChangeFeed, EmbeddedTable, FeedPosition, Put, Table};

use crate::contract::schema;

macro_rules! cases {
    ($make:expr) => {
        $crate::contract_tests!(
            $make,
            put_get_round_trips_every_type,
            conditional_put_fails_and_returns_the_item,
            keys_over_dynamodbs_sizes_are_refused,
            condition_tree_is_evaluated,
            update_sets_removes_and_adds,
            conditional_delete,
            transaction_is_all_or_nothing_with_reasons,
            transaction_holds_at_most_100_items,
            transaction_refuses_two_operations_on_one_item,
            items_over_400_kb_are_refused,
            items_are_sized_as_dynamodb_sizes_them,
            transactions_over_4_mb_are_refused,
            updates_that_make_a_transaction_over_4_mb_are_refused,
            keys_are_validated,
            index_membership_is_sparse,
            query_sort_conditions_direction_and_paging,
            batch_and_transactional_get,
            change_feed_records_real_changes_in_order,
            null_attributes_exist_but_read_as_absent,
            attribute_type_tests_the_stored_type,
            sort_key_ranges_on_strings_and_numbers,
            descending_queries_with_limits_page_backward,
            paging_through_an_index_partition_returns_each_item_once,
            a_scan_pages_through_every_item_once,
        );
    };
}

mod memory {
    use super::*;
    cases!(Box::new(EmbeddedTable::memory(schema())));
}

mod sqlite {
    use super::*;
    cases!(SqliteTable::new());

    /// A SQLite table in a temporary directory that lives as long as it does.
    pub struct SqliteTable {
        table: EmbeddedTable,
        _dir: tempfile::TempDir,
    }

    impl SqliteTable {
        pub fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let table = EmbeddedTable::open_sqlite(dir.path().join("table.db"), schema()).unwrap();
            Self { table, _dir: dir }
        }
    }

    impl std::ops::Deref for SqliteTable {
        type Target = EmbeddedTable;
        fn deref(&self) -> &EmbeddedTable {
            &self.table
        }
    }
}

fn item(pk: &str, attrs: &[(&str, eddy_dynamo::AttributeValue)]) -> eddy_dynamo::Item {
    let mut item = eddy_dynamo::Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("-"))]);
    for (k, v) in attrs {
        item.insert((*k).to_owned(), v.clone());
    }
    item
}

#[tokio::test]
async fn ttl_sweep_removes_expired_items_as_the_service() {
    let table = EmbeddedTable::memory(schema());
    table
        .put_item(Put::new(item("old", &[("expires", n(100))])))
        .await
        .unwrap();
    table
        .put_item(Put::new(item("new", &[("expires", n(300))])))
        .await
        .unwrap();
    table.put_item(Put::new(item("none", &[]))).await.unwrap();
    assert_eq!(table.expire_items(200).await.unwrap(), 1);
    let key =
        |pk: &str| eddy_dynamo::Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("-"))]);
    assert_eq!(table.get_item(key("old")).await.unwrap(), None);
    assert!(table.get_item(key("new")).await.unwrap().is_some());
    let records = table.read_changes(None, 100).await.unwrap().into_records();
    let last = records.last().unwrap();
    assert_eq!(last.event_name, "REMOVE");
    let identity = last.user_identity.as_ref().unwrap();
    assert_eq!(
        (identity.type_.as_str(), identity.principal_id.as_str()),
        ("Service", "dynamodb.amazonaws.com")
    );
}

/// A sweep over more items than one of its steps holds (and over another
/// table of the same file, which it leaves alone) removes exactly the
/// expired items of its table, on both backends.
async fn a_sweep_of_many_steps_removes_exactly_the_expired(table: EmbeddedTable) {
    let other = table
        .open_table(eddy_dynamo::TableSchema::single_table("other").with_ttl("expires"))
        .await
        .unwrap();
    for chunk in 0..7 {
        let puts: Vec<eddy_dynamo::TransactWriteItem> = (0..100)
            .map(|i| {
                let at = chunk * 100 + i;
                let expires = if at % 3 == 0 { 100 } else { 900 };
                Put::new(item(&format!("i{at:03}"), &[("expires", n(expires))])).into()
            })
            .collect();
        table.transact_write_items(puts).await.unwrap();
    }
    other
        .put_item(Put::new(item("o", &[("expires", n(1))])))
        .await
        .unwrap();
    assert_eq!(table.expire_items(500).await.unwrap(), 234);
    assert_eq!(table.expire_items(500).await.unwrap(), 0);
    let key =
        |pk: &str| eddy_dynamo::Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("-"))]);
    assert_eq!(table.get_item(key("i000")).await.unwrap(), None);
    assert!(table.get_item(key("i001")).await.unwrap().is_some());
    assert!(
        table.get_item(key("i699")).await.unwrap().is_none(),
        "699 = 3 × 233"
    );
    assert!(
        other.get_item(key("o")).await.unwrap().is_some(),
        "another table's sweep is its own"
    );
}

#[tokio::test]
async fn a_sweep_of_many_steps_removes_exactly_the_expired_on_memory() {
    a_sweep_of_many_steps_removes_exactly_the_expired(EmbeddedTable::memory(schema())).await;
}

#[tokio::test]
async fn a_sweep_of_many_steps_removes_exactly_the_expired_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let table = EmbeddedTable::open_sqlite(dir.path().join("sweep.db"), schema()).unwrap();
    a_sweep_of_many_steps_removes_exactly_the_expired(table).await;
}

#[tokio::test]
async fn sqlite_table_keeps_items_feed_and_checkpoints_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    {
        let table = EmbeddedTable::open_sqlite(&path, schema()).unwrap();
        table
            .put_item(Put::new(item(
                "a",
                &[("gsi1pk", s("g")), ("gsi1sk", s("1"))],
            )))
            .await
            .unwrap();
        table.put_item(Put::new(item("c", &[]))).await.unwrap();
        table
            .save_checkpoint("follower", first_done(&table).await.as_ref().unwrap())
            .await
            .unwrap();
    }
    let table = EmbeddedTable::open_sqlite(&path, schema()).unwrap();
    let page = table
        .query(eddy_dynamo::Query::partition(s("g")).on_index("gsi1"))
        .await
        .unwrap();
    assert_eq!(
        page.items,
        vec![item("a", &[("gsi1pk", s("g")), ("gsi1sk", s("1"))])]
    );
    let kept = table.read_changes(None, 10).await.unwrap().into_records();
    assert_eq!(
        kept.len(),
        1,
        "the record the only follower passed is trimmed, the other kept"
    );
    assert_eq!(
        table
            .load_checkpoint("follower")
            .await
            .unwrap()
            .map(|p| p.to_string()),
        Some(r#"{"feed":"embedded","after":1}"#.to_owned())
    );
    table.put_item(Put::new(item("b", &[]))).await.unwrap();
    let seqs: Vec<_> = table
        .read_changes(None, 10)
        .await
        .unwrap()
        .into_records()
        .into_iter()
        .map(|r| r.change.sequence_number)
        .collect();
    assert_eq!(seqs.len(), 2);
    assert!(seqs[0] < seqs[1]);
    assert_eq!(seqs[0].as_deref(), Some("000000000000000000002"));
    drop(table);
    let other = eddy_dynamo::TableSchema::single_table("other");
    assert_eq!(
        EmbeddedTable::open_sqlite(&path, other).unwrap_err().code(),
        "table/misconfigured"
    );
}

/// Regression (condition checked outside the write transaction): the
/// embedded engine evaluated conditions before `BEGIN IMMEDIATE`, so two
/// handles on one SQLite file could both pass a version check and overwrite
/// each other's event. Two handles now serialise their writers: each
/// version of the stream has exactly one winner, and every append that
/// reported success is stored as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_on_one_sqlite_file_never_overwrite_each_other() {
    use crate::common::{orders, schema, OrderEvent, TestTable};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.db");
    let handles: Vec<TestTable> = (0..2)
        .map(|_| EmbeddedTable::open_sqlite(&path, schema()).unwrap().into())
        .collect();
    let mut tasks = Vec::new();
    for (h, t) in handles.iter().enumerate() {
        for w in 0..3 {
            let stream = orders(t);
            tasks.push(tokio::spawn(async move {
                let id = stream.id([("orderId", "o-1")]).unwrap();
                let mut written = Vec::new();
                for n in 0..8 {
                    let tag = format!("{h}-{w}-{n}");
                    let sku = tag.clone();
                    let version = stream
                        .handle(&id, 1000, move |_| {
                            Ok::<_, String>(vec![OrderEvent::LineAdded {
                                sku: sku.clone(),
                                qty: 1,
                                cents: 1,
                            }])
                        })
                        .await
                        .unwrap();
                    written.push((version, tag));
                }
                written
            }));
        }
    }
    let mut written = Vec::new();
    for task in tasks {
        written.extend(task.await.unwrap());
    }
    let stream = orders(&handles[0]);
    let id = stream.id([("orderId", "o-1")]).unwrap();
    let events = stream.read(&id).await.unwrap();
    assert_eq!(events.len(), 48);
    assert!(events
        .iter()
        .enumerate()
        .all(|(i, e)| e.version == i as u64 + 1));
    for (version, tag) in written {
        match &events[version as usize - 1].event {
            OrderEvent::LineAdded { sku, .. } => assert_eq!(sku, &tag, "version {version}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    let records = handles[1]
        .read_changes(None, 1000)
        .await
        .unwrap()
        .into_records();
    let inserts = records.iter().filter(|r| r.event_name == "INSERT").count();
    assert_eq!(
        (records.len(), inserts),
        (48, 48),
        "one record per event, none overwritten"
    );
}

/// Reopening a SQLite table whose schema gained an index creates the index
/// and backfills it from the stored items; dropping it from the schema
/// removes it.
#[tokio::test]
async fn reopening_a_sqlite_table_with_an_added_index_backfills_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let narrow = eddy_dynamo::TableSchema::single_table("backfill");
    {
        let table = EmbeddedTable::open_sqlite(&path, narrow.clone()).unwrap();
        for item in crate::contract::index_backfill_items() {
            table.put_item(Put::new(item)).await.unwrap();
        }
    }
    let wide = narrow
        .clone()
        .with_index("byOwner", "ownerpk", Some("ownersk"));
    let table = EmbeddedTable::open_sqlite(&path, wide.clone()).unwrap();
    crate::contract::the_added_index_covers_the_items(&table).await;
    drop(table);

    let table = EmbeddedTable::open_sqlite(&path, narrow).unwrap();
    let query = eddy_dynamo::Query::partition(s("ann")).on_index("byOwner");
    assert_eq!(
        table.query(query.clone()).await.unwrap_err().code(),
        "ValidationException"
    );
    drop(table);
    let table = EmbeddedTable::open_sqlite(&path, wide).unwrap();
    assert_eq!(table.query(query).await.unwrap().items.len(), 2);
}

/// A file written by the first layout (no version, numbers in keys stored
/// in an order-less encoding, no index sort keys) is upgraded on open: its
/// items, records and checkpoints are kept and its number keys sort.
#[tokio::test]
async fn a_layout_1_file_is_upgraded_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let record = {
        let scratch = EmbeddedTable::memory(schema());
        scratch.put_item(Put::new(item("r", &[]))).await.unwrap();
        scratch
            .read_changes(None, 1)
            .await
            .unwrap()
            .into_records()
            .remove(0)
    };
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
             CREATE TABLE items (pk TEXT NOT NULL, sk TEXT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (pk, sk)) WITHOUT ROWID;
             CREATE TABLE index_entries (idx TEXT NOT NULL, ipk TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL, PRIMARY KEY (idx, ipk, pk, sk)) WITHOUT ROWID;
             CREATE INDEX index_entries_by_item ON index_entries (pk, sk);
             CREATE TABLE changes (seq INTEGER PRIMARY KEY, record TEXT NOT NULL);
             CREATE TABLE checkpoints (consumer TEXT PRIMARY KEY, seq TEXT NOT NULL) WITHOUT ROWID;",
        )
        .unwrap();
        let put = |sql: &str, args: &[&dyn rusqlite::ToSql]| {
            conn.execute(sql, args).unwrap();
        };
        put(
            "INSERT INTO meta VALUES ('schema', ?1)",
            &[&serde_json::to_string(&schema()).unwrap()],
        );
        for (pk, number) in [("a", "10"), ("b", "9"), ("c", "-1.5")] {
            let value = item(pk, &[("gsi2pk", s("n")), ("gsi2sk", n(number))]);
            let text = serde_json::to_string(&value).unwrap();
            put(
                "INSERT INTO items VALUES (?1, 'S-', ?2)",
                &[&format!("S{pk}"), &text],
            );
            put(
                "INSERT INTO index_entries VALUES ('gsi2', 'Sn', ?1, 'S-')",
                &[&format!("S{pk}")],
            );
        }
        put(
            "INSERT INTO changes VALUES (1, ?1)",
            &[&serde_json::to_string(&record).unwrap()],
        );
        put(
            "INSERT INTO changes VALUES (2, ?1)",
            &[&serde_json::to_string(&record).unwrap()],
        );
        put(
            "INSERT INTO checkpoints VALUES ('f', '000000000000000000001')",
            &[],
        );
    }
    let table = EmbeddedTable::open_sqlite(&path, schema()).unwrap();
    let page = table
        .query(eddy_dynamo::Query::partition(s("n")).on_index("gsi2"))
        .await
        .unwrap();
    let numbers: Vec<_> = page.items.iter().map(|i| i["gsi2sk"].clone()).collect();
    assert_eq!(numbers, [n("-1.5"), n(9), n(10)]);
    assert_eq!(
        table
            .load_checkpoint("f")
            .await
            .unwrap()
            .map(|p| p.to_string()),
        Some(r#"{"feed":"embedded","after":1}"#.to_owned())
    );
    let saved = table.load_checkpoint("f").await.unwrap();
    let after = table.read_changes(saved.as_ref(), 10).await.unwrap();
    assert_eq!(after.len(), 1);
    table.put_item(Put::new(item("d", &[]))).await.unwrap();
    let last = table.read_changes(None, 10).await.unwrap().into_records();
    assert_eq!(
        last.last().unwrap().change.sequence_number.as_deref(),
        Some("000000000000000000003"),
        "sequence numbers continue"
    );
}

/// The change log is bounded: records every follower has passed are
/// trimmed as it saves its checkpoint, so following a busy table keeps the
/// log at the records not yet processed.
#[tokio::test]
async fn the_change_log_stays_bounded_while_followers_keep_up() {
    use crate::common::{orders, placed, summary_projection, TestTable};
    for t in [crate::common::table(), crate::common::sqlite_table()] {
        let stream = orders(&t);
        let p = summary_projection(&t, false);
        let follower = eddy_dynamo::Follower::new(t.clone(), "summaries");
        let projections = [&p as &dyn eddy_dynamo::BatchProjection];
        for round in 0..30 {
            let id = stream.id([("orderId", format!("o-{round}"))]).unwrap();
            stream.append(&id, &[placed("ann")], 0).await.unwrap();
            follower.catch_up(&projections).await.unwrap();
            let kept = t.read_changes(None, 10_000).await.unwrap().into_records();
            // At most the row write of the last batch, read on the next poll.
            assert!(
                kept.len() <= 1,
                "{}: round {round} keeps {}",
                t.backend,
                kept.len()
            );
        }
        let last: TestTable = t.clone();
        let checkpoint = follower.checkpoint().await.unwrap().unwrap();
        let after: serde_json::Value = serde_json::to_value(&checkpoint).unwrap();
        assert!(
            after["after"].as_u64() >= Some(59),
            "{}: {checkpoint}",
            last.backend
        );
    }
}

/// Records older than the retention window are trimmed even when a
/// follower still needs them; that follower then gets `history-unavailable`
/// (as a DynamoDB Streams reader gets `TrimmedDataAccessException`), while
/// a new follower starts at what is left.
#[tokio::test]
async fn records_past_the_retention_window_are_trimmed() {
    for backend in ["memory", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let table = match backend {
            "memory" => EmbeddedTable::memory(schema()),
            _ => EmbeddedTable::open_sqlite(dir.path().join("t.db"), schema()).unwrap(),
        }
        .with_feed_retention(std::time::Duration::from_secs(3600));
        for pk in ["a", "b", "c"] {
            table.put_item(Put::new(item(pk, &[]))).await.unwrap();
        }
        table
            .save_checkpoint("slow", first_done(&table).await.as_ref().unwrap())
            .await
            .unwrap();
        assert_eq!(
            table
                .read_changes(None, 10)
                .await
                .unwrap()
                .into_records()
                .len(),
            2
        );
        table
            .trim_changes(chrono::Utc::now() + chrono::Duration::hours(2))
            .await
            .unwrap();
        let saved = table.load_checkpoint("slow").await.unwrap();
        let err = table.read_changes(saved.as_ref(), 10).await.unwrap_err();
        assert_eq!(err.code(), "history-unavailable", "{backend}");
        assert!(table
            .read_changes(None, 10)
            .await
            .unwrap()
            .into_records()
            .is_empty());
        table.put_item(Put::new(item("d", &[]))).await.unwrap();
        let fresh = table.read_changes(None, 10).await.unwrap().into_records();
        assert_eq!(
            fresh[0].change.sequence_number.as_deref(),
            Some("000000000000000000004"),
            "{backend}"
        );
    }
}

/// The position after the first record of `table`'s feed.
async fn first_done(table: &EmbeddedTable) -> Option<FeedPosition> {
    let read = table.read_changes(None, 1).await.unwrap();
    read.position_after(0).cloned()
}
