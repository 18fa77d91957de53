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
        "storage-failure"
    );
}
