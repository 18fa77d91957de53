//! Tombstones: a removed row's key keeps its checkpoints and revision;
//! every entity read treats it as absent, and `create` writes over it.

use eddy_dynamo::{
    n, s, AttributeValue, Item, Put, SortCondition, TransactWriteItem, ENTITY_ATTRIBUTE,
    REVISION_NAME_ATTRIBUTE,
};

use crate::backend_tests;
use crate::common::{key, summaries, OrderSummary, TestTable};

fn summary(order_id: &str, customer: &str) -> OrderSummary {
    OrderSummary {
        order_id: order_id.into(),
        customer: customer.into(),
        lines: 1,
        total_cents: 100,
        cancelled: false,
    }
}

/// What removing row `order_id` leaves, as the projection writes it: the
/// key, the marker, the checkpoints and the revision.
fn tombstone(t: &TestTable, order_id: &str, revision: u64) -> Item {
    let mut item = summaries(t).key(&key(order_id)).unwrap();
    item.insert(ENTITY_ATTRIBUTE.into(), s("OrderSummary#tombstone"));
    let checkpoints = Item::from([("order#orderId=o-1".to_owned(), n(7))]);
    item.insert("checkpoints".into(), AttributeValue::M(checkpoints));
    item.insert("revision".into(), n(revision));
    item.insert(REVISION_NAME_ATTRIBUTE.into(), s("revision"));
    item
}

/// Every entity read path reports a tombstone as absent, and its index
/// entries went with the row it replaced.
async fn every_read_treats_a_tombstone_as_absent(t: TestTable) {
    let rows = summaries(&t);
    rows.put(&summary("o-1", "ada")).await.unwrap();
    rows.put(&summary("o-2", "ada")).await.unwrap();
    assert_eq!(
        rows.query_index("gsi1", &serde_json::json!({ "customer": "ada" }), None)
            .await
            .unwrap()
            .len(),
        2
    );
    t.table
        .put_item(Put::new(tombstone(&t, "o-1", 4)))
        .await
        .unwrap();

    assert_eq!(rows.get(&key("o-1")).await.unwrap(), None);
    assert!(rows.get_item(&key("o-1")).await.unwrap().is_none());
    let both = [key("o-1"), key("o-2")];
    let batch = rows.batch_get(&both).await.unwrap();
    assert_eq!(batch, vec![summary("o-2", "ada")]);
    let snapshot = rows.transact_get(&both).await.unwrap();
    assert_eq!(snapshot, vec![None, Some(summary("o-2", "ada"))]);
    let partition = rows.query(&key("o-1"), None).await.unwrap();
    assert!(partition.is_empty(), "a query filters the tombstone out");
    let begins = SortCondition::BeginsWith(s("OrderSummary"));
    assert!(rows
        .query(&key("o-1"), Some(begins))
        .await
        .unwrap()
        .is_empty());
    let indexed = rows
        .query_index("gsi1", &serde_json::json!({ "customer": "ada" }), None)
        .await
        .unwrap();
    assert_eq!(
        indexed,
        vec![summary("o-2", "ada")],
        "the tombstone carries no index key"
    );
    // The raw item is still there: the key keeps its checkpoints.
    let raw = t
        .table
        .get_item(rows.key(&key("o-1")).unwrap())
        .await
        .unwrap();
    assert!(rows.is_tombstone(&raw.unwrap()));
}

/// `create` writes over a tombstone, carrying its checkpoints with the
/// revision one higher; over a live row it still fails.
async fn create_writes_over_a_tombstone_carrying_its_checkpoints(t: TestTable) {
    let rows = summaries(&t);
    t.table
        .put_item(Put::new(tombstone(&t, "o-1", 4)))
        .await
        .unwrap();
    rows.create(&summary("o-1", "bob")).await.unwrap();
    assert_eq!(
        rows.get(&key("o-1")).await.unwrap(),
        Some(summary("o-1", "bob"))
    );
    let raw = t
        .table
        .get_item(rows.key(&key("o-1")).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw["revision"], n(5));
    assert_eq!(raw["checkpoints"], tombstone(&t, "o-1", 4)["checkpoints"]);
    assert!(!raw.contains_key(REVISION_NAME_ATTRIBUTE));
    assert!(rows.owns(&raw));

    let again = rows.create(&summary("o-1", "eve")).await.unwrap_err();
    assert_eq!(again.code(), "ConditionalCheckFailed");
    assert_eq!(
        rows.get(&key("o-1")).await.unwrap(),
        Some(summary("o-1", "bob"))
    );
}

/// In a transaction, the create read from the key writes over the
/// tombstone; if the tombstone moved meanwhile, the transaction is
/// cancelled and nothing is written.
async fn a_transactional_create_over_a_tombstone_is_guarded(t: TestTable) {
    let rows = summaries(&t);
    t.table
        .put_item(Put::new(tombstone(&t, "o-1", 4)))
        .await
        .unwrap();
    let read = t
        .table
        .get_item(rows.key(&key("o-1")).unwrap())
        .await
        .unwrap();
    let create = rows
        .create_request_over(&summary("o-1", "bob"), read.as_ref())
        .unwrap();
    let other = rows.put_request(&summary("o-9", "bob")).unwrap();

    // A redelivery moved the tombstone's revision: the create is refused.
    t.table
        .put_item(Put::new(tombstone(&t, "o-1", 5)))
        .await
        .unwrap();
    let items = vec![
        TransactWriteItem::from(create.clone()),
        other.clone().into(),
    ];
    let refused = t.table.transact_write_items(items).await.unwrap_err();
    assert_eq!(refused.code(), "TransactionCanceled");
    assert_eq!(rows.get(&key("o-9")).await.unwrap(), None);

    let read = t
        .table
        .get_item(rows.key(&key("o-1")).unwrap())
        .await
        .unwrap();
    let create = rows
        .create_request_over(&summary("o-1", "bob"), read.as_ref())
        .unwrap();
    let items = vec![TransactWriteItem::from(create), other.into()];
    t.table.transact_write_items(items).await.unwrap();
    let raw = t
        .table
        .get_item(rows.key(&key("o-1")).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw["revision"], n(6));
    assert_eq!(
        rows.get(&key("o-9")).await.unwrap(),
        Some(summary("o-9", "bob"))
    );
}

/// Regression (issue 25): `update` took a tombstone for the row, modified
/// it and then failed to decode it (the tombstone changed on the way); and
/// `delete` removed it, checkpoints and all, so a replayed event made the
/// removed row again. Now both treat a tombstone as absent: `update` fails
/// as on a missing row and `delete` leaves the tombstone, its checkpoints
/// kept.
async fn update_and_delete_treat_a_tombstone_as_absent(t: TestTable) {
    let rows = summaries(&t);
    let stone = tombstone(&t, "o-1", 4);
    t.table.put_item(Put::new(stone.clone())).await.unwrap();
    let raw = || async {
        t.table
            .get_item(rows.key(&key("o-1")).unwrap())
            .await
            .unwrap()
    };

    let update = eddy_dynamo::Update::new().set("lines", n(9));
    let refused = rows.update(&key("o-1"), update.clone()).await.unwrap_err();
    assert_eq!(refused.code(), "ConditionalCheckFailed", "{refused}");
    assert!(
        eddy_dynamo::items_equal(&raw().await.unwrap(), &stone),
        "the tombstone is unchanged"
    );

    rows.delete(&key("o-1")).await.unwrap();
    assert!(
        eddy_dynamo::items_equal(&raw().await.unwrap(), &stone),
        "the tombstone and its checkpoints stay"
    );

    // A live row is still updated and deleted.
    rows.put(&summary("o-2", "ann")).await.unwrap();
    let updated = rows.update(&key("o-2"), update).await.unwrap();
    assert_eq!(updated.lines, 9);
    rows.delete(&key("o-2")).await.unwrap();
    assert_eq!(rows.get(&key("o-2")).await.unwrap(), None);
}

backend_tests!(
    update_and_delete_treat_a_tombstone_as_absent,
    every_read_treats_a_tombstone_as_absent,
    create_writes_over_a_tombstone_carrying_its_checkpoints,
    a_transactional_create_over_a_tombstone_is_guarded,
);
