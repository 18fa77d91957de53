//! Entities: a serde model stored as items of a single table, under keys
//! composed from named attributes.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::app_schema::{compose, escape, to_item, AppSchema, ENTITY_ATTRIBUTE};
use crate::condition::Condition;
use crate::error::{Error, TableError};
use crate::item::{drop_nulls, get_str, s, AttributeValue, Item};
use crate::query::{Query, SortCondition};
use crate::request::{Delete, Put, UpdateItem};
use crate::table::Table;
use crate::tombstone;
use crate::update::Update;

/// Which attributes compose a key (partition and sort) of an entity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyComposite {
    /// Attributes composing the partition key, in order.
    pub partition: Vec<String>,
    /// Attributes composing the sort key, in order (may be empty).
    pub sort: Vec<String>,
}

impl KeyComposite {
    /// A composite from attribute names.
    pub fn new(partition: &[&str], sort: &[&str]) -> Self {
        let own = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        Self {
            partition: own(partition),
            sort: own(sort),
        }
    }
}

#[derive(Debug, Clone)]
struct EntityIndex {
    name: String,
    composite: KeyComposite,
}

/// A kind of item: a serde model `M`, an entity type, a primary key and
/// optional index keys composed from the model's attributes.
///
/// Keys follow the documented format (see [`AppSchema`]): the partition key
/// is `<app>#v<version>#<entity type>#<attr>=<value>...` and the sort key
/// `<entity type>#<attr>=<value>...`. Every item also carries `__edd_e__`
/// with the entity type.
pub struct Entity<M> {
    table: Arc<dyn Table>,
    entity_type: String,
    primary: KeyComposite,
    indexes: Vec<EntityIndex>,
    /// `<app>#v<version>#<entity>` and `<entity>`, escaped: every key's start.
    partition_prefix: String,
    sort_prefix: String,
    model: PhantomData<fn() -> M>,
}

impl<M> Clone for Entity<M> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            entity_type: self.entity_type.clone(),
            primary: self.primary.clone(),
            indexes: self.indexes.clone(),
            partition_prefix: self.partition_prefix.clone(),
            sort_prefix: self.sort_prefix.clone(),
            model: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for Entity<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entity")
            .field("entity_type", &self.entity_type)
            .field("primary", &self.primary)
            .finish_non_exhaustive()
    }
}

impl<M: Serialize + DeserializeOwned> Entity<M> {
    /// An entity of `table` (which must have the single-table `pk`/`sk`
    /// layout, see [`TableSchema::single_table`](crate::TableSchema::single_table)).
    pub fn new(
        table: Arc<dyn Table>,
        app: AppSchema,
        entity_type: impl Into<String>,
        primary: KeyComposite,
    ) -> Self {
        let entity_type = entity_type.into();
        Self {
            table,
            partition_prefix: app.prefix(&entity_type),
            sort_prefix: escape(&entity_type),
            entity_type,
            primary,
            indexes: Vec::new(),
            model: PhantomData,
        }
    }

    /// Also writes the keys of the table's index `name` (whose key
    /// attributes must be strings), composed from these attributes.
    pub fn with_index(mut self, name: impl Into<String>, composite: KeyComposite) -> Self {
        self.indexes.push(EntityIndex {
            name: name.into(),
            composite,
        });
        self
    }

    /// The entity type.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// `<app>#v<version>#<entity type>`, escaped: how its partition keys
    /// start.
    pub(crate) fn partition_prefix(&self) -> &str {
        &self.partition_prefix
    }

    /// The table.
    pub fn table(&self) -> &Arc<dyn Table> {
        &self.table
    }

    fn partition_value(&self, composite: &KeyComposite, values: &Item) -> Result<String, Error> {
        compose(
            &self.partition_prefix,
            &composite.partition,
            values,
            &self.entity_type,
        )
    }

    fn sort_value(&self, composite: &KeyComposite, values: &Item) -> Result<String, Error> {
        compose(
            &self.sort_prefix,
            &composite.sort,
            values,
            &self.entity_type,
        )
    }

    fn key_names(&self) -> (String, String) {
        let key = &self.table.schema().key;
        (
            key.partition.name.clone(),
            key.sort
                .as_ref()
                .map_or_else(|| "sk".to_owned(), |a| a.name.clone()),
        )
    }

    /// The table key of the item a typed key names: a struct (or map, or
    /// the model itself) holding the primary key's composite attributes, a
    /// tuple of their values in composite order (partition, then sort), or a
    /// single value when the key has one composite attribute.
    pub fn key<K: Serialize + ?Sized>(&self, input: &K) -> Result<Item, Error> {
        self.key_of_item(&self.composite_values(input)?)
    }

    /// The composite attribute values a typed key holds (what
    /// [`key_of_item`](Self::key_of_item) composes the key from).
    pub(crate) fn composite_values<K: Serialize + ?Sized>(&self, input: &K) -> Result<Item, Error> {
        let names: Vec<&String> = self
            .primary
            .partition
            .iter()
            .chain(&self.primary.sort)
            .collect();
        let mismatch = |reason: String| Error::KeyCompose {
            entity: self.entity_type.clone(),
            attribute: names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reason,
        };
        let value =
            serde_dynamo::to_attribute_value(input).map_err(|e| Error::Encode(e.to_string()))?;
        match value {
            AttributeValue::M(map) => Ok(map),
            AttributeValue::L(values) if values.len() == names.len() => Ok(names
                .into_iter()
                .cloned()
                .zip(values)
                .collect()),
            AttributeValue::L(values) => Err(mismatch(format!(
                "a tuple key holds {} values for {} composite attributes",
                values.len(),
                names.len()
            ))),
            scalar if names.len() == 1 => Ok(Item::from([(names[0].clone(), scalar)])),
            _ => Err(mismatch(
                "a key is a struct of the composite attributes, a tuple of their values, or one value for a single attribute".into(),
            )),
        }
    }

    /// The table key composed from composite attribute values.
    pub(crate) fn key_of_item(&self, values: &Item) -> Result<Item, Error> {
        let (pk, sk) = self.key_names();
        let mut key = Item::new();
        key.insert(pk, s(self.partition_value(&self.primary, values)?));
        key.insert(sk, s(self.sort_value(&self.primary, values)?));
        Ok(key)
    }

    /// Encodes a model as its stored item: attributes, keys and entity
    /// marker. Top-level `NULL`s (serde's `None`) are left out: an optional
    /// field without a value is stored absent, and reads back as `None`.
    pub fn to_item(&self, model: &M) -> Result<Item, Error> {
        let mut item = to_item(model)?;
        drop_nulls(&mut item);
        let key = self.key_of_item(&item)?;
        let mut index_keys = Vec::new();
        for index in &self.indexes {
            let def = &self.table.schema().index(&index.name)?.key;
            index_keys.push((
                def.partition.name.clone(),
                s(self.partition_value(&index.composite, &item)?),
            ));
            if let Some(sort) = &def.sort {
                index_keys.push((
                    sort.name.clone(),
                    s(self.sort_value(&index.composite, &item)?),
                ));
            }
        }
        item.extend(key);
        item.extend(index_keys);
        item.insert(ENTITY_ATTRIBUTE.to_owned(), s(self.entity_type.clone()));
        Ok(item)
    }

    /// Whether a stored item is one of this entity's (tombstones and other
    /// markers are not).
    pub fn owns(&self, item: &Item) -> bool {
        get_str(item, ENTITY_ATTRIBUTE) == Some(self.entity_type.as_str())
    }

    /// Decodes a stored item into the model.
    pub fn decode(&self, item: Item) -> Result<M, Error> {
        serde_dynamo::from_item(item).map_err(|e| Error::ItemDecode {
            entity: self.entity_type.clone(),
            message: e.to_string(),
        })
    }

    /// Reads the raw item these attributes name, if it is this entity's.
    pub async fn get_item<K: Serialize + ?Sized>(&self, input: &K) -> Result<Option<Item>, Error> {
        let item = self.table.get_item(self.key(input)?).await?;
        Ok(item.filter(|i| self.owns(i)))
    }

    /// Whether a stored item is one of this entity's tombstones (a row a
    /// projection removed).
    pub fn is_tombstone(&self, item: &Item) -> bool {
        tombstone::is_tombstone(&self.entity_type, item)
    }

    /// Reads the models these keys name (`BatchGetItem`), in no particular
    /// order; absent ones, tombstones and other entities' items are left
    /// out.
    pub async fn batch_get<K: Serialize>(&self, keys: &[K]) -> Result<Vec<M>, Error> {
        let keys = keys
            .iter()
            .map(|k| self.key(k))
            .collect::<Result<Vec<_>, _>>()?;
        self.table
            .batch_get_item(keys)
            .await?
            .into_iter()
            .filter(|i| self.owns(i))
            .map(|i| self.decode(i))
            .collect()
    }

    /// Reads the models these keys name in one snapshot
    /// (`TransactGetItems`), in key order; absent ones, tombstones and
    /// other entities' items read as `None`.
    pub async fn transact_get<K: Serialize>(&self, keys: &[K]) -> Result<Vec<Option<M>>, Error> {
        let keys = keys
            .iter()
            .map(|k| self.key(k))
            .collect::<Result<Vec<_>, _>>()?;
        self.table
            .transact_get_items(keys)
            .await?
            .into_iter()
            .map(|i| {
                i.filter(|i| self.owns(i))
                    .map(|i| self.decode(i))
                    .transpose()
            })
            .collect()
    }

    /// Reads the model these attributes name.
    pub async fn get<K: Serialize + ?Sized>(&self, input: &K) -> Result<Option<M>, Error> {
        self.get_item(input)
            .await?
            .map(|i| self.decode(i))
            .transpose()
    }

    /// The put request for a model, for use in a transaction.
    pub fn put_request(&self, model: &M) -> Result<Put, Error> {
        Ok(Put::new(self.to_item(model)?))
    }

    /// The create request for a model (fails if an item is at its key).
    pub fn create_request(&self, model: &M) -> Result<Put, Error> {
        let (pk, _) = self.key_names();
        Ok(self.put_request(model)?.when(Condition::not_exists(pk)))
    }

    /// Writes a model, replacing what is at its key.
    pub async fn put(&self, model: &M) -> Result<(), Error> {
        Ok(self.table.put_item(self.put_request(model)?).await?)
    }

    /// The create request for a model where the item at its key is
    /// `current` (as read): a tombstone is written over, carrying its
    /// checkpoints with the revision one higher, on the condition that it
    /// is still as read; otherwise as [`create_request`](Self::create_request).
    /// Read the key first when the create goes into a transaction.
    pub fn create_request_over(&self, model: &M, current: Option<&Item>) -> Result<Put, Error> {
        match current.filter(|i| self.is_tombstone(i)) {
            Some(tombstone) => {
                let (item, condition) = tombstone::over_tombstone(
                    self.table.schema(),
                    &self.entity_type,
                    self.to_item(model)?,
                    tombstone,
                )?;
                Ok(Put::new(item).when(condition))
            }
            None => self.create_request(model),
        }
    }

    /// Writes a model that must not exist yet; fails with
    /// `ConditionalCheckFailed` when it does. A tombstone at its key (a row
    /// a projection removed) does not count: the model is written over it,
    /// carrying its checkpoints with the revision one higher, so a late
    /// redelivery of what removed it still reads as applied.
    pub async fn create(&self, model: &M) -> Result<(), Error> {
        match self.table.put_item(self.create_request(model)?).await {
            Err(TableError::ConditionalCheckFailed {
                item: Some(current),
            }) if self.is_tombstone(&current) => {
                let put = self.create_request_over(model, Some(&current))?;
                Ok(self.table.put_item(put).await?)
            }
            other => Ok(other?),
        }
    }

    /// Updates attributes of an existing model and returns it; fails with
    /// `ConditionalCheckFailed` when it does not exist. A tombstone at its
    /// key (a row a projection removed) does not count: it is left as it
    /// is.
    pub async fn update<K: Serialize + ?Sized>(
        &self,
        input: &K,
        update: Update,
    ) -> Result<M, Error> {
        let (pk, _) = self.key_names();
        let mine = Condition::eq(ENTITY_ATTRIBUTE, s(self.entity_type.clone()));
        let request =
            UpdateItem::new(self.key(input)?, update).when(Condition::exists(pk).and(mine));
        let item = self.table.update_item(request).await?;
        self.decode(item)
    }

    /// Deletes the model these attributes name (nothing happens when
    /// absent). A tombstone at its key stays, with the checkpoints that
    /// keep a replayed event from making the removed row again.
    pub async fn delete<K: Serialize + ?Sized>(&self, input: &K) -> Result<(), Error> {
        let marker = s(tombstone::tombstone_marker(&self.entity_type));
        let not_tombstone = Condition::eq(ENTITY_ATTRIBUTE, marker).not();
        let request = Delete::new(self.key(input)?).when(not_tombstone);
        match self.table.delete_item(request).await {
            Ok(()) | Err(TableError::ConditionalCheckFailed { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every model in the partition the attributes name, in sort key order,
    /// optionally narrowed by a condition on the composed sort key.
    pub async fn query<K: Serialize + ?Sized>(
        &self,
        input: &K,
        sort: Option<SortCondition>,
    ) -> Result<Vec<M>, Error> {
        let values = to_item(input)?;
        let partition = self.partition_value(&self.primary, &values)?;
        self.query_partition(Query::partition(s(partition)), sort)
            .await
    }

    /// Every model in a partition of index `name`.
    pub async fn query_index<K: Serialize + ?Sized>(
        &self,
        name: &str,
        input: &K,
        sort: Option<SortCondition>,
    ) -> Result<Vec<M>, Error> {
        let index = self
            .indexes
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("entity {} has no index {name}", self.entity_type))
            })?;
        let partition = self.partition_value(&index.composite, &to_item(input)?)?;
        self.query_partition(Query::partition(s(partition)).on_index(name), sort)
            .await
    }

    async fn query_partition(
        &self,
        query: Query,
        sort: Option<SortCondition>,
    ) -> Result<Vec<M>, Error> {
        let sort = sort.unwrap_or_else(|| SortCondition::BeginsWith(s(escape(&self.entity_type))));
        let items = query_all(self.table.as_ref(), query.sort(sort)).await?;
        items
            .into_iter()
            .filter(|i| self.owns(i))
            .map(|i| self.decode(i))
            .collect()
    }
}

/// Runs a query through every page.
pub(crate) async fn query_all(table: &dyn Table, query: Query) -> Result<Vec<Item>, TableError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = table.query(query.clone().start_after(start)).await?;
        items.extend(page.items);
        match page.last_evaluated_key {
            Some(key) => start = Some(key),
            None => return Ok(items),
        }
    }
}
