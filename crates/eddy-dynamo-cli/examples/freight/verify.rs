//! `verify`: checks what `demo` left in DynamoDB through the AWS SDK
//! directly (GetItem and Query), not through eddy's reader, so a fault in
//! eddy's decoding cannot hide one in what it stored. Every difference is
//! listed, and any fails the run.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use eddy_dynamo::{EmbeddedTable, Item};

use crate::expect::{check_notices, expected_checkpoints};
use crate::model::{self, shipment, Freight};
use crate::scenario::expected;

type Raw = HashMap<String, AttributeValue>;

/// Checks the table `table` at `endpoint` after `demo --batch <batch>`.
pub async fn verify(
    endpoint: &str,
    table: &str,
    batch: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let options = eddy_dynamo::DynamoOptions::from_env().endpoint(endpoint);
    let client = Client::new(&options.sdk_config().await?);
    // Only the keys' text is taken from eddy (how it composes a row key);
    // the table is read through the SDK.
    let keys = Freight::new(Arc::new(EmbeddedTable::memory(model::schema(table))))?;
    let mut differences = Vec::new();
    let mut notices_seen = 0;
    for (id, want) in expected() {
        let key = sdk_key(&keys.summaries.key(&shipment(id))?);
        let got = client
            .get_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await?
            .item;
        let Some(item) = got else {
            differences.push(format!("{id}: no item at its key"));
            continue;
        };
        let mut differ = |what: String| differences.push(format!("{id}: {what}"));
        match want {
            Some((parcels, location, kg)) => {
                expect_s(&item, "__edd_e__", "ShipmentSummary", &mut differ);
                expect_n(&item, "parcels", parcels, &mut differ);
                expect_s(&item, "location", location, &mut differ);
                expect_n(&item, "kg", kg, &mut differ);
                if number(&item, "revision").is_none() {
                    differ("no revision".into());
                }
            }
            None => {
                expect_s(&item, "__edd_e__", "ShipmentSummary#tombstone", &mut differ);
                for field in ["parcels", "location", "kg", "shipmentId"] {
                    if item.contains_key(field) {
                        differ(format!("the tombstone keeps {field}"));
                    }
                }
            }
        }
        let checkpoints: Vec<(String, u64)> = match item.get("checkpoints") {
            Some(AttributeValue::M(map)) => {
                let mut entries: Vec<(String, u64)> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), as_number(v).unwrap_or(u64::MAX)))
                    .collect();
                entries.sort();
                entries
            }
            _ => Vec::new(),
        };
        let want_checkpoints: Vec<(String, u64)> = expected_checkpoints(id)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        if checkpoints != want_checkpoints {
            differ(format!(
                "checkpoints {checkpoints:?}, expected {want_checkpoints:?}"
            ));
        }
        // Nothing left in the row's outbox: every notice was delivered.
        let partition = key.get("pk").cloned().unwrap_or(AttributeValue::Null(true));
        let in_partition = query(&client, table, partition).await?;
        let pending = in_partition
            .iter()
            .filter(|i| string(i, "__edd_e__") == Some("ShipmentSummary#outbox"))
            .count();
        if pending > 0 {
            differ(format!("{pending} notice(s) still in the outbox"));
        }
        let notices: Vec<String> =
            query(&client, table, AttributeValue::S(format!("notices#{id}")))
                .await?
                .iter()
                .filter_map(|i| string(i, "kind").map(str::to_owned))
                .collect();
        notices_seen += notices.len();
        if let Err(e) = check_notices(id, &notices, batch) {
            differences.push(e);
        }
    }
    if differences.is_empty() {
        println!(
            "verified through the AWS SDK: {} rows, 1 tombstone, {notices_seen} notices delivered, no pending effects",
            expected().iter().filter(|(_, w)| w.is_some()).count()
        );
        return Ok(());
    }
    for difference in &differences {
        eprintln!("differs: {difference}");
    }
    Err(format!("{} difference(s) in table {table}", differences.len()).into())
}

/// Every item of a partition, in sort key order (all pages).
async fn query(
    client: &Client,
    table: &str,
    partition: AttributeValue,
) -> Result<Vec<Raw>, Box<dyn std::error::Error>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", partition.clone())
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await?;
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

fn sdk_key(key: &Item) -> Raw {
    key.iter()
        .filter_map(|(name, value)| match value {
            eddy_dynamo::AttributeValue::S(text) => {
                Some((name.clone(), AttributeValue::S(text.clone())))
            }
            _ => None,
        })
        .collect()
}

fn string<'a>(item: &'a Raw, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(text)) => Some(text),
        _ => None,
    }
}

fn as_number(value: &AttributeValue) -> Option<u64> {
    match value {
        AttributeValue::N(text) => text.parse().ok(),
        _ => None,
    }
}

fn number(item: &Raw, name: &str) -> Option<u64> {
    item.get(name).and_then(as_number)
}

fn expect_s(item: &Raw, name: &str, want: &str, differ: &mut impl FnMut(String)) {
    let got = string(item, name);
    if got != Some(want) {
        differ(format!("{name} is {got:?}, expected {want:?}"));
    }
}

fn expect_n(item: &Raw, name: &str, want: u64, differ: &mut impl FnMut(String)) {
    let got = number(item, name);
    if got != Some(want) {
        differ(format!("{name} is {got:?}, expected {want}"));
    }
}
