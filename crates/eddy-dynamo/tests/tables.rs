//! Several tables of one database written in one transaction: the embedded
//! table's `open_table` (memory, SQLite) and DynamoDB's (moto), through
//! `Table::transact_write_tables`.

use std::sync::Arc;

use eddy_dynamo::{
    s, Condition, EmbeddedTable, Put, Query, Table, TableError, TableSchema, TableWrite,
};

use crate::common::TestTable;

/// A table and another one beside it, in one database.
pub struct Pair {
    pub first: TestTable,
    pub second: Arc<dyn Table>,
}

/// The second table's layout: the single-table key and a sparse index.
pub fn second_schema(name: &str) -> TableSchema {
    TableSchema::single_table(name).with_index("pending", "opk", Some("osk"))
}

pub async fn memory_pair() -> Pair {
    let t = EmbeddedTable::memory(crate::common::schema());
    let second = t.open_table(second_schema("outbox")).await.unwrap();
    Pair {
        first: TestTable::new(Arc::new(t.clone()), Arc::new(t), "memory"),
        second: Arc::new(second),
    }
}

pub async fn sqlite_pair() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let t =
        EmbeddedTable::open_sqlite(dir.path().join("db.sqlite"), crate::common::schema()).unwrap();
    let second = t.open_table(second_schema("outbox")).await.unwrap();
    Pair {
        first: TestTable::new(Arc::new(t.clone()), Arc::new(t), "sqlite").keeping(dir),
        second: Arc::new(second),
    }
}

#[cfg(feature = "aws")]
pub async fn moto_pair() -> Option<Pair> {
    let moto = crate::moto::MotoTable::create(crate::common::schema()).await?;
    let endpoint = crate::moto::endpoint()?;
    let options = crate::moto::options(&endpoint);
    let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await.unwrap());
    let schema = second_schema(&crate::moto::unique("outbox"));
    eddy_dynamo::create_table(&client, &schema).await.unwrap();
    let second = moto.table.open_table(schema).await.unwrap();
    Some(Pair {
        first: TestTable::new(moto.clone(), moto, "dynamodb"),
        second: Arc::new(second),
    })
}

/// Runs each `async fn case(p: Pair)` on memory, SQLite and moto.
#[macro_export]
macro_rules! pair_tests {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::tables::memory_pair().await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::tables::sqlite_pair().await).await;
                }
            )*
        }
        #[cfg(feature = "aws")]
        mod dynamodb {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(p) = $crate::tables::moto_pair().await else { return };
                    super::$case(p).await;
                }
            )*
        }
    };
}

fn item(pk: &str, extra: &[(&str, &str)]) -> eddy_dynamo::Item {
    let mut item = eddy_dynamo::Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("x"))]);
    for (k, v) in extra {
        item.insert((*k).to_owned(), s(*v));
    }
    item
}

fn key(pk: &str) -> eddy_dynamo::Item {
    item(pk, &[])
}

/// One transaction writes both tables, or neither; the same key in both
/// tables names two items; the second table's sparse index is its own.
async fn one_transaction_spans_two_tables(p: Pair) {
    let (first, second) = (p.first.table.clone(), p.second.clone());
    let (a, b) = (first.schema().name.clone(), second.schema().name.clone());
    first
        .transact_write_tables(vec![
            TableWrite::new(&a, Put::new(item("k", &[("in", "first")]))),
            TableWrite::new(
                &b,
                Put::new(item("k", &[("in", "second"), ("opk", "p"), ("osk", "1")])),
            ),
        ])
        .await
        .unwrap();
    let got = |t: Arc<dyn Table>| async move { t.get_item(key("k")).await.unwrap().unwrap() };
    assert_eq!(got(first.clone()).await["in"], s("first"));
    assert_eq!(got(second.clone()).await["in"], s("second"));

    // A failed condition on the second table's item cancels the first's.
    let refused = second
        .transact_write_tables(vec![
            TableWrite::new(&a, Put::new(item("k2", &[]))),
            TableWrite::new(
                &b,
                Put::new(item("k", &[])).when(Condition::not_exists("pk")),
            ),
        ])
        .await
        .unwrap_err();
    let TableError::TransactionCanceled { reasons } = refused else {
        panic!("expected a cancellation, got {refused:?}");
    };
    assert_eq!(reasons[1].code, "ConditionalCheckFailed");
    assert!(first.get_item(key("k2")).await.unwrap().is_none());

    let pending = second
        .query(Query::partition(s("p")).on_index("pending"))
        .await
        .unwrap();
    assert_eq!(pending.items.len(), 1);
    let first_index = first
        .query(Query::partition(s("p")).on_index("gsi1"))
        .await
        .unwrap();
    assert!(first_index.items.is_empty());
    // Another table's changes stay out of the first table's feed.
    let records = p
        .first
        .feed
        .read_changes(None, 100)
        .await
        .unwrap()
        .into_records();
    assert_eq!(
        records.len(),
        1,
        "only the first table's put is in its feed"
    );

    // An unknown table is a configuration error, and nothing is written.
    let unknown = first
        .transact_write_tables(vec![TableWrite::new("nowhere", Put::new(key("z")))])
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "table/misconfigured");
}

pair_tests!(one_transaction_spans_two_tables);

/// A second table keeps the schema it was created with: reopening it with
/// other indexes is refused, as its index would lack the items before.
#[tokio::test]
async fn a_second_table_keeps_its_schema_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.sqlite");
    let t = EmbeddedTable::open_sqlite(&path, crate::common::schema()).unwrap();
    t.open_table(second_schema("outbox")).await.unwrap();
    drop(t);
    let t = EmbeddedTable::open_sqlite(&path, crate::common::schema()).unwrap();
    t.open_table(second_schema("outbox")).await.unwrap();
    let other = TableSchema::single_table("outbox");
    let refused = t.open_table(other).await.unwrap_err();
    assert_eq!(refused.code(), "table/misconfigured");
}
