//! Prints the DynamoDB requests the store makes per single append (one
//! caller, then 50 at once), per 100-message producer batch and per
//! catch-up read of 200 × 1 KB, and the wall time of each, and the time
//! of one live poll's `BatchGetItem` of 100 path items, on moto (`EDDY_DYNAMODB_ENDPOINT`, feature
//! `aws`) or else on the embedded table.
//!
//!     cargo run -p eddy-streams-dynamodb --features aws --example requests

use std::sync::Arc;
use std::time::Instant;

use eddy_dynamo::{AttributeValue, Item, RequestStats, Table};
use eddy_streams::{
    Append, Payload, ProducerPosition, ReadFrom, Storage, StreamConfig, StreamPath,
};

fn unique() -> String {
    format!("requests-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

async fn table() -> Arc<dyn Table> {
    #[cfg(feature = "aws")]
    if let Ok(endpoint) = std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        let options = eddy_dynamo::DynamoOptions::from_env()
            .endpoint(endpoint)
            .region("us-east-1")
            .credentials("testing", "testing");
        let name = unique();
        eddy_streams_dynamodb::create_table(&options, &name)
            .await
            .expect("create the table");
        let table =
            eddy_dynamo::DynamoTable::connect(&options, eddy_streams_dynamodb::layout(name))
                .await
                .expect("connect");
        println!("table: moto");
        return Arc::new(table);
    }
    println!("table: embedded (memory)");
    Arc::new(eddy_dynamo::EmbeddedTable::memory(
        eddy_streams_dynamodb::layout(unique()),
    ))
}

fn show(what: &str, calls: u64, stats: RequestStats, started: Instant) {
    let per = |n: u64| n as f64 / calls as f64;
    println!(
        "{what}: {:.2} requests per call ({:.2} reads, {:.2} transactions, {:.2} single writes), \
         {:.1} items read, {:.1} items written; {:.2} ms per call",
        per(stats.reads + stats.transactions + stats.writes),
        per(stats.reads),
        per(stats.transactions),
        per(stats.writes),
        per(stats.items_read),
        per(stats.items_written),
        started.elapsed().as_secs_f64() * 1000.0 / calls as f64,
    );
}

#[tokio::main]
async fn main() -> Result<(), eddy_streams::StreamError> {
    let table = table().await;
    let store = Arc::new(eddy_streams_dynamodb::open(
        Arc::clone(&table),
        eddy_streams_dynamodb::options(),
    )?);
    let one_kb = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1012));

    let singles = StreamPath::new("singles")?;
    store
        .create(&singles, StreamConfig::json(), Payload::empty())
        .await?;
    let (before, started) = (table.request_stats(), Instant::now());
    for _ in 0..200 {
        store.append(&singles, Append::body(one_kb.clone())).await?;
    }
    show(
        "single append of 1 KB",
        200,
        table.request_stats() - before,
        started,
    );

    // The same appends from 50 callers at once: group commit shares
    // transactions between them.
    let concurrent = StreamPath::new("concurrent")?;
    store
        .create(&concurrent, StreamConfig::json(), Payload::empty())
        .await?;
    let (before, started) = (table.request_stats(), Instant::now());
    let callers = (0..50).map(|_| {
        let (store, path, body) = (Arc::clone(&store), concurrent.clone(), one_kb.clone());
        tokio::spawn(async move {
            for _ in 0..4 {
                store.append(&path, Append::body(body.clone())).await?;
            }
            Ok::<_, eddy_streams::StreamError>(())
        })
    });
    for caller in futures::future::join_all(callers).await {
        caller.map_err(|e| eddy_streams::StreamError::internal(e.to_string()))??;
    }
    show(
        "single append of 1 KB, 50 callers at once",
        200,
        table.request_stats() - before,
        started,
    );

    let batches = StreamPath::new("batches")?;
    store
        .create(&batches, StreamConfig::json(), Payload::empty())
        .await?;
    let batch = format!("[{}]", vec![one_kb.as_str(); 100].join(","));
    let (before, started) = (table.request_stats(), Instant::now());
    for seq in 0..20 {
        let append = Append::body(batch.clone()).with_producer(ProducerPosition::new("p", 0, seq));
        store.append(&batches, append).await?;
    }
    show(
        "producer batch of 100 × 1 KB",
        20,
        table.request_stats() - before,
        started,
    );

    let catch_up = StreamPath::new("catch-up")?;
    store
        .create(&catch_up, StreamConfig::json(), Payload::empty())
        .await?;
    for seq in 0..2 {
        let append = Append::body(batch.clone()).with_producer(ProducerPosition::new("p", 0, seq));
        store.append(&catch_up, append).await?;
    }
    for (name, path) in [
        ("appended one by one", &singles),
        ("appended in batches of 100", &catch_up),
    ] {
        let (before, started) = (table.request_stats(), Instant::now());
        for _ in 0..20 {
            let chunk = store.read(path, ReadFrom::Beginning, 1 << 20).await?;
            assert_eq!(chunk.messages.len(), 200);
        }
        show(
            &format!("catch-up read of 200 × 1 KB {name}"),
            20,
            table.request_stats() - before,
            started,
        );
    }

    // What one chunk of the live poll costs: an eventually consistent
    // `BatchGetItem` of 100 path items (the poll sends one per 100
    // waited paths). The key is the layout's path item (src/keys.rs).
    let mut keys: Vec<Item> = Vec::with_capacity(100);
    for i in 0..100 {
        let path = format!("polled-{i}");
        store
            .create(
                &StreamPath::new(&path)?,
                StreamConfig::json(),
                Payload::empty(),
            )
            .await?;
        keys.push(Item::from([
            ("pk".to_owned(), AttributeValue::S(format!("ds|s|{path}"))),
            ("sk".to_owned(), AttributeValue::S("-".into())),
        ]));
    }
    let (before, started) = (table.request_stats(), Instant::now());
    for _ in 0..50 {
        let found = table
            .batch_get_item_eventually(keys.clone())
            .await
            .map_err(|e| eddy_streams::StreamError::internal(e.to_string()))?;
        assert_eq!(found.len(), 100);
    }
    show(
        "poll BatchGetItem of 100 path items",
        50,
        table.request_stats() - before,
        started,
    );
    Ok(())
}
