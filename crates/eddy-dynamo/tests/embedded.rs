//! The contract on the embedded tables, plus what only they offer (TTL
//! sweeps, reopening a SQLite file).

use eddy_dynamo::{n, s, ChangeFeed, EmbeddedTable, Put, Table};

use crate::contract::schema;

macro_rules! cases {
    ($make:expr) => {
        $crate::contract_tests!(
            $make,
            put_get_round_trips_every_type,
            conditional_put_fails_and_returns_the_item,
            condition_tree_is_evaluated,
            update_sets_removes_and_adds,
            conditional_delete,
            transaction_is_all_or_nothing_with_reasons,
            transaction_holds_at_most_100_items,
            transaction_refuses_two_operations_on_one_item,
            items_over_400_kb_are_refused,
            keys_are_validated,
            index_membership_is_sparse,
            query_sort_conditions_direction_and_paging,
            batch_and_transactional_get,
            change_feed_records_real_changes_in_order,
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
    let records = table.read_changes(None, 100).await.unwrap();
    let last = records.last().unwrap();
    assert_eq!(last.event_name, "REMOVE");
    let identity = last.user_identity.as_ref().unwrap();
    assert_eq!(
        (identity.type_.as_str(), identity.principal_id.as_str()),
        ("Service", "dynamodb.amazonaws.com")
    );
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
        table
            .save_checkpoint("follower", "000000000000000000001")
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
    assert_eq!(table.read_changes(None, 10).await.unwrap().len(), 1);
    assert_eq!(
        table.load_checkpoint("follower").await.unwrap().as_deref(),
        Some("000000000000000000001")
    );
    table.put_item(Put::new(item("b", &[]))).await.unwrap();
    let seqs: Vec<_> = table
        .read_changes(None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.change.sequence_number)
        .collect();
    assert_eq!(seqs.len(), 2);
    assert!(seqs[0] < seqs[1]);
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
    let records = handles[1].read_changes(None, 1000).await.unwrap();
    let inserts = records.iter().filter(|r| r.event_name == "INSERT").count();
    assert_eq!(
        (records.len(), inserts),
        (48, 48),
        "one record per event, none overwritten"
    );
}
