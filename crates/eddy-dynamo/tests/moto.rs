//! The same suites on DynamoDB, through `aws-sdk-dynamodb` against moto's
//! local server (`scripts/moto.sh start` exports `EDDY_DYNAMODB_ENDPOINT`).
//!
//! Without that variable these tests fail, unless `EDDY_SKIP_MOTO=1` says
//! to skip them. Every test makes its own table (a unique name), so tests
//! run in parallel without resetting the server. moto's known differences
//! from DynamoDB are handled here, never in the library:
//!
//! - a write that changes nothing still emits a MODIFY record: the feed
//!   adapter drops MODIFY records whose old and new images are equal (which
//!   DynamoDB never emits);
//! - TTL never expires items: no test waits for expiry on moto;
//! - items over 405 000 bytes are refused (DynamoDB's limit is 409 600);
//! - every stream has the same shard id and sequence numbers start at the
//!   same value for each table: each test reads only its own table's stream.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use eddy_dynamo::{
    ChangeFeed, ChangeRecord, DynamoOptions, DynamoStreams, DynamoTable, FeedPosition, FeedRead,
    TableError, TableSchema,
};

/// The moto endpoint, or `None` when skipping was asked for explicitly.
pub fn endpoint() -> Option<String> {
    match std::env::var("EDDY_DYNAMODB_ENDPOINT") {
        Ok(url) if !url.trim().is_empty() => {
            eprintln!("backend: dynamodb (moto at {url})");
            Some(url)
        }
        _ if std::env::var("EDDY_SKIP_MOTO").as_deref() == Ok("1") => {
            eprintln!("backend: dynamodb SKIPPED (EDDY_SKIP_MOTO=1)");
            None
        }
        _ => panic!(
            "EDDY_DYNAMODB_ENDPOINT is not set, so the DynamoDB backend cannot be tested: \
             run `eval \"$(scripts/moto.sh start)\"` first, or set EDDY_SKIP_MOTO=1 to skip it explicitly"
        ),
    }
}

/// Options for moto: its endpoint, a region and test credentials.
pub fn options(endpoint: &str) -> DynamoOptions {
    DynamoOptions::from_env()
        .endpoint(endpoint)
        .region("us-east-1")
        .credentials("testing", "testing")
}

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

/// A DynamoDB table on moto with its stream as the change feed, and a
/// table for follower checkpoints (shared by the tests of this process).
pub struct MotoTable {
    pub table: DynamoTable,
    pub streams: DynamoStreams,
    pub checkpoints: DynamoTable,
}

/// The checkpoint table of this test process.
fn checkpoint_schema() -> TableSchema {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TableSchema::single_table(NAME.get_or_init(|| unique("checkpoints")).clone())
}

impl MotoTable {
    /// Creates a fresh table with `schema`'s layout under a unique name.
    pub async fn create(schema: TableSchema) -> Option<Arc<MotoTable>> {
        let endpoint = endpoint()?;
        let mut schema = schema;
        schema.name = unique(&schema.name);
        let options = options(&endpoint);
        let client = aws_sdk_dynamodb::Client::new(&options.sdk_config().await.unwrap());
        eddy_dynamo::create_table(&client, &schema).await.unwrap();
        let table = DynamoTable::connect(&options, schema).await.unwrap();
        eddy_dynamo::create_table(&client, &checkpoint_schema())
            .await
            .unwrap();
        let checkpoints = DynamoTable::connect(&options, checkpoint_schema())
            .await
            .unwrap();
        let streams = DynamoStreams::connect(&options, &table)
            .await
            .unwrap()
            .with_checkpoints(Arc::new(checkpoints.clone()))
            .unwrap();
        Some(Arc::new(MotoTable {
            table,
            streams,
            checkpoints,
        }))
    }
}

/// A fresh DynamoDB table on moto as a [`TestTable`](crate::common::TestTable).
pub async fn test_table(schema: TableSchema) -> Option<crate::common::TestTable> {
    let moto = MotoTable::create(schema).await?;
    Some(crate::common::TestTable::new(
        moto.clone(),
        moto,
        "dynamodb",
    ))
}

/// Whether a record is one of moto's no-op MODIFY records.
fn moto_noop(record: &ChangeRecord) -> bool {
    record.event_name == "MODIFY"
        && eddy_dynamo::items_equal(&record.change.old_image, &record.change.new_image)
}

crate::forward_table!(MotoTable);

#[async_trait]
impl ChangeFeed for MotoTable {
    async fn read_changes(
        &self,
        after: Option<&FeedPosition>,
        limit: usize,
    ) -> Result<FeedRead, TableError> {
        let read = self.streams.read_changes(after, usize::MAX).await?;
        let mut out = FeedRead::default();
        for (record, position) in read {
            if !moto_noop(&record) && out.len() < limit {
                out.push(record, position);
            }
        }
        Ok(out)
    }
    async fn load_checkpoint(&self, consumer: &str) -> Result<Option<FeedPosition>, TableError> {
        self.streams.load_checkpoint(consumer).await
    }
    async fn save_checkpoint(
        &self,
        consumer: &str,
        position: &FeedPosition,
    ) -> Result<(), TableError> {
        self.streams.save_checkpoint(consumer, position).await
    }
}

/// Makes a moto table for a contract case, or returns from the test when
/// skipping was asked for.
macro_rules! moto_table {
    ($schema:expr) => {
        match $crate::moto::MotoTable::create($schema).await {
            Some(table) => table,
            None => return,
        }
    };
}

mod contract {
    crate::contract_tests!(
        moto_table!(crate::contract::schema()),
        put_get_round_trips_every_type,
        conditional_put_fails_and_returns_the_item,
        keys_over_dynamodbs_sizes_are_refused,
        condition_tree_is_evaluated,
        update_sets_removes_and_adds,
        conditional_delete,
        transaction_is_all_or_nothing_with_reasons,
        transaction_holds_at_most_100_items,
        transactions_over_4_mb_are_refused,
        transaction_refuses_two_operations_on_one_item,
        keys_are_validated,
        index_membership_is_sparse,
        query_sort_conditions_direction_and_paging,
        batch_and_transactional_get,
        change_feed_records_real_changes_in_order,
        null_attributes_exist_but_read_as_absent,
        attribute_type_tests_the_stored_type,
        sort_key_ranges_on_strings_and_numbers,
        descending_queries_with_limits_page_backward,
        paging_through_an_index_partition_returns_each_item_once,
        a_scan_pages_through_every_item_once,
    );

    /// moto refuses items over 405 000 bytes (DynamoDB: 409 600), so the
    /// largest item stored here is a little smaller; anything over 400 KB
    /// is still refused by the library before it is sent.
    #[tokio::test]
    async fn items_over_400_kb_are_refused() {
        let table = moto_table!(crate::contract::schema());
        crate::contract::items_over_the_limit_are_refused(&*table, 400_000).await;
    }
}

/// What only the DynamoDB backend has: provisioning, the Streams follower,
/// and typed errors for a table that is missing or laid out otherwise.
mod dynamodb_only {
    use std::sync::Arc;

    use eddy_dynamo::{
        create_table, n, s, BatchProjection, ChangeFeed, Condition, DynamoStreams, DynamoTable,
        FeedPosition, Item, Provisioned, Put, StreamsFollower, Table, TableSchema,
    };

    use super::{endpoint, options, unique};
    use crate::common::{line, orders, placed, summary_of, summary_projection, Only, TestTable};

    async fn client(endpoint: &str) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&options(endpoint).sdk_config().await.unwrap())
    }

    #[tokio::test]
    async fn create_table_is_idempotent_and_checks_an_existing_layout() {
        let Some(endpoint) = endpoint() else { return };
        let client = client(&endpoint).await;
        let schema = TableSchema::single_table(unique("prov"))
            .with_index("gsi1", "gsi1pk", Some("gsi1sk"))
            .with_ttl("expires");
        assert_eq!(
            create_table(&client, &schema).await.unwrap(),
            Provisioned::Created
        );
        assert_eq!(
            create_table(&client, &schema).await.unwrap(),
            Provisioned::AlreadyExists
        );
        let described = client
            .describe_table()
            .table_name(&schema.name)
            .send()
            .await
            .unwrap();
        let table = described.table.unwrap();
        let stream = table.stream_specification().unwrap();
        assert!(stream.stream_enabled());
        assert_eq!(
            stream.stream_view_type().map(|v| v.as_str()),
            Some("NEW_AND_OLD_IMAGES")
        );
        assert_eq!(table.global_secondary_indexes().len(), 1);
        let ttl = client
            .describe_time_to_live()
            .table_name(&schema.name)
            .send()
            .await
            .unwrap();
        assert_eq!(
            ttl.time_to_live_description()
                .and_then(|d| d.attribute_name()),
            Some("expires")
        );

        // An index with the same name and another key: a typed error.
        let mut other = schema.clone();
        other.indexes[0].key.sort = None;
        let err = create_table(&client, &other).await.unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        assert!(err.to_string().contains("gsi1"), "{err}");
    }

    /// The schema of an existing table gains an index: `create_table` adds
    /// it, and it covers the items written before (DynamoDB backfills a new
    /// index), as reopening a SQLite table with it does.
    #[tokio::test]
    async fn an_index_added_to_an_existing_table_covers_its_items() {
        let Some(endpoint) = endpoint() else { return };
        let client = client(&endpoint).await;
        let schema = TableSchema::single_table(unique("backfill"));
        create_table(&client, &schema).await.unwrap();
        let table = DynamoTable::connect(&options(&endpoint), schema.clone())
            .await
            .unwrap();
        let before = crate::contract::index_backfill_items();
        for item in &before {
            table.put_item(Put::new(item.clone())).await.unwrap();
        }
        let wider = schema.with_index("byOwner", "ownerpk", Some("ownersk"));
        assert_eq!(
            create_table(&client, &wider).await.unwrap(),
            Provisioned::AlreadyExists
        );
        let table = DynamoTable::connect(&options(&endpoint), wider)
            .await
            .unwrap();
        crate::contract::the_added_index_covers_the_items(&table).await;
    }

    #[tokio::test]
    async fn a_missing_table_or_another_key_schema_is_a_typed_error() {
        let Some(endpoint) = endpoint() else { return };
        let options = options(&endpoint);
        let missing = TableSchema::single_table(unique("missing"));
        let err = DynamoTable::connect(&options, missing.clone())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "ResourceNotFoundException");
        assert!(
            err.to_string().contains("eddy dynamo create-table"),
            "{err}"
        );
        // Without the check, the first request says the same.
        let unchecked = DynamoTable::new(client(&endpoint).await, missing);
        let key = Item::from([("pk".to_owned(), s("p")), ("sk".to_owned(), s("s"))]);
        let err = unchecked.get_item(key).await.unwrap_err();
        assert_eq!(err.code(), "ResourceNotFoundException");

        let mut other = TableSchema::single_table(unique("otherkey"));
        other.key.sort = None;
        create_table(&client(&endpoint).await, &other)
            .await
            .unwrap();
        let mut expected = TableSchema::single_table(other.name.clone());
        expected.key.partition.name = "pk".into();
        let err = DynamoTable::connect(&options, expected).await.unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        assert!(err.to_string().contains("key"), "{err}");
    }

    /// Creates a single table `name` with the SDK alone, with a stream of
    /// `view` if given.
    async fn create_raw(
        client: &aws_sdk_dynamodb::Client,
        name: &str,
        view: Option<aws_sdk_dynamodb::types::StreamViewType>,
    ) {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
            StreamSpecification,
        };
        let mut request = client
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest);
        for (attribute, kind) in [("pk", KeyType::Hash), ("sk", KeyType::Range)] {
            request = request
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(attribute)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .unwrap(),
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(attribute)
                        .key_type(kind)
                        .build()
                        .unwrap(),
                );
        }
        if let Some(view) = view {
            request = request.stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(view)
                    .build()
                    .unwrap(),
            );
        }
        request.send().await.unwrap();
    }

    #[tokio::test]
    async fn a_table_without_a_stream_is_refused_by_the_streams_reader() {
        let Some(endpoint) = endpoint() else { return };
        let client = client(&endpoint).await;
        let name = unique("nostream");
        create_raw(&client, &name, None).await;
        let options = options(&endpoint);
        let table = DynamoTable::connect(&options, TableSchema::single_table(name))
            .await
            .unwrap();
        let err = DynamoStreams::connect(&options, &table).await.unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        assert!(err.to_string().contains("NEW_AND_OLD_IMAGES"), "{err}");
    }

    /// Regression (issue 25): on a stream without new images (`KEYS_ONLY`),
    /// every event record was acknowledged as "not an event", and every
    /// projection silently fell behind. Now `create_table` and the streams
    /// follower refuse such a stream (`table/misconfigured`), and a record
    /// without its new image fails, not retryably, with `MissingNewImage`.
    #[tokio::test]
    async fn a_stream_without_new_images_is_refused() {
        use aws_sdk_dynamodb::types::StreamViewType;
        let Some(endpoint) = endpoint() else { return };
        let client = client(&endpoint).await;
        let name = unique("keysonly");
        create_raw(&client, &name, Some(StreamViewType::KeysOnly)).await;
        let schema = TableSchema::single_table(name.clone());
        let err = create_table(&client, &schema).await.unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        assert!(
            err.to_string().contains("KEYS_ONLY") || err.to_string().contains("KeysOnly"),
            "{err}"
        );

        let options = options(&endpoint);
        let table = DynamoTable::connect(&options, schema).await.unwrap();
        let arn = client
            .describe_table()
            .table_name(&name)
            .send()
            .await
            .unwrap()
            .table
            .and_then(|t| t.latest_stream_arn)
            .unwrap();
        let config = options.sdk_config().await.unwrap();
        let streams = DynamoStreams::new(aws_sdk_dynamodbstreams::Client::new(&config), arn, name);
        let t = TestTable::new(
            Arc::new(table.clone()),
            Arc::new(crate::common::table()),
            "dynamodb",
        );
        let stream = orders(&t);
        let id = stream.id([("orderId", "o-1")]).unwrap();
        stream.append(&id, &[placed("ann")], 0).await.unwrap();
        let p = summary_projection(&t, false);

        let checkpoints = super::MotoTable::create(crate::common::schema())
            .await
            .unwrap();
        let follower = StreamsFollower::new(
            streams.clone(),
            Arc::new(checkpoints.checkpoints.clone()),
            "keys-only",
        )
        .unwrap();
        let err = follower
            .poll_once(&[&p as &dyn BatchProjection])
            .await
            .unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        assert!(err.to_string().contains("KEYS_ONLY"), "{err}");

        let err = streams.shards().await.unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");
        // Read with the SDK's shard list, the records carry keys only.
        let described = aws_sdk_dynamodbstreams::Client::new(&config)
            .describe_stream()
            .stream_arn(streams.stream_arn())
            .send()
            .await
            .unwrap();
        let shard = described.stream_description.unwrap().shards()[0]
            .shard_id()
            .unwrap()
            .to_owned();
        let read = streams.read_shard(&shard, None, 100).await.unwrap();
        assert_eq!(read.records.len(), 1);
        let result = eddy_dynamo::process_batch(&read.records, &[&p as &dyn BatchProjection]).await;
        assert_eq!(result.failures.len(), 1, "{:?}", result.ignored);
        assert_eq!(result.failures[0].code, "MissingNewImage");
        assert!(
            result.failures[0].message.contains("KEYS_ONLY"),
            "{}",
            result.failures[0].message
        );
    }

    #[tokio::test]
    async fn hostile_attribute_names_and_values_stay_placeholders() {
        let Some(t) = super::test_table(crate::contract::schema()).await else {
            return;
        };
        let name = "v) OR attribute_exists(pk";
        let mut item = Item::from([("pk".to_owned(), s("p")), ("sk".to_owned(), s("s"))]);
        item.insert(name.to_owned(), n(1));
        t.put_item(Put::new(item.clone())).await.unwrap();
        // Spliced into the expression, this would hold through `attribute_exists(pk)`.
        let err = t
            .put_item(Put::new(item.clone()).when(Condition::eq(name, n(2))))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "ConditionalCheckFailed");
        t.put_item(Put::new(item).when(Condition::eq(name, n(1))))
            .await
            .unwrap();
    }

    /// Follower names differ per table: the tests share one checkpoint table.
    fn follower_name(moto: &super::MotoTable) -> String {
        format!("summaries-{}", moto.table.schema().name)
    }

    async fn moto() -> Option<(TestTable, Arc<super::MotoTable>)> {
        let moto = super::MotoTable::create(crate::common::schema()).await?;
        let t = TestTable::new(moto.clone(), moto.clone(), "dynamodb");
        Some((t, moto))
    }

    #[tokio::test]
    async fn the_streams_follower_feeds_projections_and_resumes_per_shard() {
        let Some((t, moto)) = moto().await else {
            return;
        };
        let stream = orders(&t);
        let id = stream.id([("orderId", "o-1")]).unwrap();
        stream
            .append(&id, &[placed("ann"), line(1, 10)], 0)
            .await
            .unwrap();
        let p = summary_projection(&t, false);
        // Checkpoints in the followed table would feed the stream itself.
        let same: Arc<dyn Table> = Arc::new(moto.table.clone());
        let err = StreamsFollower::new(moto.streams.clone(), same, "summaries").unwrap_err();
        assert_eq!(err.code(), "table/misconfigured");

        let checkpoints: Arc<dyn Table> = Arc::new(moto.checkpoints.clone());
        let follower = StreamsFollower::new(
            moto.streams.clone(),
            checkpoints.clone(),
            follower_name(&moto),
        )
        .unwrap()
        .batch_size(2);
        let processed = follower
            .catch_up(&[&p as &dyn BatchProjection])
            .await
            .unwrap();
        assert!(processed >= 2, "{processed}");
        let row = summary_of(&t, "o-1").await;
        assert_eq!(row.total_cents, 10);
        let shards = moto.streams.shards().await.unwrap();
        assert!(!shards.is_empty());
        let checkpoint = follower.checkpoint(&shards[0].id).await.unwrap();
        assert!(checkpoint.sequence.is_some());

        // A new follower (a restarted service) starts from the checkpoint.
        stream.append(&id, &[line(2, 5)], 2).await.unwrap();
        let restarted =
            StreamsFollower::new(moto.streams.clone(), checkpoints, follower_name(&moto)).unwrap();
        let results = restarted
            .poll_once(&[&p as &dyn BatchProjection])
            .await
            .unwrap();
        let records: usize = results.iter().map(|r| r.records).sum();
        let applied: usize = results
            .iter()
            .flat_map(|r| r.rows.iter())
            .map(|row| row.only().applied.len())
            .sum();
        assert_eq!(applied, 1, "only the new event is applied");
        assert!(
            results.iter().all(|r| r
                .rows
                .iter()
                .all(|row| row.only().already_applied.is_empty())),
            "nothing before the checkpoint is read again ({records} records)"
        );
        let row = summary_of(&t, "o-1").await;
        assert_eq!(row.total_cents, 20);
    }

    /// With a deliver, the streams follower delivers each written row's
    /// outbox effects right after its write.
    #[tokio::test]
    async fn the_streams_follower_delivers_outbox_effects() {
        use crate::freight::{Freight, ShipmentNotice};
        use crate::multi::{append, scan_id, scanned};

        let Some((t, moto)) = moto().await else {
            return;
        };
        let f = Freight::new(t.table.clone()).unwrap();
        let outbox = eddy_dynamo::Outbox::new(&f.summaries)
            .and_then(|o| o.with_index("gsi1"))
            .unwrap();
        let projection = f.projection(Some(Arc::new(outbox))).unwrap();
        append(&f.scans, &scan_id(&f, "sh-1"), &[scanned("depot")]).await;
        append(&f.scans, &scan_id(&f, "sh-2"), &[scanned("dock")]).await;
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let deliver = {
            let seen = seen.clone();
            move |effect: eddy_dynamo::Effect| {
                let seen = seen.clone();
                async move {
                    let notice: ShipmentNotice = effect.decode()?;
                    seen.lock().unwrap().push(notice.kind);
                    Ok::<(), eddy_dynamo::BoxError>(())
                }
            }
        };
        let checkpoints: Arc<dyn Table> = Arc::new(moto.checkpoints.clone());
        let follower =
            StreamsFollower::new(moto.streams.clone(), checkpoints, follower_name(&moto))
                .unwrap()
                .deliver(deliver);
        follower
            .catch_up(&[&projection as &dyn BatchProjection])
            .await
            .unwrap();
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, ["at depot", "at dock"]);
        assert!(projection.pending_rows().await.unwrap().is_empty());
    }

    /// Regression (issue 33): a position saved by the previous release is
    /// a record's sequence number, read (upgraded) as a floor below which
    /// records do not count. Reading applied the batch limit before the
    /// floor, so a consumer with more than `limit` records at or below its
    /// floor read an empty batch forever. Now the floor is applied first,
    /// and the positions read from there are the feed's own.
    #[tokio::test]
    async fn an_older_position_with_more_records_below_it_than_the_limit_makes_progress() {
        let Some((_, moto)) = moto().await else {
            return;
        };
        for i in 0..12 {
            let item = Item::from([
                ("pk".to_owned(), s(format!("item-{i:02}"))),
                ("sk".to_owned(), s("x")),
            ]);
            moto.table.put_item(Put::new(item)).await.unwrap();
        }
        let all = moto
            .streams
            .read_changes(None, 100)
            .await
            .unwrap()
            .into_records();
        assert_eq!(all.len(), 12);
        let sequences = |records: &[eddy_dynamo::ChangeRecord]| -> Vec<String> {
            records
                .iter()
                .filter_map(|r| r.change.sequence_number.clone())
                .collect()
        };
        // The previous release saved the 8th record's sequence number.
        let saved = all[7].change.sequence_number.clone().unwrap();
        let upgraded = FeedPosition::upgrade(&saved).unwrap();
        let read = moto.streams.read_changes(Some(&upgraded), 3).await.unwrap();
        assert_eq!(sequences(read.records()), sequences(&all[8..11]));
        // From the position the feed gave, the last record follows.
        let rest = moto
            .streams
            .read_changes(read.last_position(), 3)
            .await
            .unwrap();
        assert_eq!(sequences(rest.records()), sequences(&all[11..]));
        // A bare sequence number is no position; an embedded table's
        // position is refused by a DynamoDB stream, and the other way round.
        assert_eq!(
            saved.parse::<FeedPosition>().unwrap_err().code(),
            "feed-position/invalid"
        );
        let embedded = eddy_dynamo::EmbeddedTable::memory(TableSchema::single_table("other"));
        embedded
            .put_item(Put::new(Item::from([
                ("pk".to_owned(), s("a")),
                ("sk".to_owned(), s("x")),
            ])))
            .await
            .unwrap();
        let theirs = embedded.read_changes(None, 1).await.unwrap();
        let err = moto
            .streams
            .read_changes(theirs.last_position(), 3)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "feed-position/other-feed");
        let err = embedded
            .read_changes(read.last_position(), 3)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "feed-position/other-feed");
        let err = moto
            .streams
            .save_checkpoint("wrong", theirs.last_position().unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.code(), "feed-position/other-feed");

        // A follower whose checkpoint item the previous release wrote goes
        // on from there, in batches smaller than what lies below it.
        let name = follower_name(&moto);
        moto.checkpoints
            .put_item(Put::new(Item::from([
                ("pk".to_owned(), s(format!("$eddy#streams#{name}"))),
                (
                    "sk".to_owned(),
                    s(format!("{}#*", moto.streams.stream_arn())),
                ),
                ("sequence".to_owned(), s(saved)),
            ])))
            .await
            .unwrap();
        let follower = eddy_dynamo::Follower::new(moto.streams.clone(), name).batch_size(3);
        assert_eq!(follower.catch_up(&[]).await.unwrap(), 4);
        assert_eq!(follower.catch_up(&[]).await.unwrap(), 0);
        // The checkpoint it saved is the feed's own position now.
        let checkpoint = follower.checkpoint().await.unwrap().unwrap();
        assert!(
            checkpoint
                .to_string()
                .starts_with(r#"{"feed":"dynamodb-streams""#),
            "{checkpoint}"
        );
    }

    #[tokio::test]
    async fn the_streams_follower_holds_a_failed_record() {
        let Some((t, moto)) = moto().await else {
            return;
        };
        let stream = orders(&t);
        let id = stream.id([("orderId", "o-1")]).unwrap();
        stream
            .append(&id, &[line(1, 10), placed("ann")], 0)
            .await
            .unwrap(); // a line before placement fails
        let p = summary_projection(&t, false);
        let follower = StreamsFollower::new(
            moto.streams.clone(),
            Arc::new(moto.checkpoints.clone()),
            follower_name(&moto),
        )
        .unwrap();
        let results = follower
            .poll_once(&[&p as &dyn BatchProjection])
            .await
            .unwrap();
        assert_eq!(results[0].first_failure(), Some(0));
        let shards = moto.streams.shards().await.unwrap();
        assert_eq!(
            follower.checkpoint(&shards[0].id).await.unwrap().sequence,
            None
        );
        let again = follower
            .poll_once(&[&p as &dyn BatchProjection])
            .await
            .unwrap();
        assert_eq!(again[0].failures[0].code, "EvolveFailed");
    }
}

/// Whether moto's conditional writes are atomic, asked through the AWS SDK
/// alone (no eddy code on the write path): racing conditional puts on one
/// key, of which DynamoDB lets exactly one succeed.
mod conditional_races {
    use aws_sdk_dynamodb::types::AttributeValue;
    use eddy_dynamo::TableSchema;

    use super::{endpoint, options, unique};

    /// Racing writers per key.
    const WRITERS: usize = 8;
    /// Keys raced, at most.
    const ROUNDS: usize = 5;
    /// Attributes per item: moto builds the new item between reading the
    /// current one and storing it, so a bigger item widens the window
    /// (with 300, every round measured on moto's own threaded server let
    /// several writers in).
    const ATTRIBUTES: usize = 300;

    /// Races `WRITERS` puts of one new item, each conditioned on
    /// `attribute_not_exists(pk)`, for each round's key, and returns how
    /// many rounds let more than one of them succeed (stopping at the
    /// first such round) and how many rounds ran.
    async fn race_creates(client: &aws_sdk_dynamodb::Client, table: &str) -> (usize, usize) {
        for round in 0..ROUNDS {
            let puts = (0..WRITERS).map(|writer| {
                let client = client.clone();
                let table = table.to_owned();
                let padding =
                    (0..ATTRIBUTES).map(|a| (format!("a{a}"), AttributeValue::N(a.to_string())));
                let put = client
                    .put_item()
                    .table_name(table)
                    .item("pk", AttributeValue::S(format!("race-{round}")))
                    .item("sk", AttributeValue::S("x".into()))
                    .item("writer", AttributeValue::N(writer.to_string()))
                    .condition_expression("attribute_not_exists(pk)");
                let put = padding.fold(put, |put, (name, value)| put.item(name, value));
                tokio::spawn(async move { put.send().await.is_ok() })
            });
            let won = futures::future::join_all(puts)
                .await
                .into_iter()
                .filter(|r| matches!(r, Ok(true)))
                .count();
            assert!(won >= 1, "round {round}: no writer created the item");
            if won > 1 {
                return (1, round + 1);
            }
        }
        (0, ROUNDS)
    }

    /// moto's own server (5.x) evaluates a write's condition and stores
    /// the item without a lock spanning both, on several threads: two puts
    /// conditioned on `attribute_not_exists(pk)` for one key could both
    /// succeed, which DynamoDB never allows. The harness's server
    /// (`scripts/moto_serial.py`, started by `scripts/moto.sh`) answers one
    /// request at a time, so its conditional writes are atomic as
    /// DynamoDB's: exactly one racing create wins. The concurrent-writers
    /// test relies on it (one revision per write, on moto too).
    #[tokio::test]
    async fn racing_conditional_puts_on_one_key_let_exactly_one_through() {
        let Some(endpoint) = endpoint() else { return };
        let client = aws_sdk_dynamodb::Client::new(&options(&endpoint).sdk_config().await.unwrap());
        let schema = TableSchema::single_table(unique("race"));
        eddy_dynamo::create_table(&client, &schema).await.unwrap();
        let (doubled, rounds) = race_creates(&client, &schema.name).await;
        eprintln!("moto: {doubled} doubled create in {rounds} round(s) of {WRITERS} racing conditional puts");
        assert_eq!(
            doubled, 0,
            "a round of {WRITERS} racing conditional puts let two succeed: is moto served by scripts/moto_serial.py?"
        );
    }
}
