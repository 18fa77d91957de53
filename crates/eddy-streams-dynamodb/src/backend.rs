//! [`DynamoBackend`]: the record backend on one table.

use std::sync::Arc;

use eddy_dynamo::{AttributeValue, Condition, Delete, Query, Table, UpdateItem};
use eddy_streams::backend::{Backend, Commit, Op, StreamRecord};
use eddy_streams::StreamError;

use crate::errors::table_error;
use crate::keys::Keys;
use crate::path_item::{self, PathState};
use crate::query::all_items;
use crate::unit::{DynamoUnit, StreamKey};

/// The default size of a pack of messages: see [`DynamoBackend::with_pack_bytes`].
pub const DEFAULT_PACK_BYTES: usize = 64 * 1024;

/// What the backend's units share.
pub(crate) struct Shared {
    pub table: Arc<dyn Table>,
    pub keys: Keys,
    pub pack_bytes: usize,
}

/// The stream store's records on one DynamoDB table (any
/// [`Table`]: Amazon DynamoDB, or eddy-dynamo's embedded table). See the
/// crate's `DESIGN.md` for the item layout and the commit protocol.
#[derive(Clone)]
pub struct DynamoBackend {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for DynamoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoBackend")
            .field("table", &self.shared.table.schema().name)
            .field("pack_bytes", &self.shared.pack_bytes)
            .finish()
    }
}

impl DynamoBackend {
    /// The backend on `table`, whose key must be a string partition key
    /// and a string sort key (the single-table layout of `eddy dynamo
    /// create-table`; other items of the table are left alone).
    pub fn new(table: Arc<dyn Table>) -> Result<Self, StreamError> {
        let keys = Keys::of(table.schema())?;
        Ok(DynamoBackend {
            shared: Arc::new(Shared {
                table,
                keys,
                pack_bytes: DEFAULT_PACK_BYTES,
            }),
        })
    }

    /// This backend, packing a commit's messages of one stream into items
    /// of up to `bytes` (at least 1 KiB, at most 350 000): larger packs
    /// make fewer items per catch-up read; a live reader reads whole
    /// items, so smaller ones cost it less.
    pub fn with_pack_bytes(self, bytes: usize) -> Self {
        let shared = Shared {
            table: Arc::clone(&self.shared.table),
            keys: self.shared.keys.clone(),
            pack_bytes: bytes.clamp(1024, crate::pack::PART_BYTES),
        };
        DynamoBackend {
            shared: Arc::new(shared),
        }
    }

    /// The table.
    pub fn table(&self) -> &Arc<dyn Table> {
        &self.shared.table
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Deletes the data items of streams removed earlier whose deletion a
    /// crash interrupted (listed in the garbage partition). Returns how
    /// many streams it finished.
    pub async fn purge_pending(&self) -> Result<usize, StreamError> {
        let keys = &self.shared.keys;
        let garbage = Query::partition(keys.garbage());
        let entries = all_items(&*self.shared.table, garbage, "listing removed streams").await?;
        let ids: Vec<Arc<str>> = entries
            .iter()
            .filter_map(|item| keys.sort_of(item).map(Arc::from))
            .collect();
        for id in &ids {
            purge(&self.shared, id).await?;
        }
        Ok(ids.len())
    }
}

/// Deletes the data items of removed streams in a task of its own; a
/// failure leaves them listed for [`DynamoBackend::purge_pending`].
pub(crate) fn purge_later(shared: &Arc<Shared>, ids: Vec<Arc<str>>) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        for id in ids {
            if let Err(error) = purge(&shared, &id).await {
                tracing::warn!(%error, stream = %id, "deleting a removed stream's items; `purge_pending` finishes it");
            }
        }
    });
}

/// Deletes every data item and fork reference of the removed (or never
/// committed) stream `id`, then its garbage entry, in transactions of up
/// to 100 deletes.
async fn purge(shared: &Shared, id: &str) -> Result<(), StreamError> {
    let keys = &shared.keys;
    // Marked first: a new stream whose items were staged under this entry
    // (`staging.rs`) then never commits, or had committed and removed it.
    let mark = UpdateItem::new(
        keys.garbage_entry(id),
        eddy_dynamo::Update::new().set("purging", AttributeValue::Bool(true)),
    )
    .when(Condition::exists(keys.pk.clone()));
    match shared.table.update_item(mark).await {
        Ok(_) => {}
        Err(e) if e.is_condition_failure() => return Ok(()),
        Err(e) => return Err(table_error("marking a garbage entry", e)),
    }
    for partition in [keys.data(id), keys.forks(id)] {
        delete_partition(shared, partition).await?;
    }
    shared
        .table
        .delete_item(Delete::new(keys.garbage_entry(id)))
        .await
        .map_err(|e| table_error("deleting a garbage entry", e))
}

/// Deletes every item of `partition`, 100 per transaction.
async fn delete_partition(shared: &Shared, partition: AttributeValue) -> Result<(), StreamError> {
    let keys = &shared.keys;
    loop {
        let page = shared
            .table
            .query(Query::partition(partition.clone()).limit(crate::commit::MAX_ITEMS))
            .await
            .map_err(|e| table_error("reading a removed stream's items", e))?;
        if page.items.is_empty() {
            return Ok(());
        }
        let deletes = page
            .items
            .iter()
            .filter_map(|item| {
                let mut key = eddy_dynamo::Item::new();
                for name in [&keys.pk, &keys.sk] {
                    key.insert(name.clone(), item.get(name)?.clone());
                }
                Some(Delete::new(key).into())
            })
            .collect();
        shared
            .table
            .transact_write_items(deletes)
            .await
            .map_err(|e| table_error("deleting a removed stream's items", e))?;
    }
}

impl Backend for DynamoBackend {
    type Unit = DynamoUnit;

    /// Items of their own in the table (see `documents.rs`).
    fn documents(&self) -> Option<&dyn eddy_streams::Documents> {
        Some(self)
    }

    /// Its retention queue and drops (`retention.rs`).
    fn applies_retention(&self) -> bool {
        true
    }

    /// Its compaction steps (`compact.rs`).
    fn compacts(&self) -> bool {
        true
    }

    fn open(&self) -> DynamoUnit {
        DynamoUnit::new(Arc::clone(&self.shared))
    }

    fn commit(&self, unit: DynamoUnit) -> impl Op<Commit> {
        unit.commit()
    }

    fn unchanged(&self, unit: DynamoUnit) -> impl Op<bool> {
        unit.unchanged()
    }

    async fn slide(&self, key: &StreamKey, at_ms: i64) -> Result<(), StreamError> {
        let at = AttributeValue::N(at_ms.max(0).to_string());
        let touch = UpdateItem::new(
            self.shared.keys.path(key.path()),
            eddy_dynamo::Update::new().set("acc", at.clone()),
        )
        .when(
            Condition::eq("id", AttributeValue::S(key.id().to_owned())).and(
                Condition::not_exists("acc").or(Condition::compare(
                    "acc",
                    eddy_dynamo::Comparator::Lt,
                    at,
                )),
            ),
        );
        match self.shared.table.update_item(touch).await {
            Ok(_) => Ok(()),
            // Removed, or touched later already.
            Err(e) if e.is_condition_failure() => Ok(()),
            Err(e) => Err(table_error("storing a read's TTL touch", e)),
        }
    }

    /// One strongly consistent `GetItem` of a key no stream uses: the
    /// endpoint answers, the credentials hold, the table exists and may
    /// be read. (Write capacity is not probed: that would cost a write.)
    async fn writable(&self) -> Result<(), StreamError> {
        self.shared
            .table
            .get_item(self.shared.keys.path(""))
            .await
            .map(drop)
            .map_err(|e| table_error("answering the readiness probe", e))
    }

    async fn records(&self, paths: &[String]) -> Result<Vec<Option<StreamRecord>>, StreamError> {
        let keys = &self.shared.keys;
        let items = self
            .shared
            .table
            // A record a moment old only delays a wake to the next poll
            // (a waiter takes a state later than its own, and reads
            // consistently once woken): half the read units.
            .batch_get_item_eventually(paths.iter().map(|path| keys.path(path)).collect())
            .await
            .map_err(|e| table_error("polling stream records", e))?;
        let mut found = std::collections::HashMap::with_capacity(items.len());
        for item in items {
            if let Some(path) = keys.path_of(&item) {
                if let PathState::Stream(stream) = path_item::decode(&item)?.state {
                    found.insert(path, stream.record);
                }
            }
        }
        Ok(paths.iter().map(|path| found.remove(path)).collect())
    }
}
