//! [`DynamoTable`]: the [`Table`] trait on Amazon DynamoDB.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    self as sdk, KeysAndAttributes, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use futures::{StreamExt, TryStreamExt};

use super::convert::{from_sdk_item, from_sdk_opt, to_sdk_item};
use super::errors::{cancelled, map_sdk};
use super::expr::Placeholders;
use super::options::DynamoOptions;
use crate::accounting::{RequestCounter, RequestStats};
use crate::embedded::{validate_query, validate_transaction, validate_writes, Namespace, TableRef};
use crate::error::{CancellationReason, TableError, ValidationError};
use crate::item::Item;
use crate::key_schema::TableSchema;
use crate::query::{Query, QueryPage};
use crate::request::{Delete, Put, TableWrite, TransactWriteItem, UpdateItem};
use crate::table::Table;

/// The most keys one `BatchGetItem` request carries.
const BATCH_GET_KEYS: usize = 100;
/// Attempts at the unprocessed keys of a `BatchGetItem` before giving up.
const BATCH_GET_ATTEMPTS: u32 = 8;
/// How many `BatchGetItem` chunks of one call are in flight at once.
const BATCH_GET_AT_ONCE: usize = 8;

/// A DynamoDB table through `aws-sdk-dynamodb`, with the same semantics and
/// typed errors as [`EmbeddedTable`](crate::EmbeddedTable).
///
/// Every request is validated against the [`TableSchema`] before it is
/// sent, so a request the embedded table refuses is refused here with the
/// same [`ValidationError`] and nothing is written. Conditions and updates
/// are rendered with placeholder names and values only. Throttled requests
/// are retried by the SDK with exponential backoff (see
/// [`DynamoOptions::max_attempts`]); unprocessed batch keys are retried here.
///
/// Cheap to clone: clones share the client and the request counters.
#[derive(Debug, Clone)]
pub struct DynamoTable {
    client: Client,
    schema: Arc<TableSchema>,
    /// The tables one transaction may write beside this one, by name.
    tables: Arc<Mutex<HashMap<String, TableRef>>>,
    requests: RequestCounter,
    /// Attempts per write when transactions conflict (the client's).
    attempts: u32,
    /// The base of the backoff between them (the client's).
    backoff: Duration,
}

impl DynamoTable {
    /// A table over an existing client; the table named in `schema` is
    /// expected to exist with that layout (see [`DynamoTable::connect`] to
    /// check it).
    pub fn new(client: Client, schema: TableSchema) -> Self {
        let retry = client.config().retry_config();
        let first = TableRef {
            schema: Arc::new(schema.clone()),
            ns: Namespace::default(),
        };
        Self {
            tables: Arc::new(Mutex::new(HashMap::from([(schema.name.clone(), first)]))),
            attempts: retry.map_or(3, |r| r.max_attempts()).max(1),
            backoff: retry.map_or(Duration::from_millis(25), |r| r.initial_backoff()),
            client,
            schema: Arc::new(schema),
            requests: RequestCounter::default(),
        }
    }

    /// Connects with `options` and checks that the table exists with the
    /// schema's key and indexes: a missing table is
    /// [`TableError::TableNotFound`], another layout
    /// [`TableError::Misconfigured`].
    pub async fn connect(options: &DynamoOptions, schema: TableSchema) -> Result<Self, TableError> {
        let client = Client::new(&options.sdk_config().await?);
        super::provision::verify_table(&client, &schema, false).await?;
        Ok(Self::new(client, schema))
    }

    /// Another table on the same client, checked as
    /// [`connect`](Self::connect) checks one: a transaction sent to either
    /// may write both ([`Table::transact_write_tables`], one
    /// `TransactWriteItems` naming both tables).
    pub async fn open_table(&self, schema: TableSchema) -> Result<DynamoTable, TableError> {
        super::provision::verify_table(&self.client, &schema, false).await?;
        let table = TableRef {
            ns: Namespace::other(&schema.name)?,
            schema: Arc::new(schema.clone()),
        };
        self.tables
            .lock()
            .map_err(|_| TableError::internal("the table list is poisoned by an earlier panic"))?
            .insert(schema.name.clone(), table);
        Ok(Self {
            schema: Arc::new(schema),
            ..self.clone()
        })
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn name(&self) -> &str {
        &self.schema.name
    }

    /// Sends a write again while it fails with a transaction conflict or
    /// throttling that the SDK does not retry (a cancelled transaction's
    /// reasons), with jittered exponential backoff, up to the client's
    /// attempts. Every attempt is a request: each is counted.
    async fn retrying<T, F, Fut>(&self, mut send: F) -> Result<T, TableError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TableError>>,
    {
        let mut attempt = 1;
        loop {
            match send().await {
                Err(TableError::TransactionConflict { .. } | TableError::Throttled { .. })
                    if attempt < self.attempts =>
                {
                    tokio::time::sleep(jittered(self.backoff, attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn send_transaction(
        &self,
        requests: &[sdk::TransactWriteItem],
        token: &str,
    ) -> Result<(), TableError> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(requests.to_vec()))
            // The caller's token: the SDK's retries of this call, and the
            // caller's re-sends, are idempotent.
            .client_request_token(token)
            .send()
            .await;
        self.requests.transact_write(requests.len());
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    let reasons = e
                        .cancellation_reasons()
                        .iter()
                        .map(|r| {
                            Ok(CancellationReason {
                                code: r.code().unwrap_or("None").to_owned(),
                                item: from_sdk_opt(r.item().cloned())?,
                            })
                        })
                        .collect::<Result<Vec<_>, TableError>>()?;
                    Err(cancelled(
                        reasons,
                        e.message().unwrap_or_default().to_owned(),
                    ))
                }
                _ => Err(map_sdk(self.name(), err)),
            },
        }
    }

    async fn send_put(&self, put: &Put) -> Result<(), TableError> {
        let mut p = Placeholders::default();
        let condition = put.condition.as_ref().map(|c| p.condition(c));
        let result = self
            .client
            .put_item()
            .table_name(self.name())
            .set_item(Some(to_sdk_item(&put.item)))
            .set_condition_expression(condition)
            .set_expression_attribute_names(p.names())
            .set_expression_attribute_values(p.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        self.requests.write();
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(e)) => {
                    condition_failed(e.item().cloned())
                }
                _ => Err(map_sdk(self.name(), err)),
            },
        }
    }

    async fn send_update(&self, update: &UpdateItem) -> Result<Item, TableError> {
        let mut p = Placeholders::default();
        let expression = p.update(&update.update);
        let condition = update.condition.as_ref().map(|c| p.condition(c));
        let result = self
            .client
            .update_item()
            .table_name(self.name())
            .set_key(Some(to_sdk_item(&update.key)))
            .set_update_expression(Some(expression.unwrap_or_else(|| noop_update(&mut p))))
            .set_condition_expression(condition)
            .set_expression_attribute_names(p.names())
            .set_expression_attribute_values(p.values())
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        self.requests.write();
        match result {
            Ok(out) => match from_sdk_opt(out.attributes)? {
                Some(item) => Ok(item),
                // An update that leaves only the key returns nothing.
                None => Ok(update.key.clone()),
            },
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                    condition_failed(e.item().cloned())
                }
                _ => Err(map_sdk(self.name(), err)),
            },
        }
    }

    async fn send_delete(&self, delete: &Delete) -> Result<(), TableError> {
        let mut p = Placeholders::default();
        let condition = delete.condition.as_ref().map(|c| p.condition(c));
        let result = self
            .client
            .delete_item()
            .table_name(self.name())
            .set_key(Some(to_sdk_item(&delete.key)))
            .set_condition_expression(condition)
            .set_expression_attribute_names(p.names())
            .set_expression_attribute_values(p.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        self.requests.write();
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                    condition_failed(e.item().cloned())
                }
                _ => Err(map_sdk(self.name(), err)),
            },
        }
    }

    fn put_request(put: &Put, table: &str) -> Result<sdk::Put, TableError> {
        let mut p = Placeholders::default();
        let condition = put.condition.as_ref().map(|c| p.condition(c));
        let request = sdk::Put::builder()
            .table_name(table)
            .set_item(Some(to_sdk_item(&put.item)))
            .set_condition_expression(condition)
            .set_expression_attribute_names(p.names())
            .set_expression_attribute_values(p.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| TableError::internal_from("building a put", e))?;
        Ok(request)
    }

    fn transact_item(
        table: &str,
        item: &TransactWriteItem,
    ) -> Result<sdk::TransactWriteItem, TableError> {
        let on_fail = ReturnValuesOnConditionCheckFailure::AllOld;
        let build = |e: aws_sdk_dynamodb::error::BuildError| {
            TableError::internal_from("building a transaction item", e)
        };
        let mut p = Placeholders::default();
        let out = match item {
            TransactWriteItem::Put(put) => {
                sdk::TransactWriteItem::builder().put(Self::put_request(put, table)?)
            }
            TransactWriteItem::Update(u) => {
                let update = p.update(&u.update);
                let condition = u.condition.as_ref().map(|c| p.condition(c));
                let request = sdk::Update::builder()
                    .table_name(table)
                    .set_key(Some(to_sdk_item(&u.key)))
                    .set_update_expression(Some(update.unwrap_or_else(|| noop_update(&mut p))))
                    .set_condition_expression(condition)
                    .set_expression_attribute_names(p.names())
                    .set_expression_attribute_values(p.values())
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build)?;
                sdk::TransactWriteItem::builder().update(request)
            }
            TransactWriteItem::Delete(d) => {
                let condition = d.condition.as_ref().map(|c| p.condition(c));
                let request = sdk::Delete::builder()
                    .table_name(table)
                    .set_key(Some(to_sdk_item(&d.key)))
                    .set_condition_expression(condition)
                    .set_expression_attribute_names(p.names())
                    .set_expression_attribute_values(p.values())
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build)?;
                sdk::TransactWriteItem::builder().delete(request)
            }
            TransactWriteItem::ConditionCheck(c) => {
                let condition = p.condition(&c.condition);
                let request = sdk::ConditionCheck::builder()
                    .table_name(table)
                    .set_key(Some(to_sdk_item(&c.key)))
                    .condition_expression(condition)
                    .set_expression_attribute_names(p.names())
                    .set_expression_attribute_values(p.values())
                    .return_values_on_condition_check_failure(on_fail)
                    .build()
                    .map_err(build)?;
                sdk::TransactWriteItem::builder().condition_check(request)
            }
        };
        Ok(out.build())
    }
}

/// The expression of an update without actions (which still creates an
/// absent item, as on the embedded table): a transaction item needs an
/// expression, so it removes an attribute no item carries.
fn noop_update(p: &mut Placeholders) -> String {
    format!("REMOVE {}", p.name("__edd_noop__"))
}

#[async_trait]
impl Table for DynamoTable {
    fn schema(&self) -> &TableSchema {
        &self.schema
    }

    fn request_stats(&self) -> RequestStats {
        self.requests.snapshot()
    }

    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.schema.validate_key(&key)?;
        let result = self
            .client
            .get_item()
            .table_name(self.name())
            .set_key(Some(to_sdk_item(&key)))
            .consistent_read(true)
            .send()
            .await;
        let out = result.map_err(|e| map_sdk(self.name(), e));
        let item = from_sdk_opt(out?.item)?;
        self.requests.read(usize::from(item.is_some()));
        Ok(item)
    }

    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        if keys.len() > 100 {
            return Err(ValidationError::TooManyItems { count: keys.len() }.into());
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        for key in &keys {
            self.schema.validate_key(key)?;
        }
        let gets = keys
            .iter()
            .map(|key| {
                let get = sdk::Get::builder()
                    .table_name(self.name())
                    .set_key(Some(to_sdk_item(key)))
                    .build()
                    .map_err(|e| TableError::internal_from("building a get", e))?;
                Ok(sdk::TransactGetItem::builder().get(get).build())
            })
            .collect::<Result<Vec<_>, TableError>>()?;
        let out = self
            .client
            .transact_get_items()
            .set_transact_items(Some(gets))
            .send()
            .await
            .map_err(|e| map_sdk(self.name(), e))?;
        let responses = out.responses.unwrap_or_default();
        if responses.len() != keys.len() {
            return Err(TableError::internal(format!(
                "TransactGetItems answered {} items for {} keys",
                responses.len(),
                keys.len()
            )));
        }
        let items = responses
            .into_iter()
            .map(|r| from_sdk_opt(r.item))
            .collect::<Result<Vec<_>, _>>()?;
        self.requests
            .transact_read(items.iter().filter(|i| i.is_some()).count());
        Ok(items)
    }

    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        let def = validate_query(&self.schema, &query)?;
        let mut p = Placeholders::default();
        let sort = match (&query.sort, &def.sort) {
            (Some(cond), Some(attr)) => Some((attr.name.as_str(), cond)),
            _ => None,
        };
        let key_condition = p.key_condition(&def.partition.name, &query.partition, sort);
        let limit = sdk_limit(query.limit)?;
        let out = self
            .client
            .query()
            .table_name(self.name())
            .set_index_name(query.index.clone())
            .key_condition_expression(key_condition)
            .set_expression_attribute_names(p.names())
            .set_expression_attribute_values(p.values())
            .scan_index_forward(query.forward)
            .set_limit(limit)
            .set_exclusive_start_key(query.exclusive_start_key.as_ref().map(to_sdk_item))
            // Global secondary indexes only offer eventually consistent reads.
            .consistent_read(query.index.is_none())
            .send()
            .await
            .map_err(|e| map_sdk(self.name(), e))?;
        let page = sdk_page(out.items, out.last_evaluated_key)?;
        self.requests.read(page.items.len());
        Ok(page)
    }

    async fn scan(&self, scan: crate::query::Scan) -> Result<QueryPage, TableError> {
        let limit = sdk_limit(scan.limit)?;
        let out = self
            .client
            .scan()
            .table_name(self.name())
            .set_limit(limit)
            .set_exclusive_start_key(scan.exclusive_start_key.as_ref().map(to_sdk_item))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_sdk(self.name(), e))?;
        let page = sdk_page(out.items, out.last_evaluated_key)?;
        self.requests.read(page.items.len());
        Ok(page)
    }

    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        validate_transaction(&self.schema, &items)?;
        let requests = items
            .iter()
            .map(|i| Self::transact_item(self.name(), i))
            .collect::<Result<Vec<_>, _>>()?;
        // One token for every attempt: an attempt whose answer was lost
        // and that landed makes the next attempt succeed without writing
        // again (within DynamoDB's ten-minute idempotency window).
        let token = request_token();
        self.retrying(|| self.send_transaction(&requests, &token))
            .await
    }

    async fn transact_write_tables(&self, items: Vec<TableWrite>) -> Result<(), TableError> {
        let writes = {
            let tables = self.tables.lock().map_err(|_| {
                TableError::internal("the table list is poisoned by an earlier panic")
            })?;
            items
                .into_iter()
                .map(|w| match tables.get(&w.table) {
                    Some(table) => Ok((table.clone(), w.item)),
                    None => Err(TableError::Misconfigured {
                        message: format!(
                            "table {} is not open beside {}: open it with open_table",
                            w.table,
                            self.name()
                        ),
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        validate_writes(&writes)?;
        let requests = writes
            .iter()
            .map(|(table, item)| Self::transact_item(&table.schema.name, item))
            .collect::<Result<Vec<_>, _>>()?;
        let token = request_token();
        self.retrying(|| self.send_transaction(&requests, &token))
            .await
    }

    async fn put_item(&self, put: Put) -> Result<(), TableError> {
        validate_transaction(&self.schema, &[TransactWriteItem::Put(put.clone())])?;
        self.retrying(|| self.send_put(&put)).await
    }

    async fn update_item(&self, update: UpdateItem) -> Result<Item, TableError> {
        validate_transaction(&self.schema, &[TransactWriteItem::Update(update.clone())])?;
        self.retrying(|| self.send_update(&update)).await
    }

    async fn delete_item(&self, delete: Delete) -> Result<(), TableError> {
        validate_transaction(&self.schema, &[TransactWriteItem::Delete(delete.clone())])?;
        self.retrying(|| self.send_delete(&delete)).await
    }

    async fn batch_get_item(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.batch_get(keys, true).await
    }

    async fn batch_get_item_eventually(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.batch_get(keys, false).await
    }
}

impl DynamoTable {
    /// A `BatchGetItem` of any number of keys, strongly consistent or not.
    async fn batch_get(&self, keys: Vec<Item>, consistent: bool) -> Result<Vec<Item>, TableError> {
        for key in &keys {
            self.schema.validate_key(key)?;
        }
        // DynamoDB refuses a batch with the same key twice.
        let mut seen = HashSet::new();
        let keys: Vec<Item> = keys
            .into_iter()
            .filter(|k| seen.insert(crate::embedded::encode_key_of(&self.schema, k)))
            .collect();
        // The chunks go out at once (a few at a time): a poll of many
        // paths waits for about one request, not one per 100 keys.
        let chunks: Vec<Vec<Item>> = keys.chunks(BATCH_GET_KEYS).map(<[Item]>::to_vec).collect();
        let found: Vec<Vec<Item>> = futures::stream::iter(chunks)
            .map(|chunk| self.batch_get_chunk(chunk, consistent))
            .buffer_unordered(BATCH_GET_AT_ONCE)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// One chunk of a [`Table::batch_get_item`]: at most 100 keys, their
    /// unprocessed keys sent again with backoff.
    async fn batch_get_chunk(
        &self,
        chunk: Vec<Item>,
        consistent: bool,
    ) -> Result<Vec<Item>, TableError> {
        let mut found = Vec::new();
        let mut pending = chunk.iter().map(to_sdk_item).collect::<Vec<_>>();
        let mut attempt = 0;
        while !pending.is_empty() {
            if attempt == BATCH_GET_ATTEMPTS {
                return Err(TableError::Throttled {
                    message: format!(
                        "{} keys of a BatchGetItem stayed unprocessed after {attempt} attempts",
                        pending.len()
                    ),
                });
            }
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            attempt += 1;
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut pending)))
                .consistent_read(consistent)
                .build()
                .map_err(|e| TableError::internal_from("building a batch get", e))?;
            let out = self
                .client
                .batch_get_item()
                .request_items(self.name(), request)
                .send()
                .await
                .map_err(|e| map_sdk(self.name(), e))?;
            let mut responses: HashMap<_, _> = out.responses.unwrap_or_default();
            let items = responses.remove(self.name()).unwrap_or_default();
            self.requests.read(items.len());
            for item in items {
                found.push(from_sdk_item(item)?);
            }
            if let Some(mut unprocessed) = out.unprocessed_keys {
                if let Some(rest) = unprocessed.remove(self.name()) {
                    pending = rest.keys;
                }
            }
        }
        Ok(found)
    }
}

fn condition_failed<T>(
    item: Option<HashMap<String, sdk::AttributeValue>>,
) -> Result<T, TableError> {
    Err(TableError::ConditionalCheckFailed {
        item: from_sdk_opt(item)?.map(Box::new),
    })
}

/// Exponential backoff with full jitter: up to 50 ms × 2^attempt, capped at 5 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let cap = (50u64 << attempt.min(7)).min(5_000);
    Duration::from_millis(fastrand::u64(cap / 2..=cap))
}

/// Exponential backoff from `base` with equal jitter: between half and all
/// of `base × 2^attempt`, capped at 5 s.
fn jittered(base: Duration, attempt: u32) -> Duration {
    let cap = base
        .saturating_mul(1 << attempt.min(10))
        .min(Duration::from_secs(5));
    cap.mul_f64(0.5 + fastrand::f64() / 2.0)
}

/// A random idempotency token for `TransactWriteItems`.
fn request_token() -> String {
    format!("eddy-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// A page's item limit as the SDK takes it.
fn sdk_limit(limit: Option<usize>) -> Result<Option<i32>, TableError> {
    limit
        .map(|l| {
            i32::try_from(l).map_err(|_| {
                ValidationError::InvalidQuery(format!("limit {l} is too large")).into()
            })
        })
        .transpose()
}

/// A `Query` or `Scan` answer as a page.
fn sdk_page(
    items: Option<Vec<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>>,
    last: Option<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>,
) -> Result<QueryPage, TableError> {
    Ok(QueryPage {
        items: items
            .unwrap_or_default()
            .into_iter()
            .map(from_sdk_item)
            .collect::<Result<Vec<_>, _>>()?,
        last_evaluated_key: from_sdk_opt(last)?,
    })
}
