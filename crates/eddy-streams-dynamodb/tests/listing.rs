//! Issue 33: a listing read every record under its prefix (a `Query` of
//! the directory, then a `BatchGetItem` of every path item), and so did
//! the server's count of streams for its cap. A page now reads one
//! `Query` of at most its size and the path items of that page; the count
//! reads the directory alone, whose entries are keys only, and so does a
//! page of paths alone (`list_paths_page`).

use std::sync::Arc;

use eddy_dynamo::{RequestStats, Table};
use eddy_streams::{Payload, Storage, StreamConfig, StreamPath};

use crate::common;

fn path(s: &str) -> StreamPath {
    StreamPath::new(s).expect("path")
}

async fn counted<T>(
    table: &Arc<dyn Table>,
    call: impl std::future::Future<Output = T>,
) -> (T, RequestStats) {
    let before = table.request_stats();
    let out = call.await;
    (out, table.request_stats() - before)
}

async fn a_page_reads_its_own_records(table: Arc<dyn Table>, streams: usize) {
    let store = eddy_streams_dynamodb::open(Arc::clone(&table), eddy_streams_dynamodb::options())
        .expect("open");
    for n in 0..streams {
        store
            .create(
                &path(&format!("many/{n:05}")),
                StreamConfig::json(),
                Payload::empty(),
            )
            .await
            .expect("create");
    }
    let (page, cost) = counted(&table, store.list_page("many/", None, 100)).await;
    let page = page.expect("page");
    eprintln!("a page of 100: {cost:?}");
    assert_eq!(page.streams.len(), 100);
    assert_eq!(page.next.as_deref(), Some("many/00099"));
    assert_eq!(
        cost.items_read, 200,
        "100 directory entries and their 100 records"
    );
    // (A `BatchGetItem` of up to 100 keys counts as a read on DynamoDB
    // and as a transaction on the embedded table.)
    assert_eq!(
        cost.reads + cost.transactions,
        2,
        "one Query and one BatchGetItem: {cost:?}"
    );

    // Every page in turn, each as cheap.
    let mut after = page.next;
    let mut seen = page.streams.len();
    while let Some(cursor) = after {
        let (page, cost) = counted(&table, store.list_page("many/", Some(&cursor), 100)).await;
        let page = page.expect("page");
        assert!(cost.items_read <= 200, "{cost:?}");
        seen += page.streams.len();
        after = page.next;
    }
    assert_eq!(seen, streams);

    // The paths alone: one `Query` of the directory a page, no record.
    let mut after = None;
    let mut paths = 0;
    loop {
        let (page, cost) = counted(
            &table,
            store.list_paths_page("many/", after.as_deref(), 1000),
        )
        .await;
        let page = page.expect("paths page");
        assert_eq!(cost.items_read, page.paths.len() as u64, "{cost:?}");
        assert_eq!(cost.reads + cost.transactions, 1, "one Query: {cost:?}");
        paths += page.paths.len();
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(paths, streams);

    let (count, cost) = counted(&table, store.count("many/")).await;
    eprintln!("the count: {cost:?}");
    assert_eq!(count.expect("count"), streams);
    assert_eq!(
        cost.items_read, streams as u64,
        "the directory's entries, no record"
    );
    assert_eq!(cost.reads + cost.transactions, 1, "one Query: {cost:?}");

    let (listed, cost) = counted(&table, store.list("many/")).await;
    eprintln!("the whole listing (as before): {cost:?}");
    assert_eq!(listed.expect("list").len(), streams);
    assert_eq!(cost.items_read, 2 * streams as u64);
    let batches = streams.div_ceil(100) as u64;
    assert_eq!(cost.reads + cost.transactions, 1 + batches, "{cost:?}");
}

#[test]
fn a_page_of_a_listing_reads_only_its_own_records() {
    common::runtime().block_on(a_page_reads_its_own_records(common::embedded(), 1000));
}

#[cfg(feature = "aws")]
#[test]
fn a_page_of_a_listing_reads_only_its_own_records_on_moto() {
    common::runtime().block_on(async {
        if let Some(table) = common::moto().await {
            a_page_reads_its_own_records(table, 250).await;
        }
    });
}
