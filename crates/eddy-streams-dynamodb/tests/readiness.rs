//! Regression (issue 33): the readiness probe (`Storage::writable`, what
//! `/readyz` asks) said yes on DynamoDB whatever the table's state: a
//! server whose table was gone, or unreachable, stayed in the load
//! balancer's pool. It now reads the table.

use eddy_streams::Storage;

use crate::common;

#[tokio::test]
async fn a_store_whose_table_answers_is_ready() {
    let store = eddy_streams_dynamodb::open(common::embedded(), eddy_streams_dynamodb::options())
        .expect("open");
    store.writable().await.expect("ready");
}

/// On moto: the table is deleted behind the server's back; the probe
/// fails with a storage error.
#[cfg(feature = "aws")]
#[tokio::test]
async fn a_store_whose_table_is_gone_is_not_ready() {
    use std::sync::Arc;

    use eddy_dynamo::Table;

    let Ok(endpoint) = std::env::var("EDDY_DYNAMODB_ENDPOINT") else {
        assert!(
            std::env::var("EDDY_SKIP_MOTO").as_deref() == Ok("1"),
            "EDDY_DYNAMODB_ENDPOINT is not set"
        );
        return;
    };
    let schema = eddy_streams_dynamodb::layout(common::unique("readiness"));
    let options = common::moto_options(&endpoint);
    eddy_streams_dynamodb::create_table(&options, &schema.name)
        .await
        .expect("create the table");
    let table = eddy_dynamo::DynamoTable::connect(&options, schema.clone())
        .await
        .expect("connect");
    let client = table.client().clone();
    let store = eddy_streams_dynamodb::open(
        Arc::new(table) as Arc<dyn Table>,
        eddy_streams_dynamodb::options(),
    )
    .expect("open");
    store
        .writable()
        .await
        .expect("ready while the table exists");
    client
        .delete_table()
        .table_name(&schema.name)
        .send()
        .await
        .expect("delete the table");
    let probed = store.writable().await;
    assert!(probed.is_err(), "ready without a table: {probed:?}");
}
