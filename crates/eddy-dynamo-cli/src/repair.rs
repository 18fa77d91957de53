//! What a projection offers the command group: repairs, checkpoints and
//! outbox effects of rows named by JSON keys.

use async_trait::async_trait;
use eddy_dynamo::{
    Deliver, DrainReport, Effect, Error, MultiProjection, Parked, PendingReport, Projection,
    RebuildInstances, RowOutcome, RowPending, StreamId,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a repaired row reports on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowReport {
    /// Whether the row was written.
    pub written: bool,
    /// Whether the write left a tombstone.
    pub removed: bool,
    /// The row's revision afterwards.
    pub revision: Option<u64>,
    /// Per instance: source, stream id, events applied, checkpoint.
    pub instances: Vec<(String, StreamId, usize, u64)>,
}

impl<M> From<RowOutcome<M>> for RowReport {
    fn from(outcome: RowOutcome<M>) -> Self {
        Self {
            written: outcome.written,
            removed: outcome.removed,
            revision: outcome.revision,
            instances: outcome
                .instances
                .into_iter()
                .map(|i| (i.source, i.instance, i.applied.len(), i.checkpoint))
                .collect(),
        }
    }
}

/// A projection the command group can work on, its row keys given as
/// JSON.
#[async_trait]
pub trait RowRepair: Send + Sync {
    /// Its name on the command line.
    fn name(&self) -> &str;
    /// Rebuilds a row from `instances` (empty: the projection finds them).
    async fn rebuild(
        &self,
        key: serde_json::Value,
        instances: RebuildInstances,
    ) -> Result<RowReport, Error>;
    /// Catches a row up.
    async fn catch_up(&self, key: serde_json::Value) -> Result<RowReport, Error>;
    /// A row's checkpoints: (source, instance, version).
    async fn checkpoints(
        &self,
        key: serde_json::Value,
    ) -> Result<Vec<(String, StreamId, u64)>, Error>;
    /// A row's pending outbox effects, `None` when the projection has no
    /// outbox.
    async fn pending(&self, key: serde_json::Value) -> Result<Option<RowPending>, Error>;
    /// Every row with pending effects.
    async fn pending_rows(&self) -> Result<Vec<RowPending>, Error>;
    /// Delivers a row's pending effects, in order.
    async fn drain(
        &self,
        key: serde_json::Value,
        deliver: &dyn Deliver,
    ) -> Result<DrainReport, Error>;
    /// Delivers the pending effects of every row that has some.
    async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error>;
    /// Unparks a row; its parked head, if it had one.
    async fn unpark(&self, key: serde_json::Value) -> Result<Option<Parked>, Error>;
    /// Drops a row's parked head `effect`; whether it did.
    async fn drop_parked(&self, key: serde_json::Value, effect: &Effect) -> Result<bool, Error>;
}

fn key<K: DeserializeOwned>(key: serde_json::Value) -> Result<K, Error> {
    serde_json::from_value(key)
        .map_err(|e| Error::InvalidArgument(format!("the row key does not fit: {e}")))
}

#[async_trait]
impl<M, K> RowRepair for MultiProjection<M, K>
where
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        MultiProjection::name(self)
    }

    async fn rebuild(
        &self,
        row: serde_json::Value,
        instances: RebuildInstances,
    ) -> Result<RowReport, Error> {
        let row: K = key(row)?;
        let outcome = if instances.iter().next().is_none() {
            self.rebuild_found(row).await?
        } else {
            MultiProjection::rebuild(self, row, &instances).await?
        };
        Ok(outcome.into())
    }

    async fn catch_up(&self, row: serde_json::Value) -> Result<RowReport, Error> {
        Ok(MultiProjection::catch_up(self, key(row)?).await?.into())
    }

    async fn checkpoints(
        &self,
        row: serde_json::Value,
    ) -> Result<Vec<(String, StreamId, u64)>, Error> {
        MultiProjection::checkpoints(self, &key(row)?).await
    }

    async fn pending(&self, row: serde_json::Value) -> Result<Option<RowPending>, Error> {
        let row: K = key(row)?;
        if !self.has_outbox() {
            return Ok(None);
        }
        MultiProjection::pending(self, &row).await.map(Some)
    }

    async fn pending_rows(&self) -> Result<Vec<RowPending>, Error> {
        MultiProjection::pending_rows(self).await
    }

    async fn drain(
        &self,
        row: serde_json::Value,
        deliver: &dyn Deliver,
    ) -> Result<DrainReport, Error> {
        MultiProjection::drain(self, &key(row)?, deliver).await
    }

    async fn drain_pending(&self, deliver: &dyn Deliver) -> Result<PendingReport, Error> {
        MultiProjection::drain_pending(self, deliver).await
    }

    async fn unpark(&self, row: serde_json::Value) -> Result<Option<Parked>, Error> {
        MultiProjection::unpark(self, &key(row)?).await
    }

    async fn drop_parked(&self, row: serde_json::Value, effect: &Effect) -> Result<bool, Error> {
        MultiProjection::drop_parked(self, &key(row)?, effect).await
    }
}

/// A single-source projection: one instance per row, no outbox.
#[async_trait]
impl<E, M, K> RowRepair for Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        Projection::name(self)
    }

    /// Rebuilds from the one instance named, or the one the row's
    /// checkpoint names when none is.
    async fn rebuild(
        &self,
        row: serde_json::Value,
        instances: RebuildInstances,
    ) -> Result<RowReport, Error> {
        let row: K = key(row)?;
        let named: Vec<(&str, &StreamId)> = instances.iter().collect();
        let instance = match named.as_slice() {
            [(_, instance)] => (*instance).clone(),
            [] => match Projection::checkpoints(self, &row).await?.pop() {
                Some((_, instance, _)) => instance,
                None => {
                    return Err(Error::InvalidArgument(format!(
                    "projection {}: the row names no stream instance; name the one to rebuild from",
                    self.name()
                )))
                }
            },
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "projection {} folds one stream instance per row; name one",
                    self.name()
                )))
            }
        };
        Ok(Projection::rebuild(self, row, &instance).await?.into())
    }

    async fn catch_up(&self, row: serde_json::Value) -> Result<RowReport, Error> {
        Ok(Projection::catch_up(self, key(row)?).await?.into())
    }

    async fn checkpoints(
        &self,
        row: serde_json::Value,
    ) -> Result<Vec<(String, StreamId, u64)>, Error> {
        Projection::checkpoints(self, &key(row)?).await
    }

    async fn pending(&self, row: serde_json::Value) -> Result<Option<RowPending>, Error> {
        key::<K>(row)?;
        Ok(None)
    }

    async fn pending_rows(&self) -> Result<Vec<RowPending>, Error> {
        Ok(Vec::new())
    }

    async fn drain(
        &self,
        _row: serde_json::Value,
        _deliver: &dyn Deliver,
    ) -> Result<DrainReport, Error> {
        Err(no_outbox(self.name()))
    }

    async fn drain_pending(&self, _deliver: &dyn Deliver) -> Result<PendingReport, Error> {
        Err(no_outbox(self.name()))
    }

    async fn unpark(&self, _row: serde_json::Value) -> Result<Option<Parked>, Error> {
        Err(no_outbox(self.name()))
    }

    async fn drop_parked(&self, _row: serde_json::Value, _effect: &Effect) -> Result<bool, Error> {
        Err(no_outbox(self.name()))
    }
}

fn no_outbox(projection: &str) -> Error {
    Error::InvalidArgument(format!("projection {projection} declares no outbox"))
}
