//! The table contract: cases every `Table` + `ChangeFeed` backend must pass.
//! Each case takes a fresh, empty table with [`schema`]'s layout. A DynamoDB
//! backend runs the same cases through [`contract_tests!`].

use std::collections::HashMap;

use eddy_dynamo::{
    n, s, AttributeType, AttributeValue, ChangeFeed, Comparator, Condition, ConditionCheck, Delete,
    IndexDefinition, Item, KeyAttribute, KeyDefinition, Put, Query, SortCondition, Table,
    TableError, TableErrorKind, TableSchema, TransactWriteItem, Update, UpdateItem,
    ValidationError,
};

/// The layout every contract case uses: string keys, a string index and
/// an index with a number sort key.
pub fn schema() -> TableSchema {
    let mut schema = TableSchema::single_table("contract")
        .with_index("gsi1", "gsi1pk", Some("gsi1sk"))
        .with_ttl("expires");
    schema.indexes.push(IndexDefinition {
        name: "gsi2".into(),
        key: KeyDefinition {
            partition: KeyAttribute::s("gsi2pk"),
            sort: Some(KeyAttribute::n("gsi2sk")),
        },
    });
    schema
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
    table
        .read_changes(None, 10_000)
        .await
        .unwrap()
        .into_records()
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

/// Regression (issue 33): the embedded table took keys DynamoDB refuses
/// (a sort key over 1 024 bytes, a partition key over 2 048), so a stream
/// whose producer id made a long sort key worked in tests and failed on
/// DynamoDB. Keys at the limits are taken; one byte more is refused, with
/// nothing written.
pub async fn keys_over_dynamodbs_sizes_are_refused<T: Table + ChangeFeed>(t: &T) {
    let at_limit = item(&"p".repeat(2048), &"s".repeat(1024), &[]);
    t.put_item(Put::new(at_limit)).await.unwrap();
    for (pk, sk) in [
        ("p".repeat(2049), "s".to_owned()),
        ("p".to_owned(), "s".repeat(1025)),
    ] {
        let refused = t.put_item(Put::new(item(&pk, &sk, &[]))).await;
        assert!(
            matches!(&refused, Err(e) if e.kind() == TableErrorKind::Invalid),
            "{refused:?}"
        );
    }
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

/// Regression (issue 25): an item is sized as DynamoDB sizes it: names at
/// every level, a number by its significant digits (leading and trailing
/// zeros do not count), one byte per element of a list or map. A number
/// was sized by all its digits, so an item DynamoDB stores could be
/// refused. Exactly 400 KB is stored, one byte more refused.
pub async fn items_are_sized_as_dynamodb_sizes_them<T: Table + ChangeFeed>(t: &T) {
    let mut nested = Item::new();
    nested.insert("a".into(), s("xy"));
    nested.insert("b".into(), n("5"));
    let parts = [
        // 1 + (1 significant digit: 1 + 1)
        ("n", n("1000000000")),
        // 1 + (123: 2 + 1)
        ("d", n("-0.00012300")),
        // 1 + 3 + (1 + 1 + 2) + (1 + 1 + 2)
        ("m", AttributeValue::M(nested)),
        // 1 + 3 + (1 + 1) + (1 + 1)
        (
            "l",
            AttributeValue::L(vec![AttributeValue::Bool(true), AttributeValue::Null(true)]),
        ),
    ];
    let sized = |filler: usize| {
        let mut attrs: Vec<(&str, AttributeValue)> = parts.to_vec();
        attrs.push(("blob", s("x".repeat(filler))));
        item("p", "s", &attrs)
    };
    let fixed = 3 + 4 + 12 + 8 + "pk".len() + 1 + "sk".len() + 1 + "blob".len();
    assert_eq!(eddy_dynamo::item_size(&sized(0)), fixed);
    let exact = sized(400 * 1024 - fixed);
    assert_eq!(eddy_dynamo::item_size(&exact), 400 * 1024);
    t.put_item(Put::new(exact)).await.unwrap();
    let err = t
        .put_item(Put::new(sized(400 * 1024 - fixed + 1)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TableError::Validation(ValidationError::ItemTooLarge { size: 409_601 })
        ),
        "{err:?}"
    );
}

/// Regression (issue 25): a transaction's items may total 4 MB
/// (4 194 304 bytes), as on DynamoDB; the embedded table accepted any
/// total, so a write that worked locally was refused in production. Puts
/// are checked before anything is read (the DynamoDB backend too, before
/// sending); nothing of a refused transaction is written.
pub async fn transactions_over_4_mb_are_refused<T: Table + ChangeFeed>(t: &T) {
    let big = |sk: &str, size: usize| {
        let base = item("q", sk, &[("blob", s(""))]);
        let overhead = eddy_dynamo::item_size(&base);
        item("q", sk, &[("blob", s("x".repeat(size - overhead)))])
    };
    let puts = |last: usize| -> Vec<TransactWriteItem> {
        let mut items: Vec<TransactWriteItem> = (0..10)
            .map(|i| Put::new(big(&format!("{i:02}"), 400_000)).into())
            .collect();
        items.push(Put::new(big("10", last)).into());
        items
    };
    let err = t.transact_write_items(puts(194_305)).await.unwrap_err();
    assert_eq!(err.kind(), TableErrorKind::TooLarge);
    assert!(
        matches!(
            err,
            TableError::Validation(ValidationError::TransactionTooLarge { size: 4_194_305 })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("4 MB"), "{err}");
    assert!(t
        .query(Query::partition(s("q")))
        .await
        .unwrap()
        .items
        .is_empty());
    t.transact_write_items(puts(194_304)).await.unwrap();
    let mut stored = 0;
    let mut start = None;
    loop {
        // Pages stop at 1 MB.
        let page = t
            .query(Query::partition(s("q")).start_after(start))
            .await
            .unwrap();
        stored += page.items.len();
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => break,
        }
    }
    assert_eq!(stored, 11);
}

/// The same limit on items as an update leaves them, which only the table
/// knows once it has read them (DynamoDB checks it as the embedded table
/// does).
pub async fn updates_that_make_a_transaction_over_4_mb_are_refused<T: Table + ChangeFeed>(t: &T) {
    for i in 0..11 {
        t.put_item(Put::new(item("u", &format!("{i:02}"), &[])))
            .await
            .unwrap();
    }
    let updates: Vec<TransactWriteItem> = (0..11)
        .map(|i| {
            UpdateItem::new(
                key("u", &format!("{i:02}")),
                Update::new().set("blob", s("y".repeat(390_000))),
            )
            .into()
        })
        .collect();
    let err = t.transact_write_items(updates).await.unwrap_err();
    assert!(
        matches!(
            err,
            TableError::Validation(ValidationError::TransactionTooLarge { .. })
        ),
        "{err:?}"
    );
    let stored = t.get_item(key("u", "00")).await.unwrap().unwrap();
    assert!(
        !stored.contains_key("blob"),
        "a refused transaction wrote nothing"
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

    // More keys than one request carries (DynamoTable sends its chunks
    // at once): every present item once, whatever the chunking.
    for n in 0..250 {
        t.put_item(Put::new(item("many", &format!("{n:03}"), &[])))
            .await
            .unwrap();
    }
    let keys: Vec<Item> = (0..300).map(|n| key("many", &format!("{n:03}"))).collect();
    let mut many = t.batch_get_item(keys).await.unwrap();
    many.sort_by_key(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default().to_owned());
    let wanted: Vec<Item> = (0..250)
        .map(|n| item("many", &format!("{n:03}"), &[]))
        .collect();
    assert_eq!(many, wanted);
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
    // Reading after the position of a record continues from there.
    let first_two = t.read_changes(None, 2).await.unwrap();
    let rest = t
        .read_changes(first_two.last_position(), 10)
        .await
        .unwrap()
        .into_records();
    assert_eq!(rest, records[2..].to_vec());
}

/// `NULL` is a value to DynamoDB (`attribute_exists` holds), and absent to
/// this crate's guards (`Condition::absent`, `get_present`).
pub async fn null_attributes_exist_but_read_as_absent<T: Table + ChangeFeed>(t: &T) {
    t.put_item(Put::new(item(
        "p",
        "s",
        &[("gone", AttributeValue::Null(true)), ("there", n(1))],
    )))
    .await
    .unwrap();
    let write = |condition: Condition| {
        t.update_item(
            UpdateItem::new(key("p", "s"), Update::new().set("touched", n(1))).when(condition),
        )
    };
    write(Condition::exists("gone")).await.unwrap();
    for holds in [Condition::absent("gone"), Condition::absent("missing")] {
        write(holds.clone())
            .await
            .unwrap_or_else(|e| panic!("{holds:?}: {e}"));
    }
    for fails in [
        Condition::not_exists("gone"),
        Condition::absent("there"),
        Condition::exists("missing"),
    ] {
        let err = write(fails.clone()).await.unwrap_err();
        assert_eq!(err.code(), "ConditionalCheckFailed", "{fails:?}");
    }
    let stored = t.get_item(key("p", "s")).await.unwrap().unwrap();
    assert_eq!(eddy_dynamo::get_present(&stored, "gone"), None);
    assert_eq!(eddy_dynamo::get_present(&stored, "there"), Some(&n(1)));
}

/// `attribute_type` holds for the stored type only, never for an absent
/// attribute.
pub async fn attribute_type_tests_the_stored_type<T: Table + ChangeFeed>(t: &T) {
    let attributes = [
        ("str", s("x"), AttributeType::S),
        ("num", n(2), AttributeType::N),
        ("bin", AttributeValue::B(vec![1]), AttributeType::B),
        ("flag", AttributeValue::Bool(false), AttributeType::Bool),
        ("nothing", AttributeValue::Null(true), AttributeType::Null),
        (
            "map",
            AttributeValue::M(HashMap::from([("a".to_owned(), n(1))])),
            AttributeType::M,
        ),
        ("list", AttributeValue::L(vec![n(1)]), AttributeType::L),
        (
            "ss",
            AttributeValue::Ss(vec!["a".into()]),
            AttributeType::Ss,
        ),
    ];
    let values: Vec<(&str, AttributeValue)> =
        attributes.iter().map(|(a, v, _)| (*a, v.clone())).collect();
    t.put_item(Put::new(item("p", "s", &values))).await.unwrap();
    for (attribute, _, kind) in &attributes {
        for candidate in [
            AttributeType::S,
            AttributeType::N,
            AttributeType::Null,
            *kind,
        ] {
            let result = t
                .update_item(
                    UpdateItem::new(key("p", "s"), Update::new().set("seen", n(1)))
                        .when(Condition::has_type(*attribute, candidate)),
                )
                .await;
            assert_eq!(
                result.is_ok(),
                candidate == *kind,
                "{attribute} as {candidate:?}"
            );
        }
    }
    let err = t
        .update_item(
            UpdateItem::new(key("p", "s"), Update::new().set("seen", n(2)))
                .when(Condition::has_type("missing", AttributeType::Null)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "ConditionalCheckFailed");
}

fn sks(page: &eddy_dynamo::QueryPage, attribute: &str) -> Vec<AttributeValue> {
    page.items.iter().map(|i| i[attribute].clone()).collect()
}

/// `begins_with` and `BETWEEN` on string sort keys, and every comparison on
/// a number sort key, in DynamoDB's order (numbers by value, negative and
/// fractional ones included).
pub async fn sort_key_ranges_on_strings_and_numbers<T: Table + ChangeFeed>(t: &T) {
    for sk in ["a", "ab", "abc", "abd", "b", "ba", "é"] {
        t.put_item(Put::new(item("p", sk, &[]))).await.unwrap();
    }
    let q = |sort: SortCondition| t.query(Query::partition(s("p")).sort(sort));
    let page = q(SortCondition::BeginsWith(s("ab"))).await.unwrap();
    assert_eq!(sks(&page, "sk"), [s("ab"), s("abc"), s("abd")]);
    let page = q(SortCondition::Between(s("abc"), s("b"))).await.unwrap();
    assert_eq!(sks(&page, "sk"), [s("abc"), s("abd"), s("b")]);
    let page = q(SortCondition::Gt(s("ba"))).await.unwrap();
    assert_eq!(sks(&page, "sk"), [s("é")]);

    let numbers = [
        "-10", "-1.5", "-1", "0", "0.25", "1", "2", "10", "12.5", "100", "1000",
    ];
    for (i, number) in numbers.iter().rev().enumerate() {
        let attrs = [("gsi2pk", s("n")), ("gsi2sk", n(number))];
        t.put_item(Put::new(item("num", &format!("{i:02}"), &attrs)))
            .await
            .unwrap();
    }
    let q = |sort: Option<SortCondition>, forward: bool, limit: Option<usize>| {
        let mut query = Query::partition(s("n")).on_index("gsi2");
        query.sort = sort;
        query.forward = forward;
        query.limit = limit;
        t.query(query)
    };
    let all = q(None, true, None).await.unwrap();
    let expected: Vec<AttributeValue> = numbers.iter().map(n).collect();
    assert_eq!(sks(&all, "gsi2sk"), expected);
    let page = q(Some(SortCondition::Between(n("-1.5"), n("10"))), true, None)
        .await
        .unwrap();
    assert_eq!(sks(&page, "gsi2sk"), expected[1..8].to_vec());
    let page = q(Some(SortCondition::Lt(n(0))), false, Some(2))
        .await
        .unwrap();
    assert_eq!(sks(&page, "gsi2sk"), [n(-1), n("-1.5")]);
    let page = q(Some(SortCondition::Ge(n("12.50"))), true, None)
        .await
        .unwrap();
    assert_eq!(sks(&page, "gsi2sk"), [n("12.5"), n(100), n(1000)]);
    let page = q(Some(SortCondition::Eq(n("1.0"))), true, None)
        .await
        .unwrap();
    assert_eq!(sks(&page, "gsi2sk"), [n(1)]);

    // Operands of another type, reversed bounds, begins_with on a number.
    for bad in [
        SortCondition::Gt(s("1")),
        SortCondition::Between(n(5), n(1)),
        SortCondition::BeginsWith(n(1)),
    ] {
        let err = q(Some(bad.clone()), true, None).await.unwrap_err();
        assert_eq!(err.code(), "ValidationException", "{bad:?}");
    }
}

/// A descending query with a limit returns the last items first and pages
/// backward from where it stopped.
pub async fn descending_queries_with_limits_page_backward<T: Table + ChangeFeed>(t: &T) {
    for i in 0..20 {
        t.put_item(Put::new(item("p", &format!("k{i:02}"), &[])))
            .await
            .unwrap();
    }
    let names = |page: &eddy_dynamo::QueryPage| -> Vec<String> {
        page.items
            .iter()
            .map(|i| eddy_dynamo::get_str(i, "sk").unwrap_or_default().to_owned())
            .collect()
    };
    let first = t
        .query(Query::partition(s("p")).backward().limit(5))
        .await
        .unwrap();
    assert_eq!(names(&first), ["k19", "k18", "k17", "k16", "k15"]);
    let start = first.last_evaluated_key.clone().expect("more pages");
    let second = t
        .query(
            Query::partition(s("p"))
                .backward()
                .limit(5)
                .start_after(Some(start)),
        )
        .await
        .unwrap();
    assert_eq!(names(&second), ["k14", "k13", "k12", "k11", "k10"]);
    let bounded = t
        .query(
            Query::partition(s("p"))
                .sort(SortCondition::Le(s("k07")))
                .backward()
                .limit(3),
        )
        .await
        .unwrap();
    assert_eq!(names(&bounded), ["k07", "k06", "k05"]);
    let latest = t
        .query(Query::partition(s("p")).backward().limit(1))
        .await
        .unwrap();
    assert_eq!(names(&latest), ["k19"]);
}

/// Paging through an index partition with ties in its sort key returns
/// every item exactly once, in sort key order, both ways.
pub async fn paging_through_an_index_partition_returns_each_item_once<T: Table + ChangeFeed>(
    t: &T,
) {
    let mut expected = Vec::new();
    for i in 0..40 {
        let (pk, sk) = (format!("p{}", i % 10), format!("s{i:02}"));
        let attrs = [("gsi1pk", s("g")), ("gsi1sk", s(format!("t{:02}", i % 7)))];
        t.put_item(Put::new(item(&pk, &sk, &attrs))).await.unwrap();
        expected.push((pk, sk));
    }
    t.put_item(Put::new(item(
        "other",
        "x",
        &[("gsi1pk", s("h")), ("gsi1sk", s("t00"))],
    )))
    .await
    .unwrap();
    expected.sort();
    for forward in [true, false] {
        let mut seen = Vec::new();
        let mut order = Vec::new();
        let mut start = None;
        loop {
            let mut query = Query::partition(s("g"))
                .on_index("gsi1")
                .limit(6)
                .start_after(start);
            query.forward = forward;
            let page = t.query(query).await.unwrap();
            assert!(page.items.len() <= 6);
            for i in &page.items {
                let text = |a: &str| eddy_dynamo::get_str(i, a).unwrap_or_default().to_owned();
                seen.push((text("pk"), text("sk")));
                order.push(text("gsi1sk"));
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        let mut sorted = order.clone();
        sorted.sort();
        if !forward {
            sorted.reverse();
        }
        assert_eq!(order, sorted, "index sort key order, forward: {forward}");
        seen.sort();
        assert_eq!(seen, expected, "each item once, forward: {forward}");
    }
}

/// Items written before the `byOwner` index (`ownerpk` / `ownersk`) was
/// added to the table: two carry its keys, one does not.
pub fn index_backfill_items() -> Vec<Item> {
    vec![
        item("a", "1", &[("ownerpk", s("ann")), ("ownersk", s("2"))]),
        item("b", "1", &[("ownerpk", s("ann")), ("ownersk", s("1"))]),
        item("c", "1", &[("ownerpk", s("bob"))]),
    ]
}

/// The index added after [`index_backfill_items`] were written holds them
/// (sparsely), and keeps up with new writes.
pub async fn the_added_index_covers_the_items<T: Table>(t: &T) {
    let owned = |owner: &str| t.query(Query::partition(s(owner)).on_index("byOwner"));
    let page = owned("ann").await.unwrap();
    assert_eq!(
        sks(&page, "pk"),
        [s("b"), s("a")],
        "backfilled in index order"
    );
    assert!(
        owned("bob").await.unwrap().items.is_empty(),
        "sparse: no sort key"
    );
    t.put_item(Put::new(item(
        "d",
        "1",
        &[("ownerpk", s("bob")), ("ownersk", s("0"))],
    )))
    .await
    .unwrap();
    assert_eq!(sks(&owned("bob").await.unwrap(), "pk"), [s("d")]);
}

/// A scan pages through every item of the table exactly once.
pub async fn a_scan_pages_through_every_item_once<T: Table + ChangeFeed>(t: &T) {
    let mut expected = Vec::new();
    for i in 0..40 {
        let (pk, sk) = (format!("p{}", i % 10), format!("s{i:02}"));
        t.put_item(Put::new(item(&pk, &sk, &[("a", n(i))])))
            .await
            .unwrap();
        expected.push((pk, sk));
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut start = None;
    loop {
        let page = t
            .scan(eddy_dynamo::Scan::table().limit(7).start_after(start))
            .await
            .unwrap();
        assert!(page.items.len() <= 7);
        for i in &page.items {
            let text = |a: &str| eddy_dynamo::get_str(i, a).unwrap_or_default().to_owned();
            seen.push((text("pk"), text("sk")));
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    seen.sort();
    assert_eq!(seen, expected, "each item once");
}
