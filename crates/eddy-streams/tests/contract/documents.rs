//! The contract of a store's shared documents (`Storage::documents`),
//! for every store that keeps them; a store without (a remote server)
//! skips these cases.

use std::sync::Arc;

use bytes::Bytes;
use eddy_streams::{
    Document, Documents, ErrorKind, Storage, StreamConfig, MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_KEY_BYTES,
};

/// The store's documents, or `None` (the case is skipped) when it keeps
/// none.
fn documents_of(store: &dyn Storage) -> Option<&dyn Documents> {
    let documents = store.documents();
    if documents.is_none() {
        eprintln!("  (the store keeps no documents: skipped)");
    }
    documents
}

async fn body_of(documents: &dyn Documents, key: &str) -> Option<Bytes> {
    let found = documents.get(key).await.expect("get");
    found.map(|document| document.body)
}

/// A document is created, replaced and removed only at the version that
/// is stored; a refused write changes nothing, and a document made again
/// after its removal gets a version above every one it had.
pub async fn documents_are_written_by_compare_and_set(store: Arc<dyn Storage>) {
    let Some(documents) = documents_of(&*store) else {
        return;
    };
    let key = "subscriptions/a";
    assert_eq!(documents.get(key).await.expect("get"), None);
    let first = documents
        .put(key, None, "one".into())
        .await
        .expect("create")
        .expect("created");
    assert_eq!(
        documents.get(key).await.expect("get"),
        Some(Document {
            version: first,
            body: "one".into()
        })
    );
    let again = documents.put(key, None, "two".into()).await.expect("put");
    assert_eq!(again, None, "a create over a document is refused");
    let stale = documents.put(key, Some(first + 7), "two".into()).await;
    assert_eq!(stale.expect("put"), None, "another version is refused");
    assert_eq!(body_of(documents, key).await.as_deref(), Some(&b"one"[..]));

    let second = documents
        .put(key, Some(first), "two".into())
        .await
        .expect("replace")
        .expect("replaced");
    assert!(second > first, "{second} > {first}");
    let late = documents.put(key, Some(first), "three".into()).await;
    assert_eq!(late.expect("put"), None, "the replaced version is stale");
    assert_eq!(body_of(documents, key).await.as_deref(), Some(&b"two"[..]));

    let absent = documents
        .put("subscriptions/b", Some(first), "x".into())
        .await;
    assert_eq!(absent.expect("put"), None, "no document has a version");
    assert_eq!(documents.get("subscriptions/b").await.expect("get"), None);

    assert!(!documents.remove(key, first).await.expect("remove"));
    assert!(documents.get(key).await.expect("get").is_some());
    assert!(documents.remove(key, second).await.expect("remove"));
    assert_eq!(documents.get(key).await.expect("get"), None);
    assert!(!documents.remove(key, second).await.expect("remove again"));

    let recreated = documents
        .put(key, None, "four".into())
        .await
        .expect("create again")
        .expect("created again");
    assert!(
        recreated > second,
        "a document made again gets a new version: {recreated} > {second}"
    );
    let old = documents.put(key, Some(second), "five".into()).await;
    assert_eq!(
        old.expect("put"),
        None,
        "the removed document's version is stale"
    );
    assert_eq!(body_of(documents, key).await.as_deref(), Some(&b"four"[..]));
}

/// A scan finds exactly the documents whose key has the prefix, in key
/// order, a page at a time.
pub async fn documents_are_scanned_by_prefix_in_pages(store: Arc<dyn Storage>) {
    let Some(documents) = documents_of(&*store) else {
        return;
    };
    let mut expected: Vec<String> = (0..12).map(|i| format!("sub/{i:02}")).collect();
    expected.push("sub/é".into());
    let others = ["sua", "sub", "sub0", "sub.", "other/sub/1", "su"];
    for key in expected.iter().rev().map(String::as_str).chain(others) {
        documents
            .put(key, None, Bytes::from(key.to_owned()))
            .await
            .expect("put")
            .expect("created");
    }
    let mut found = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = documents
            .scan("sub/", after.as_deref(), 5)
            .await
            .expect("scan");
        assert!(page.len() <= 5, "a page holds at most the limit");
        let Some((last, _)) = page.last() else {
            break;
        };
        after = Some(last.clone());
        pages += 1;
        for (key, document) in page {
            assert_eq!(document.body, key.as_bytes(), "{key}'s body");
            found.push(key);
        }
    }
    assert_eq!(found, expected);
    assert_eq!(pages, 3);

    let everything = documents.scan("", None, 100).await.expect("scan all");
    assert_eq!(everything.len(), expected.len() + others.len());
    let none = documents.scan("sub/", None, 0).await.expect("limit 0");
    assert!(none.is_empty());
    let from_before = documents.scan("sub/", Some("a"), 1).await.expect("scan");
    assert_eq!(
        from_before[0].0, "sub/00",
        "a key before the prefix starts at it"
    );
    let past = documents
        .scan("sub/", Some("sub0"), 10)
        .await
        .expect("scan");
    assert!(past.is_empty(), "a key past the prefix ends the scan");
}

/// A body or key over the limits is refused, and nothing is written.
pub async fn oversized_documents_and_keys_write_nothing(store: Arc<dyn Storage>) {
    let Some(documents) = documents_of(&*store) else {
        return;
    };
    let big = Bytes::from(vec![b'x'; MAX_DOCUMENT_BYTES + 1]);
    let refused = documents.put("big", None, big.clone()).await;
    assert_eq!(
        refused.err().map(|e| e.kind()),
        Some(ErrorKind::TooLarge),
        "a body over the limit"
    );
    assert_eq!(documents.get("big").await.expect("get"), None);

    let version = documents
        .put("big", None, Bytes::from(vec![b'x'; MAX_DOCUMENT_BYTES]))
        .await
        .expect("a body at the limit")
        .expect("created");
    let refused = documents.put("big", Some(version), big).await;
    assert_eq!(refused.err().map(|e| e.kind()), Some(ErrorKind::TooLarge));
    let kept = documents.get("big").await.expect("get").expect("kept");
    assert_eq!(
        (kept.version, kept.body.len()),
        (version, MAX_DOCUMENT_BYTES)
    );

    let long = "k".repeat(MAX_DOCUMENT_KEY_BYTES + 1);
    for key in [long.as_str(), ""] {
        let refused = documents.put(key, None, "{}".into()).await;
        assert_eq!(
            refused.err().map(|e| e.code()),
            Some("invalid-argument"),
            "a key of {} bytes",
            key.len()
        );
    }
    for key in [long.as_str(), ""] {
        let get = documents.get(key).await.err().map(|e| e.code());
        let remove = documents.remove(key, 1).await.err().map(|e| e.code());
        assert_eq!(
            (get, remove),
            (Some("invalid-argument"), Some("invalid-argument"))
        );
    }
    let at_limit = "k".repeat(MAX_DOCUMENT_KEY_BYTES);
    let made = documents
        .put(&at_limit, None, "{}".into())
        .await
        .expect("put");
    assert!(made.is_some(), "a key at the limit");
    let all = documents.scan("", None, 10).await.expect("scan");
    let keys: Vec<&str> = all.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["big", at_limit.as_str()]);
}

/// Two writers that replace one document at once, from the version both
/// read: exactly one wins each round, and the other's body is not kept.
pub async fn concurrent_document_puts_have_one_winner(store: Arc<dyn Storage>) {
    if documents_of(&*store).is_none() {
        return;
    }
    let one_winner = rounds(Arc::clone(&store), store, 20).await;
    assert!(one_winner, "one winner per round");
}

/// `rounds` rounds of two writers, on `a` and on `b`, replacing one
/// document from the version both read; true when each round had exactly
/// one winner and the document holds its body.
pub async fn rounds(a: Arc<dyn Storage>, b: Arc<dyn Storage>, rounds: usize) -> bool {
    let key = "race";
    let documents = a.documents().expect("documents");
    let mut version = documents
        .put(key, None, "start".into())
        .await
        .expect("create")
        .expect("created");
    for round in 0..rounds {
        let writers = [(Arc::clone(&a), "a"), (Arc::clone(&b), "b")].map(|(store, name)| {
            let body = Bytes::from(format!("{round}-{name}"));
            tokio::spawn(async move {
                let documents = store.documents().expect("documents");
                let won = documents.put(key, Some(version), body.clone()).await;
                (won.expect("put"), body)
            })
        });
        let mut winners = Vec::new();
        for writer in writers {
            let (won, body) = writer.await.expect("writer task");
            winners.extend(won.map(|v| (v, body)));
        }
        let [(won, body)] = winners.as_slice() else {
            eprintln!("round {round}: {} winners", winners.len());
            return false;
        };
        let stored = documents.get(key).await.expect("get").expect("stored");
        if (stored.version, &stored.body) != (*won, body) {
            return false;
        }
        version = *won;
    }
    true
}

/// Documents are no streams: listing, and so exporting, finds only the
/// streams, and a sweep leaves the documents alone.
pub async fn documents_are_not_streams(store: Arc<dyn Storage>) {
    let Some(documents) = documents_of(&*store) else {
        return;
    };
    let version = documents
        .put("orders", None, "{}".into())
        .await
        .expect("put")
        .expect("created");
    assert!(store.list("").await.expect("list").is_empty());
    let path = super::path("orders");
    store
        .create(&path, StreamConfig::json(), eddy_streams::Payload::empty())
        .await
        .expect("create a stream at the document's key");
    let listed = store.list("").await.expect("list");
    let paths: Vec<&str> = listed.iter().map(|info| info.path.as_str()).collect();
    assert_eq!(paths, ["orders"]);
    store.sweep(100).await.expect("sweep");
    store.delete(&path).await.expect("delete the stream");
    let kept = documents.get("orders").await.expect("get").expect("kept");
    assert_eq!(kept.version, version);
}

/// Two stores on one database (two processes, as far as the store can
/// tell): each sees what the other wrote, and their writes to one
/// document take turns by its version.
pub async fn documents_are_shared_by_stores_on_one_database(
    a: Arc<dyn Storage>,
    b: Arc<dyn Storage>,
) {
    let (on_a, on_b) = (
        a.documents().expect("documents on a"),
        b.documents().expect("documents on b"),
    );
    let version = on_a
        .put("shared/1", None, "from a".into())
        .await
        .expect("put on a")
        .expect("created");
    let seen = on_b.get("shared/1").await.expect("get on b").expect("seen");
    assert_eq!((seen.version, &seen.body[..]), (version, &b"from a"[..]));
    let again = on_b.put("shared/1", None, "from b".into()).await;
    assert_eq!(again.expect("put on b"), None, "b sees a's document");
    let replaced = on_b
        .put("shared/1", Some(version), "from b".into())
        .await
        .expect("put on b")
        .expect("replaced");
    let stale = on_a.put("shared/1", Some(version), "late".into()).await;
    assert_eq!(stale.expect("put on a"), None, "a sees b's version");
    on_a.put("shared/2", None, "two".into())
        .await
        .expect("put on a")
        .expect("created");
    let scanned = on_b.scan("shared/", None, 10).await.expect("scan on b");
    let keys: Vec<&str> = scanned.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["shared/1", "shared/2"]);
    assert!(on_a
        .remove("shared/1", replaced)
        .await
        .expect("remove on a"));
    assert_eq!(on_b.get("shared/1").await.expect("get on b"), None);
    assert!(rounds(a, b, 10).await, "one winner per round across stores");
}
