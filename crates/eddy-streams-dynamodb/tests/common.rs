//! The tables the tests run on: the embedded table (memory), and with
//! the `aws` feature a fresh table on moto.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use eddy_dynamo::{EmbeddedTable, Table};

/// A table name no other test uses.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// A fresh embedded table in memory.
pub fn embedded() -> Arc<dyn Table> {
    Arc::new(EmbeddedTable::memory(eddy_streams_dynamodb::layout(
        unique("streams"),
    )))
}

/// A fresh table on moto, or `None` when `EDDY_SKIP_MOTO=1` says to skip
/// moto (without it, a missing `EDDY_DYNAMODB_ENDPOINT` fails the test).
#[cfg(feature = "aws")]
pub async fn moto() -> Option<Arc<dyn Table>> {
    let endpoint = match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if std::env::var("EDDY_SKIP_MOTO").as_deref() == Ok("1") => return None,
        _ => panic!(
            "EDDY_DYNAMODB_ENDPOINT is not set: run `eval \"$(scripts/moto.sh start)\"` first, \
             or set EDDY_SKIP_MOTO=1 to skip the moto tests explicitly"
        ),
    };
    let schema = eddy_streams_dynamodb::layout(unique("streams"));
    let options = moto_options(&endpoint);
    eddy_streams_dynamodb::create_table(&options, &schema.name)
        .await
        .expect("create the table on moto");
    let table = eddy_dynamo::DynamoTable::connect(&options, schema)
        .await
        .expect("connect to moto");
    Some(Arc::new(table))
}

/// Options for moto: its endpoint, a region and test credentials.
#[cfg(feature = "aws")]
pub fn moto_options(endpoint: &str) -> eddy_dynamo::DynamoOptions {
    eddy_dynamo::DynamoOptions::from_env()
        .endpoint(endpoint)
        .region("us-east-1")
        .credentials("testing", "testing")
}

/// A multi-threaded runtime for one test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}
