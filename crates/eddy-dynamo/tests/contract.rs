//! The table contract: cases every `Table` + `ChangeFeed` backend must pass.
//! Each case takes a fresh, empty table with [`schema`]'s layout. A DynamoDB
//! backend runs the same cases through [`contract_tests!`].

use std::collections::HashMap;

use eddy_dynamo::{
    n, s, AttributeValue, ChangeFeed, Comparator, Condition, ConditionCheck, Delete, Item, Put,
    Query, SortCondition, Table, TableError, TableErrorKind, TableSchema, TransactWriteItem,
    Update, UpdateItem, ValidationError,
};

/// The layout every contract case uses.
pub fn schema() -> TableSchema {
    TableSchema::single_table("contract")
        .with_index("gsi1", "gsi1pk", Some("gsi1sk"))
        .with_ttl("expires")
}

/// Runs each named case as its own test against tables from `$make`.
#[macro_export]
macro_rules! contract_tests {
    ($make:expr, $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let table = $make;
                $crate::contract::$case(&*table).await;
            }
        )*
    };
}

fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

fn item(pk: &str, sk: &str, attrs: &[(&str, AttributeValue)]) -> Item {
    let mut item = key(pk, sk);
    for (name, value) in attrs {
        item.insert((*name).to_owned(), value.clone());
    }
    item
}

async fn changes<T: ChangeFeed>(table: &T) -> Vec<eddy_dynamo::ChangeRecord> {
    table.read_changes(None, 10_000).await.unwrap()
}

pub async fn put_get_round_trips_every_type<T: Table + ChangeFeed>(t: &T) {
    let value = item(
        "p",
        "s",
        &[
            ("str", s("text")),
            ("num", n("-12.5")),
            ("bin", AttributeValue::B(vec![0, 1, 255])),
            ("flag", AttributeValue::Bool(true)),
            ("nothing", AttributeValue::Null(true)),
            (
                "map",
                AttributeValue::M(HashMap::from([("inner".to_owned(), n(1))])),
            ),
            ("list", AttributeValue::L(vec![s("a"), n(2)])),
            ("ss", AttributeValue::Ss(vec!["x".into(), "y".into()])),
            ("ns", AttributeValue::Ns(vec!["1".into(), "2".into()])),
            ("bs", AttributeValue::Bs(vec![vec![1], vec![2]])),
        ],
    );
    t.put_item(Put::new(value.clone())).await.unwrap();
    assert_eq!(t.get_item(key("p", "s")).await.unwrap(), Some(value));
    assert_eq!(t.get_item(key("p", "other")).await.unwrap(), None);
}

pub async fn conditional_put_fails_and_returns_the_item<T: Table + ChangeFeed>(t: &T) {
    let first = item("p", "s", &[("v", n(1))]);
    t.put_item(Put::new(first.clone()).when(Condition::not_exists("pk")))
        .await
        .unwrap();
    let err = t
        .put_item(Put::new(item("p", "s", &[("v", n(2))])).when(Condition::not_exists("pk")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ConditionalCheckFailed");
    assert_eq!(err.kind(), TableErrorKind::ConditionFailed);
    assert!(!err.is_retryable(), "the same write fails the same way");
    assert!(!err.to_string().contains("ConditionalCheckFailed"), "{err}");
    match err {
        TableError::ConditionalCheckFailed { item } => {
            assert_eq!(item.map(|b| *b), Some(first.clone()))
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(t.get_item(key("p", "s")).await.unwrap(), Some(first));
}

pub async fn condition_tree_is_evaluated<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item(
        "p",
        "s",
        &[("v", n(5)), ("name", s("order-7"))],
    )))
    .await
    .unwrap();
    let passes = Condition::compare("v", Comparator::Ge, n(5))
        .and(Condition::BeginsWith("name".into(), s("order-")))
        .and(Condition::exists("missing").not())
        .and(Condition::eq("v", n(1)).or(Condition::compare("v", Comparator::Lt, n("10.5"))));
    t.update_item(
        UpdateItem::new(
            key("p", "s"),
            Update::new().set("ok", AttributeValue::Bool(true)),
        )
        .when(passes),
    )
    .await
    .unwrap();
    for failing in [
        Condition::compare("v", Comparator::Gt, n(5)),
        Condition::eq("v", s("5")),
        Condition::BeginsWith("name".into(), s("invoice-")),
        Condition::exists("missing"),
        Condition::compare("missing", Comparator::Lt, n(1)),
        Condition::eq("v", n(5)).not(),
    ] {
        let err = t
            .update_item(
                UpdateItem::new(key("p", "s"), Update::new().set("bad", n(1)))
                    .when(failing.clone()),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), "ConditionalCheckFailed", "{failing:?}");
    }
    assert!(Condition::compare("missing", Comparator::Ne, n(1)).evaluate(None));
    let stored = t.get_item(key("p", "s")).await.unwrap().unwrap();
    assert_eq!(stored.get("ok"), Some(&AttributeValue::Bool(true)));
    assert!(!stored.contains_key("bad"));
}

pub async fn update_sets_removes_and_adds<T: Table + ChangeFeed>(t: &T) {
    let created = t
        .update_item(UpdateItem::new(
            key("p", "s"),
            Update::new().add("count", n(2)).set("a", s("x")),
        ))
        .await
        .unwrap();
    assert_eq!(created, item("p", "s", &[("count", n(2)), ("a", s("x"))]));
    let updated = t
        .update_item(UpdateItem::new(
            key("p", "s"),
            Update::new().add("count", n("0.5")).remove("a"),
        ))
        .await
        .unwrap();
    assert_eq!(updated, item("p", "s", &[("count", n("2.5"))]));
    let err = t
        .update_item(UpdateItem::new(
            key("p", "s"),
            Update::new().set("pk", s("other")),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ValidationException");
}

pub async fn conditional_delete<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item("p", "s", &[("v", n(1))])))
        .await
        .unwrap();
    let err = t
        .delete_item(Delete::new(key("p", "s")).when(Condition::eq("v", n(2))))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ConditionalCheckFailed");
    t.delete_item(Delete::new(key("p", "s")).when(Condition::eq("v", n(1))))
        .await
        .unwrap();
    assert_eq!(t.get_item(key("p", "s")).await.unwrap(), None);
}

pub async fn transaction_is_all_or_nothing_with_reasons<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item("p", "taken", &[]))).await.unwrap();
    let before = changes(t).await.len();
    let err = t
        .transact_write_items(vec![
            Put::new(item("p", "a", &[])).into(),
            Put::new(item("p", "taken", &[("v", n(1))]))
                .when(Condition::not_exists("pk"))
                .into(),
            UpdateItem::new(key("p", "b"), Update::new().set("v", n(1))).into(),
        ])
        .await
        .unwrap_err();
    match &err {
        TableError::TransactionCanceled { reasons } => {
            let codes: Vec<&str> = reasons.iter().map(|r| r.code.as_str()).collect();
            assert_eq!(codes, ["None", "ConditionalCheckFailed", "None"]);
            assert_eq!(reasons[1].item, Some(item("p", "taken", &[])));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(err.code(), "TransactionCanceled");
    assert_eq!(err.kind(), TableErrorKind::ConditionFailed);
    assert_eq!(t.get_item(key("p", "a")).await.unwrap(), None);
    assert_eq!(t.get_item(key("p", "b")).await.unwrap(), None);
    assert_eq!(
        changes(t).await.len(),
        before,
        "a cancelled transaction records nothing"
    );

    // A condition check on another item takes part in the decision.
    t.transact_write_items(vec![
        ConditionCheck {
            key: key("p", "taken"),
            condition: Condition::exists("pk"),
        }
        .into(),
        Put::new(item("p", "a", &[])).into(),
    ])
    .await
    .unwrap();
    assert!(t.get_item(key("p", "a")).await.unwrap().is_some());
}

pub async fn transaction_holds_at_most_100_items<T: Table + ChangeFeed>(t: &T) {
    let puts = |count: usize| -> Vec<TransactWriteItem> {
        (0..count)
            .map(|i| Put::new(item("p", &format!("{i:03}"), &[])).into())
            .collect()
    };
    let err = t.transact_write_items(puts(101)).await.unwrap_err();
    assert_eq!(err.kind(), TableErrorKind::Invalid);
    assert!(
        matches!(
            err,
            TableError::Validation(ValidationError::TooManyItems { count: 101 })
        ),
        "{err:?}"
    );
    assert_eq!(
        t.query(Query::partition(s("p"))).await.unwrap().items.len(),
        0
    );
    t.transact_write_items(puts(100)).await.unwrap();
    assert_eq!(
        t.query(Query::partition(s("p"))).await.unwrap().items.len(),
        100
    );
}

pub async fn transaction_refuses_two_operations_on_one_item<T: Table + ChangeFeed>(t: &T) {
    let err = t
        .transact_write_items(vec![
            Put::new(item("p", "s", &[])).into(),
            Delete::new(key("p", "s")).into(),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(err, TableError::Validation(ValidationError::DuplicateItem)),
        "{err:?}"
    );
    assert_eq!(t.get_item(key("p", "s")).await.unwrap(), None);
}

pub async fn items_over_400_kb_are_refused<T: Table + ChangeFeed>(t: &T) {
    items_over_the_limit_are_refused(t, 400 * 1024).await
}

/// The item size case, given the largest item the backend stores (400 KB on
/// DynamoDB and the embedded table; moto refuses items over 405 000 bytes).
pub async fn items_over_the_limit_are_refused<T: Table + ChangeFeed>(t: &T, largest: usize) {
    let big = |len: usize| item("p", "s", &[("blob", s("x".repeat(len)))]);
    let overhead = eddy_dynamo::item_size(&big(0));
    t.put_item(Put::new(big(largest - overhead))).await.unwrap();
    let err = t
        .put_item(Put::new(big(400 * 1024 - overhead + 1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), TableErrorKind::TooLarge);
    assert!(
        matches!(
            err,
            TableError::Validation(ValidationError::ItemTooLarge { .. })
        ),
        "{err:?}"
    );
    let err = t
        .update_item(UpdateItem::new(
            key("p", "s"),
            Update::new().set("more", s("y".repeat(10_000))),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ValidationException");
    let stored = t.get_item(key("p", "s")).await.unwrap().unwrap();
    assert!(
        !stored.contains_key("more"),
        "a refused update wrote nothing"
    );
}

pub async fn keys_are_validated<T: Table + ChangeFeed>(t: &T) {
    let wrong_type = HashMap::from([("pk".to_owned(), n(1)), ("sk".to_owned(), s("s"))]);
    assert_eq!(
        t.put_item(Put::new(wrong_type)).await.unwrap_err().code(),
        "ValidationException"
    );
    let missing = HashMap::from([("pk".to_owned(), s("p"))]);
    assert_eq!(
        t.get_item(missing).await.unwrap_err().code(),
        "ValidationException"
    );
    let empty = item("", "s", &[]);
    assert_eq!(
        t.put_item(Put::new(empty)).await.unwrap_err().code(),
        "ValidationException"
    );
    let bad_index_key = item("p", "s", &[("gsi1pk", n(3))]);
    assert_eq!(
        t.put_item(Put::new(bad_index_key))
            .await
            .unwrap_err()
            .code(),
        "ValidationException"
    );
}

pub async fn index_membership_is_sparse<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item(
        "a",
        "1",
        &[("gsi1pk", s("g")), ("gsi1sk", s("2"))],
    )))
    .await
    .unwrap();
    t.put_item(Put::new(item(
        "b",
        "1",
        &[("gsi1pk", s("g")), ("gsi1sk", s("1"))],
    )))
    .await
    .unwrap();
    t.put_item(Put::new(item("c", "1", &[("gsi1pk", s("g"))])))
        .await
        .unwrap(); // no index sort key
    t.put_item(Put::new(item("d", "1", &[]))).await.unwrap();
    let page = t
        .query(Query::partition(s("g")).on_index("gsi1"))
        .await
        .unwrap();
    let pks: Vec<_> = page.items.iter().map(|i| i["pk"].clone()).collect();
    assert_eq!(pks, [s("b"), s("a")]);
    t.update_item(UpdateItem::new(
        key("a", "1"),
        Update::new().remove("gsi1pk"),
    ))
    .await
    .unwrap();
    let page = t
        .query(Query::partition(s("g")).on_index("gsi1"))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(
        t.query(Query::partition(s("g")).on_index("nope"))
            .await
            .unwrap_err()
            .code(),
        "ValidationException"
    );
}

pub async fn query_sort_conditions_direction_and_paging<T: Table + ChangeFeed>(t: &T) {
    for i in 0..10 {
        t.put_item(Put::new(item("p", &format!("item#{i:02}"), &[("i", n(i))])))
            .await
            .unwrap();
    }
    t.put_item(Put::new(item("p", "other", &[]))).await.unwrap();
    t.put_item(Put::new(item("q", "item#00", &[])))
        .await
        .unwrap();
    let sks = |page: &eddy_dynamo::QueryPage| -> Vec<String> {
        page.items
            .iter()
            .map(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default().to_owned())
            .collect()
    };
    let all = t.query(Query::partition(s("p"))).await.unwrap();
    assert_eq!(all.items.len(), 11);
    assert_eq!(all.last_evaluated_key, None);
    let prefixed = t
        .query(Query::partition(s("p")).sort(SortCondition::BeginsWith(s("item#"))))
        .await
        .unwrap();
    assert_eq!(prefixed.items.len(), 10);
    let between = t
        .query(Query::partition(s("p")).sort(SortCondition::Between(s("item#03"), s("item#05"))))
        .await
        .unwrap();
    assert_eq!(sks(&between), ["item#03", "item#04", "item#05"]);
    let back = t
        .query(
            Query::partition(s("p"))
                .sort(SortCondition::Lt(s("item#02")))
                .backward(),
        )
        .await
        .unwrap();
    assert_eq!(sks(&back), ["item#01", "item#00"]);
    let gt = t
        .query(Query::partition(s("p")).sort(SortCondition::Gt(s("item#08"))))
        .await
        .unwrap();
    assert_eq!(sks(&gt), ["item#09", "other"]);

    for forward in [true, false] {
        let mut seen = Vec::new();
        let mut start = None;
        loop {
            let mut q = Query::partition(s("p"))
                .sort(SortCondition::BeginsWith(s("item#")))
                .limit(3)
                .start_after(start);
            if !forward {
                q = q.backward();
            }
            let page = t.query(q).await.unwrap();
            assert!(page.items.len() <= 3);
            seen.extend(sks(&page));
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        let mut expected: Vec<String> = (0..10).map(|i| format!("item#{i:02}")).collect();
        if !forward {
            expected.reverse();
        }
        assert_eq!(seen, expected);
    }
    assert_eq!(
        t.query(Query::partition(s("p")).limit(0))
            .await
            .unwrap_err()
            .code(),
        "ValidationException"
    );
}

pub async fn batch_and_transactional_get<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item("p", "1", &[]))).await.unwrap();
    t.put_item(Put::new(item("p", "2", &[]))).await.unwrap();
    let got = t
        .transact_get_items(vec![key("p", "1"), key("p", "x"), key("p", "2")])
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![Some(item("p", "1", &[])), None, Some(item("p", "2", &[]))]
    );
    let mut batch = t
        .batch_get_item(vec![key("p", "2"), key("p", "x"), key("p", "1")])
        .await
        .unwrap();
    batch.sort_by_key(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default().to_owned());
    assert_eq!(batch, vec![item("p", "1", &[]), item("p", "2", &[])]);
}

pub async fn change_feed_records_real_changes_in_order<T: Table + ChangeFeed>(t: &T) {
    let v1 = item("p", "s", &[("v", n(1))]);
    let v2 = item("p", "s", &[("v", n(2))]);
    t.put_item(Put::new(v1.clone())).await.unwrap();
    t.put_item(Put::new(v1.clone())).await.unwrap(); // identical: no record
    t.update_item(UpdateItem::new(key("p", "s"), Update::new().set("v", n(1))))
        .await
        .unwrap(); // no-op
    t.put_item(Put::new(v2.clone())).await.unwrap();
    t.transact_write_items(vec![
        Put::new(item("p", "t", &[])).into(),
        Delete::new(key("p", "s")).into(),
    ])
    .await
    .unwrap();
    t.delete_item(Delete::new(key("p", "absent")))
        .await
        .unwrap(); // nothing to delete: no record
    let records = changes(t).await;
    let names: Vec<&str> = records.iter().map(|r| r.event_name.as_str()).collect();
    assert_eq!(names, ["INSERT", "MODIFY", "INSERT", "REMOVE"]);
    let insert = &records[0].change;
    assert_eq!(*insert.new_image, v1);
    assert!(insert.old_image.is_empty());
    assert_eq!(*insert.keys, key("p", "s"));
    assert_eq!(*records[1].change.old_image, v1);
    assert_eq!(*records[1].change.new_image, v2);
    assert_eq!(*records[3].change.old_image, v2);
    assert!(records[3].change.new_image.is_empty());
    let seqs: Vec<u128> = records
        .iter()
        .map(|r| {
            r.change
                .sequence_number
                .as_deref()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(records
        .iter()
        .all(|r| r.event_source.as_deref() == Some("aws:dynamodb")));
    // Reading after a sequence number continues from there.
    let rest = t
        .read_changes(records[1].change.sequence_number.clone(), 10)
        .await
        .unwrap();
    assert_eq!(rest, records[2..].to_vec());
}
