//! Entities: key format, create/get/update/delete, queries, index keys.

use eddy_dynamo::{n, s, Table, Update, ENTITY_ATTRIBUTE};
use serde_json::json;

use crate::common::{key, summaries, table, OrderSummary, TestTable};

fn summary(id: &str, customer: &str) -> OrderSummary {
    OrderSummary {
        order_id: id.into(),
        customer: customer.into(),
        lines: 0,
        total_cents: 0,
        cancelled: false,
    }
}

pub async fn keys_follow_the_documented_format(t: TestTable) {
    let e = summaries(&t);
    let key = e.key(&key("o#1")).unwrap();
    assert_eq!(key["pk"], s("shop#v1#OrderSummary#orderId=o%231"));
    assert_eq!(key["sk"], s("OrderSummary"));
    let item = e.to_item(&summary("o-1", "ann")).unwrap();
    assert_eq!(item[ENTITY_ATTRIBUTE], s("OrderSummary"));
    assert_eq!(item["gsi1pk"], s("shop#v1#OrderSummary#customer=ann"));
    assert_eq!(item["gsi1sk"], s("OrderSummary#orderId=o-1"));
}

/// A typed key is a struct of the composite attributes, a tuple of their
/// values in composite order, or one value for a one-attribute key.
#[tokio::test]
async fn typed_keys_are_structs_tuples_or_single_values() {
    let e = summaries(&table());
    let by_struct = e.key(&key("o-1")).unwrap();
    assert_eq!(e.key(&("o-1",)).unwrap(), by_struct);
    assert_eq!(e.key("o-1").unwrap(), by_struct);
    let err = e.key(&("o-1", "extra")).unwrap_err();
    assert_eq!(err.code(), "KeyComposeError");
    assert!(err.to_string().contains("2 values"), "{err}");
}

#[tokio::test]
async fn a_key_that_does_not_compose_is_a_typed_error() {
    let e = summaries(&table());
    let err = e.key(&json!({"customer": "ann"})).unwrap_err();
    assert_eq!(err.code(), "KeyComposeError");
    assert!(err.to_string().contains("orderId"), "{err}");
    let err = e.key(&json!({"orderId": {"nested": 1}})).unwrap_err();
    assert_eq!(err.code(), "KeyComposeError");
}

pub async fn create_get_update_delete(t: TestTable) {
    let e = summaries(&t);
    let o1 = key("o-1");
    assert_eq!(e.get(&o1).await.unwrap(), None);
    e.create(&summary("o-1", "ann")).await.unwrap();
    assert_eq!(
        e.create(&summary("o-1", "bob")).await.unwrap_err().code(),
        "ConditionalCheckFailed"
    );
    assert_eq!(e.get(&o1).await.unwrap(), Some(summary("o-1", "ann")));
    let updated = e
        .update(
            &o1,
            Update::new().add("lines", n(2)).set("totalCents", n(900)),
        )
        .await
        .unwrap();
    assert_eq!((updated.lines, updated.total_cents), (2, 900));
    assert_eq!(
        e.update(&key("nope"), Update::new().set("lines", n(1)))
            .await
            .unwrap_err()
            .code(),
        "ConditionalCheckFailed"
    );
    e.delete(&o1).await.unwrap();
    assert_eq!(e.get(&o1).await.unwrap(), None);
}

pub async fn queries_by_partition_and_index_return_only_the_entity(t: TestTable) {
    let e = summaries(&t);
    for (id, customer) in [("o-1", "ann"), ("o-2", "ann"), ("o-3", "bob")] {
        e.put(&summary(id, customer)).await.unwrap();
    }
    let anns = e
        .query_index("gsi1", &json!({"customer": "ann"}), None)
        .await
        .unwrap();
    assert_eq!(
        anns.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
        ["o-1", "o-2"]
    );
    assert_eq!(
        e.query(&key("o-3"), None).await.unwrap(),
        vec![summary("o-3", "bob")]
    );
    // A foreign item in the same partition is not the entity's.
    let mut foreign = e.to_item(&summary("o-3", "bob")).unwrap();
    foreign.insert("sk".into(), s("OrderSummary#extra"));
    foreign.insert(ENTITY_ATTRIBUTE.into(), s("Other"));
    t.put_item(eddy_dynamo::Put::new(foreign)).await.unwrap();
    assert_eq!(e.query(&key("o-3"), None).await.unwrap().len(), 1);
    // Batch and transactional gets across entities decode by owner.
    let keys = vec![e.key(&key("o-1")).unwrap(), e.key(&key("zz")).unwrap()];
    let got = t.transact_get_items(keys).await.unwrap();
    assert_eq!(
        e.decode(got[0].clone().unwrap()).unwrap(),
        summary("o-1", "ann")
    );
    assert!(got[1].is_none());
}

pub async fn an_item_that_does_not_fit_the_model_is_a_decode_error(t: TestTable) {
    let e = summaries(&t);
    let mut item = e.to_item(&summary("o-1", "ann")).unwrap();
    item.insert("lines".into(), s("many"));
    t.put_item(eddy_dynamo::Put::new(item)).await.unwrap();
    assert_eq!(
        e.get(&key("o-1")).await.unwrap_err().code(),
        "ItemDecodeError"
    );
}

crate::backend_tests!(
    keys_follow_the_documented_format,
    create_get_update_delete,
    queries_by_partition_and_index_return_only_the_entity,
    an_item_that_does_not_fit_the_model_is_a_decode_error,
);
