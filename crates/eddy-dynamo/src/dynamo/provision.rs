//! Creating the single table, and checking that an existing one fits.

use std::time::Duration;

use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableDescription, TableStatus,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;

use super::errors::map_sdk;
use crate::error::TableError;
use crate::item::ScalarType;
use crate::key_schema::{KeyDefinition, TableSchema};

/// What [`create_table`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provisioned {
    /// The table was created.
    Created,
    /// The table already existed with the right layout. Nothing changed,
    /// except indexes the schema adds (created, and backfilled by
    /// DynamoDB) and TTL when it was off.
    AlreadyExists,
}

/// Creates the table `schema` describes, idempotently: on-demand capacity,
/// the primary key, every index (projection `ALL`), a stream with
/// `NEW_AND_OLD_IMAGES`, and TTL on the schema's TTL attribute. Waits until
/// the table is active.
///
/// An existing table with the same layout is left as it is, except that
/// indexes the schema adds are created (DynamoDB backfills them from the
/// existing items; this waits until they are active). One with another
/// key, an index with another key, or no stream is
/// [`TableError::Misconfigured`], with what to change.
pub async fn create_table(
    client: &Client,
    schema: &TableSchema,
) -> Result<Provisioned, TableError> {
    let outcome = match describe(client, &schema.name).await? {
        Some(table) => {
            add_missing_indexes(client, schema, &table).await?;
            Provisioned::AlreadyExists
        }
        None => match send_create(client, schema).await {
            Ok(()) => Provisioned::Created,
            Err(CreateFailure::InUse) => Provisioned::AlreadyExists,
            Err(CreateFailure::Other(e)) => return Err(e),
        },
    };
    wait_active(client, &schema.name).await?;
    verify_table(client, schema, true).await?;
    enable_ttl(client, schema).await?;
    Ok(outcome)
}

/// Checks that the table exists with the schema's key and indexes (and a
/// `NEW_AND_OLD_IMAGES` stream when `need_stream`). Returns the stream ARN,
/// if the table has a stream.
pub async fn verify_table(
    client: &Client,
    schema: &TableSchema,
    need_stream: bool,
) -> Result<Option<String>, TableError> {
    let Some(table) = describe(client, &schema.name).await? else {
        return Err(TableError::TableNotFound {
            table: schema.name.clone(),
            message: "DescribeTable found no such table".into(),
        });
    };
    let name = &schema.name;
    let key = key_of(table.key_schema());
    if !same_key(&schema.key, &key) {
        return Err(TableError::Misconfigured {
            message: format!(
                "table {name} has the key {key:?} but this schema needs {:?}; use another table name or recreate the table",
                names(&schema.key)
            ),
        });
    }
    for attr in std::iter::once(&schema.key.partition).chain(schema.key.sort.iter()) {
        let declared = table
            .attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == attr.name)
            .map(|d| d.attribute_type().as_str().to_owned());
        if declared.as_deref() != Some(scalar(attr.kind).as_str()) {
            return Err(TableError::Misconfigured {
                message: format!(
                    "key attribute {} of table {name} is declared {declared:?}, not {:?}; recreate the table",
                    attr.name, attr.kind
                ),
            });
        }
    }
    for index in &schema.indexes {
        let found = table
            .global_secondary_indexes()
            .iter()
            .find(|g| g.index_name() == Some(index.name.as_str()));
        match found {
            Some(g) if same_key(&index.key, &key_of(g.key_schema())) => {}
            Some(g) => {
                return Err(TableError::Misconfigured {
                    message: format!(
                        "index {} of table {name} has the key {:?}, not {:?}; recreate the index",
                        index.name,
                        key_of(g.key_schema()),
                        names(&index.key)
                    ),
                })
            }
            None => {
                return Err(TableError::Misconfigured {
                    message: format!(
                        "table {name} has no index {}: add it (partition {}{}) or run `eddy dynamo create-table` on a new table",
                        index.name,
                        index.key.partition.name,
                        index.key.sort.as_ref().map(|s| format!(", sort {}", s.name)).unwrap_or_default()
                    ),
                })
            }
        }
    }
    let stream = table.stream_specification();
    let enabled = stream.is_some_and(|s| s.stream_enabled());
    let view = stream.and_then(|s| s.stream_view_type().cloned());
    if need_stream && (!enabled || view != Some(StreamViewType::NewAndOldImages)) {
        return Err(TableError::Misconfigured {
            message: format!(
                "table {name} has no stream with NEW_AND_OLD_IMAGES (stream enabled: {enabled}, view: {view:?}); enable it: aws dynamodb update-table --table-name {name} --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES"
            ),
        });
    }
    Ok(table.latest_stream_arn().map(str::to_owned))
}

async fn describe(client: &Client, name: &str) -> Result<Option<TableDescription>, TableError> {
    match client.describe_table().table_name(name).send().await {
        Ok(out) => Ok(out.table),
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(DescribeTableError::ResourceNotFoundException(_))
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(map_sdk(name, e)),
    }
}

enum CreateFailure {
    InUse,
    Other(TableError),
}

async fn send_create(client: &Client, schema: &TableSchema) -> Result<(), CreateFailure> {
    let build = |e: aws_sdk_dynamodb::error::BuildError| {
        CreateFailure::Other(TableError::internal_from("building CreateTable", e))
    };
    let keys = std::iter::once(&schema.key).chain(schema.indexes.iter().map(|i| &i.key));
    let definitions = attribute_definitions(keys).map_err(build)?;
    let mut request = client
        .create_table()
        .table_name(&schema.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(definitions))
        .set_key_schema(Some(key_schema(&schema.key).map_err(build)?))
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(build)?,
        );
    for index in &schema.indexes {
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .set_key_schema(Some(key_schema(&index.key).map_err(build)?))
                .projection(all())
                .build()
                .map_err(build)?,
        );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.as_service_error(),
                Some(CreateTableError::ResourceInUseException(_))
            ) =>
        {
            Err(CreateFailure::InUse)
        }
        Err(e) => Err(CreateFailure::Other(map_sdk(&schema.name, e))),
    }
}

/// Creates the schema's indexes the table lacks, one `UpdateTable` each
/// (DynamoDB creates one index per call), waiting for each to be active.
async fn add_missing_indexes(
    client: &Client,
    schema: &TableSchema,
    table: &TableDescription,
) -> Result<(), TableError> {
    let build = |e| TableError::internal_from("building UpdateTable", e);
    // Every key attribute of the table and its indexes: DynamoDB needs the
    // new index's, and a server that replaces the list keeps the others.
    let keys = std::iter::once(&schema.key).chain(schema.indexes.iter().map(|i| &i.key));
    let definitions = attribute_definitions(keys).map_err(build)?;
    for index in &schema.indexes {
        let present = table
            .global_secondary_indexes()
            .iter()
            .any(|g| g.index_name() == Some(index.name.as_str()));
        if present {
            continue; // its key is checked by `verify_table`
        }
        client
            .update_table()
            .table_name(&schema.name)
            .set_attribute_definitions(Some(definitions.clone()))
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder()
                    .create(
                        CreateGlobalSecondaryIndexAction::builder()
                            .index_name(&index.name)
                            .set_key_schema(Some(key_schema(&index.key).map_err(build)?))
                            .projection(all())
                            .build()
                            .map_err(build)?,
                    )
                    .build(),
            )
            .send()
            .await
            .map_err(|e| map_sdk(&schema.name, e))?;
        wait_active(client, &schema.name).await?;
    }
    Ok(())
}

/// Waits until the table and every index of it are active (indexes are
/// created, and backfilled, after their table).
async fn wait_active(client: &Client, name: &str) -> Result<(), TableError> {
    for _ in 0..1500 {
        let table = describe(client, name).await?;
        let active = table.as_ref().is_some_and(|t| {
            t.table_status() == Some(&TableStatus::Active)
                && t.global_secondary_indexes()
                    .iter()
                    .all(|g| g.index_status().is_none_or(|s| *s == IndexStatus::Active))
        });
        if active {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(TableError::internal(format!(
        "table {name} or one of its indexes did not become ACTIVE within 5 minutes; check it in the console and run the command again"
    )))
}

/// The attribute definitions of these keys, each attribute once.
fn attribute_definitions<'a>(
    keys: impl IntoIterator<Item = &'a KeyDefinition>,
) -> Result<Vec<AttributeDefinition>, aws_sdk_dynamodb::error::BuildError> {
    let mut definitions: Vec<AttributeDefinition> = Vec::new();
    for key in keys {
        for attr in std::iter::once(&key.partition).chain(key.sort.iter()) {
            if definitions.iter().any(|d| d.attribute_name() == attr.name) {
                continue;
            }
            definitions.push(
                AttributeDefinition::builder()
                    .attribute_name(&attr.name)
                    .attribute_type(scalar(attr.kind))
                    .build()?,
            );
        }
    }
    Ok(definitions)
}

/// Every attribute projected into an index.
fn all() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::All)
        .build()
}

async fn enable_ttl(client: &Client, schema: &TableSchema) -> Result<(), TableError> {
    let Some(attribute) = &schema.ttl_attribute else {
        return Ok(());
    };
    let current = client
        .describe_time_to_live()
        .table_name(&schema.name)
        .send()
        .await
        .map_err(|e| map_sdk(&schema.name, e))?;
    let description = current.time_to_live_description();
    let status = description
        .and_then(|d| d.time_to_live_status())
        .map(|s| s.as_str().to_owned());
    let current_attr = description.and_then(|d| d.attribute_name());
    match (status.as_deref(), current_attr) {
        (Some("ENABLED" | "ENABLING"), Some(a)) if a == attribute => return Ok(()),
        (Some("ENABLED" | "ENABLING"), Some(other)) => {
            return Err(TableError::Misconfigured {
                message: format!(
                    "TTL of table {} is on attribute {other}, not {attribute}; disable it first (it can change once per hour)",
                    schema.name
                ),
            })
        }
        _ => {}
    }
    let spec = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(attribute)
        .build()
        .map_err(|e| TableError::internal_from("building UpdateTimeToLive", e))?;
    client
        .update_time_to_live()
        .table_name(&schema.name)
        .time_to_live_specification(spec)
        .send()
        .await
        .map_err(|e| map_sdk(&schema.name, e))?;
    Ok(())
}

fn key_schema(
    key: &KeyDefinition,
) -> Result<Vec<KeySchemaElement>, aws_sdk_dynamodb::error::BuildError> {
    let mut out = vec![KeySchemaElement::builder()
        .attribute_name(&key.partition.name)
        .key_type(KeyType::Hash)
        .build()?];
    if let Some(sort) = &key.sort {
        out.push(
            KeySchemaElement::builder()
                .attribute_name(&sort.name)
                .key_type(KeyType::Range)
                .build()?,
        );
    }
    Ok(out)
}

/// `(partition, sort)` names of a described key.
fn key_of(elements: &[KeySchemaElement]) -> (Option<String>, Option<String>) {
    let find = |kind: KeyType| {
        elements
            .iter()
            .find(|e| *e.key_type() == kind)
            .map(|e| e.attribute_name().to_owned())
    };
    (find(KeyType::Hash), find(KeyType::Range))
}

fn names(key: &KeyDefinition) -> (Option<String>, Option<String>) {
    (
        Some(key.partition.name.clone()),
        key.sort.as_ref().map(|s| s.name.clone()),
    )
}

fn same_key(expected: &KeyDefinition, actual: &(Option<String>, Option<String>)) -> bool {
    names(expected) == *actual
}

fn scalar(kind: ScalarType) -> ScalarAttributeType {
    match kind {
        ScalarType::S => ScalarAttributeType::S,
        ScalarType::N => ScalarAttributeType::N,
        ScalarType::B => ScalarAttributeType::B,
    }
}
