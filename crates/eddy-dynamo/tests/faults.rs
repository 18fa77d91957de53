//! A table that fails chosen calls with a transient error, in front of any
//! backend: gap-fill reads, row reads, row writes, and writes whose
//! acknowledgement is lost (they happen, the caller hears an error); and
//! that runs a hook right before a chosen read, to let a concurrent writer
//! in at a known point.

use std::sync::{Arc, Mutex};

use eddy_dynamo::{
    get_str, Delete, Item, Put, Query, QueryPage, Table, TableError, TableSchema, TableWrite,
    TransactWriteItem, UpdateItem,
};

/// Which call a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A `Query` of a partition (gap fill reads an event stream's).
    Query,
    /// A `GetItem` (a row read).
    GetItem,
    /// A write (put or transaction) that fails before it happens.
    Write,
    /// A write that happens, but whose caller hears a transient error.
    AckLost,
}

/// One armed fault: the next `times` calls of `call` whose partition key
/// contains `partition` fail.
#[derive(Debug, Clone)]
pub struct Fault {
    pub call: Call,
    pub partition: String,
    pub times: usize,
}

impl Fault {
    pub fn new(call: Call, partition: impl Into<String>, times: usize) -> Self {
        Self {
            call,
            partition: partition.into(),
            times,
        }
    }
}

/// A future run once, at a chosen call.
pub type Hook = futures::future::BoxFuture<'static, ()>;

/// The table, with faults armed by [`Faulty::arm`] and a hook set by
/// [`Faulty::before`].
pub struct Faulty {
    table: Arc<dyn Table>,
    armed: Mutex<Vec<Fault>>,
    hits: Mutex<usize>,
    hook: Mutex<Option<(Call, String, Hook)>>,
}

impl Faulty {
    pub fn new(table: Arc<dyn Table>) -> Arc<Self> {
        Arc::new(Self {
            table,
            armed: Mutex::new(Vec::new()),
            hits: Mutex::new(0),
            hook: Mutex::new(None),
        })
    }

    /// Runs `hook` right before the next `call` (`Query` or `GetItem`) of
    /// a partition containing `partition`: a deterministic place to let a
    /// concurrent writer in (no sleeps).
    pub fn before(&self, call: Call, partition: impl Into<String>, hook: Hook) {
        *self.hook.lock().unwrap() = Some((call, partition.into(), hook));
    }

    /// Whether the hook ran.
    pub fn ran(&self) -> bool {
        self.hook.lock().unwrap().is_none()
    }

    async fn hooked(&self, call: Call, pk: Option<&eddy_dynamo::AttributeValue>) {
        let pk = match pk {
            Some(eddy_dynamo::AttributeValue::S(text)) => text.as_str(),
            _ => "",
        };
        let hook = {
            let mut slot = self.hook.lock().unwrap();
            match slot.as_ref() {
                Some((c, p, _)) if *c == call && pk.contains(p.as_str()) => slot.take(),
                _ => None,
            }
        };
        if let Some((_, _, hook)) = hook {
            hook.await;
        }
    }

    pub fn arm(&self, fault: Fault) {
        self.armed.lock().unwrap().push(fault);
    }

    /// Disarms every fault.
    pub fn disarm(&self) {
        self.armed.lock().unwrap().clear();
    }

    /// How many calls failed so far.
    pub fn hits(&self) -> usize {
        *self.hits.lock().unwrap()
    }

    /// Whether this call fails now (and counts it).
    fn strikes(&self, call: Call, key: Option<&Item>) -> bool {
        let pk = key.and_then(|k| get_str(k, "pk")).unwrap_or_default();
        let mut armed = self.armed.lock().unwrap();
        let hit = armed
            .iter_mut()
            .find(|f| f.call == call && f.times > 0 && pk.contains(&f.partition));
        match hit {
            Some(fault) => {
                fault.times -= 1;
                *self.hits.lock().unwrap() += 1;
                true
            }
            None => false,
        }
    }

    fn transient(call: Call) -> TableError {
        TableError::Unavailable {
            message: format!("injected fault on {call:?}"),
            source: None,
        }
    }

    /// Whether a write of these items fails before or after it happens.
    fn write_fault(&self, items: &[&Item]) -> Option<Call> {
        for item in items {
            if self.strikes(Call::Write, Some(item)) {
                return Some(Call::Write);
            }
            if self.strikes(Call::AckLost, Some(item)) {
                return Some(Call::AckLost);
            }
        }
        None
    }

    async fn written<T>(
        &self,
        fault: Option<Call>,
        write: impl std::future::Future<Output = Result<T, TableError>>,
    ) -> Result<T, TableError> {
        match fault {
            Some(Call::Write) => Err(Self::transient(Call::Write)),
            Some(Call::AckLost) => {
                write.await?;
                Err(Self::transient(Call::AckLost))
            }
            _ => write.await,
        }
    }
}

fn key_of(item: &TransactWriteItem) -> &Item {
    match item {
        TransactWriteItem::Put(put) => &put.item,
        TransactWriteItem::Update(update) => &update.key,
        TransactWriteItem::Delete(delete) => &delete.key,
        TransactWriteItem::ConditionCheck(check) => &check.key,
    }
}

#[async_trait::async_trait]
impl Table for Faulty {
    fn schema(&self) -> &TableSchema {
        self.table.schema()
    }
    fn request_stats(&self) -> eddy_dynamo::RequestStats {
        self.table.request_stats()
    }
    fn rows_at_once(&self) -> usize {
        self.table.rows_at_once()
    }
    async fn get_item(&self, key: Item) -> Result<Option<Item>, TableError> {
        self.hooked(Call::GetItem, key.get("pk")).await;
        if self.strikes(Call::GetItem, Some(&key)) {
            return Err(Self::transient(Call::GetItem));
        }
        self.table.get_item(key).await
    }
    async fn transact_get_items(&self, keys: Vec<Item>) -> Result<Vec<Option<Item>>, TableError> {
        self.table.transact_get_items(keys).await
    }
    async fn query(&self, query: Query) -> Result<QueryPage, TableError> {
        self.hooked(Call::Query, Some(&query.partition)).await;
        let partition = Item::from([("pk".to_owned(), query.partition.clone())]);
        if self.strikes(Call::Query, Some(&partition)) {
            return Err(Self::transient(Call::Query));
        }
        self.table.query(query).await
    }
    async fn transact_write_items(&self, items: Vec<TransactWriteItem>) -> Result<(), TableError> {
        let fault = self.write_fault(&items.iter().map(key_of).collect::<Vec<_>>());
        self.written(fault, self.table.transact_write_items(items))
            .await
    }
    async fn transact_write_tables(&self, items: Vec<TableWrite>) -> Result<(), TableError> {
        let fault = self.write_fault(&items.iter().map(|w| key_of(&w.item)).collect::<Vec<_>>());
        self.written(fault, self.table.transact_write_tables(items))
            .await
    }
    async fn put_item(&self, put: Put) -> Result<(), TableError> {
        let fault = self.write_fault(&[&put.item]);
        self.written(fault, self.table.put_item(put)).await
    }
    async fn update_item(&self, update: UpdateItem) -> Result<Item, TableError> {
        self.table.update_item(update).await
    }
    async fn delete_item(&self, delete: Delete) -> Result<(), TableError> {
        self.table.delete_item(delete).await
    }
    async fn batch_get_item(&self, keys: Vec<Item>) -> Result<Vec<Item>, TableError> {
        self.table.batch_get_item(keys).await
    }
}
