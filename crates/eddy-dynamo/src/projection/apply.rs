//! Applying events to rows: group by row, fold in version order with gap
//! fill from the store, write guarded by checkpoint or revision, retry lost
//! races with jittered backoff.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Projection, RecordFailure, RowOutcome, SOURCE_ATTRIBUTE};
use crate::condition::Condition;
use crate::error::{Error, TableError};
use crate::event_item::{EventItem, StreamId};
use crate::event_stream::StoredEvent;
use crate::item::{get_present, get_str, n, s, AttributeValue, Item};
use crate::request::Put;

/// A row and the stream instance feeding it: (encoded row key, instance).
type GroupId = (String, StreamId);
/// A row's table key, its key value and its events with their input positions.
type Group<E, K> = (Item, K, Vec<(usize, StoredEvent<E>)>);

/// The row's state as read.
struct Current<M> {
    exists: bool,
    state: M,
    checkpoint: u64,
    checkpoint_stored: bool,
    revision: Option<u64>,
}

impl<E, M, K> Projection<E, M, K>
where
    E: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    M: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
    K: Serialize + Send + Sync + 'static,
{
    /// Applies events directly (not from a change feed): groups them by row
    /// and instance and applies each group. Events keyed to no row are left
    /// out. Redelivered events are recognised by the row's checkpoint.
    pub async fn apply_batch(
        &self,
        events: Vec<StoredEvent<E>>,
    ) -> Result<Vec<RowOutcome<M>>, Error> {
        for event in &events {
            if let Some(row) = (self.key)(&event.stream_id, event) {
                self.read_model.key(&row)?;
            }
        }
        let (outcomes, _) = self
            .apply_indexed(events.into_iter().enumerate().collect())
            .await;
        Ok(outcomes)
    }

    /// Decodes stored events and applies them; reports per input which
    /// ones failed (undecodable, or not applied because their row failed).
    pub(crate) async fn apply_items(
        &self,
        items: Vec<(usize, EventItem)>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        let mut failures = Vec::new();
        let mut events = Vec::new();
        for (index, item) in items {
            match self.stream.decode(&item) {
                Ok(event) => events.push((index, event)),
                Err(e) => failures.push(RecordFailure::new(index, &e)),
            }
        }
        let (outcomes, mut row_failures) = self.apply_indexed(events).await;
        failures.append(&mut row_failures);
        (outcomes, failures)
    }

    async fn apply_indexed(
        &self,
        events: Vec<(usize, StoredEvent<E>)>,
    ) -> (Vec<RowOutcome<M>>, Vec<RecordFailure>) {
        // Group by (row key, instance), keeping the first-seen order of rows.
        let mut order: Vec<(String, StreamId)> = Vec::new();
        let mut groups: BTreeMap<GroupId, Group<E, K>> = BTreeMap::new();
        let mut failures = Vec::new();
        for (index, event) in events {
            let Some(row) = (self.key)(&event.stream_id, &event) else {
                continue;
            };
            let key = match self.read_model.key(&row) {
                Ok(key) => key,
                Err(e) => {
                    failures.push(RecordFailure::new(index, &e));
                    continue;
                }
            };
            let id = (encode(&key), event.stream_id.clone());
            groups
                .entry(id.clone())
                .or_insert_with(|| {
                    order.push(id.clone());
                    (key, row, Vec::new())
                })
                .2
                .push((index, event));
        }
        let mut outcomes = Vec::new();
        for id in order {
            let Some((key, row, events)) = groups.remove(&id) else {
                continue;
            };
            let indexes: Vec<(usize, u64)> = events.iter().map(|(i, e)| (*i, e.version)).collect();
            let outcome = self
                .apply_row(
                    key,
                    &row,
                    id.1,
                    events.into_iter().map(|(_, e)| e).collect(),
                )
                .await;
            if let Some(e) = &outcome.failure {
                for (index, version) in indexes {
                    if !outcome.covers(version) {
                        failures.push(RecordFailure::new(index, e));
                    }
                }
            }
            outcomes.push(outcome);
        }
        (outcomes, failures)
    }

    fn failed(
        &self,
        key: Item,
        instance: StreamId,
        checkpoint: u64,
        error: Error,
    ) -> RowOutcome<M> {
        RowOutcome {
            projection: self.name.clone(),
            key,
            instance,
            applied: Vec::new(),
            already_applied: Vec::new(),
            rejected: Vec::new(),
            checkpoint,
            revision: None,
            written: false,
            state: None,
            failure: Some(error),
        }
    }

    async fn read_current(
        &self,
        key: &Item,
        row: &K,
        instance: &StreamId,
    ) -> Result<Current<M>, Error> {
        let item = self
            .read_model
            .table()
            .get_item(key.clone())
            .await?
            .filter(|i| self.read_model.owns(i));
        let Some(item) = item else {
            return Ok(Current {
                exists: false,
                state: (self.initial)(row),
                checkpoint: 0,
                checkpoint_stored: false,
                revision: None,
            });
        };
        if let Some(owner) = get_str(&item, SOURCE_ATTRIBUTE) {
            if owner != instance.to_string() {
                return Err(Error::ProjectionSourceConflict {
                    row: encode(key),
                    owner: owner.to_owned(),
                    instance: instance.to_string(),
                });
            }
        }
        let checkpoint = read_counter(&item, &self.checkpoint_field, key)?;
        let revision = match &self.revision_field {
            Some(field) => read_counter(&item, field, key)?,
            None => None,
        };
        Ok(Current {
            exists: true,
            checkpoint: checkpoint.unwrap_or(0),
            checkpoint_stored: checkpoint.is_some(),
            revision,
            state: self.read_model.decode(item)?,
        })
    }

    /// The events to fold above `checkpoint`: the batch's own when they run
    /// without a gap, otherwise read from the store.
    async fn events_above(
        &self,
        instance: &StreamId,
        checkpoint: u64,
        batch: &[StoredEvent<E>],
    ) -> Result<Vec<Result<StoredEvent<E>, (u64, Error)>>, Error> {
        let mut pending: Vec<&StoredEvent<E>> =
            batch.iter().filter(|e| e.version > checkpoint).collect();
        pending.sort_by_key(|e| e.version);
        pending.dedup_by_key(|e| e.version);
        let Some(last) = pending.last().map(|e| e.version) else {
            return Ok(Vec::new());
        };
        // Versions above the checkpoint, so `version - checkpoint` is at least 1.
        let contiguous = pending
            .iter()
            .enumerate()
            .all(|(i, e)| e.version - checkpoint == i as u64 + 1);
        if contiguous {
            return Ok(pending.into_iter().map(|e| Ok((*e).clone())).collect());
        }
        let from = checkpoint + 1;
        let stored = self.stream.read_items_range(instance, from, last).await?;
        // Every version from the checkpoint up to the batch's last must be
        // there: a shorter history is never folded.
        let returned: std::collections::BTreeSet<u64> = stored.iter().map(|i| i.version).collect();
        let missing: Vec<u64> = (from..=last)
            .filter(|v| !returned.contains(v))
            .take(10)
            .collect();
        if !missing.is_empty() || stored.len() as u64 != last - checkpoint {
            return Err(Error::HistoryIncomplete {
                instance: instance.to_string(),
                from,
                to: last,
                missing,
            });
        }
        Ok(stored
            .iter()
            .map(|item| self.stream.decode(item).map_err(|e| (item.version, e)))
            .collect())
    }

    async fn apply_row(
        &self,
        key: Item,
        row: &K,
        instance: StreamId,
        batch: Vec<StoredEvent<E>>,
    ) -> RowOutcome<M> {
        let row_id = encode(&key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = match self.read_current(&key, row, &instance).await {
                Ok(current) => current,
                Err(e) => return self.failed(key, instance, 0, e),
            };
            let mut already: Vec<u64> = batch
                .iter()
                .map(|e| e.version)
                .filter(|v| *v <= current.checkpoint)
                .collect();
            already.sort_unstable();
            already.dedup();
            let to_fold = match self
                .events_above(&instance, current.checkpoint, &batch)
                .await
            {
                Ok(events) => events,
                Err(e) => return self.failed(key, instance, current.checkpoint, e),
            };
            let mut state = current.state.clone();
            let mut checkpoint = current.checkpoint;
            let (mut applied, mut rejected, mut failure) = (Vec::new(), Vec::new(), None);
            for event in to_fold {
                let event = match event {
                    Ok(event) => event,
                    Err((_, e)) => {
                        failure = Some(e);
                        break;
                    }
                };
                let same_row = (self.key)(&event.stream_id, &event)
                    .map(|k| self.read_model.key(&k).map(|k| encode(&k) == row_id))
                    .transpose();
                match same_row {
                    Ok(Some(true)) => {}
                    Ok(_) => {
                        checkpoint = event.version; // considered: it belongs to no row or another
                        continue;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
                match (self.evolve)(state.clone(), &event) {
                    Ok(next) => {
                        state = next;
                        applied.push(event.version);
                        checkpoint = event.version;
                    }
                    Err(e) if (self.terminal)(&e) => {
                        rejected.push(event.version);
                        checkpoint = event.version;
                    }
                    Err(e) => {
                        failure = Some(Error::Evolve {
                            instance: instance.to_string(),
                            version: event.version,
                            message: e.0,
                        });
                        break;
                    }
                }
            }
            let nothing_to_write =
                checkpoint == current.checkpoint || (!current.exists && applied.is_empty());
            if nothing_to_write {
                return RowOutcome {
                    projection: self.name.clone(),
                    key,
                    instance,
                    applied: Vec::new(),
                    already_applied: already,
                    rejected,
                    checkpoint: current.checkpoint,
                    revision: current.revision,
                    written: false,
                    state: current.exists.then_some(current.state),
                    failure,
                };
            }
            let revision = match self.revision_field {
                None => None,
                Some(_) => match current.revision.unwrap_or(0).checked_add(1) {
                    Some(next) => Some(next),
                    None => {
                        let e = Error::CounterOverflow {
                            counter: format!("the revision of row {row_id}"),
                        };
                        return self.failed(key, instance, current.checkpoint, e);
                    }
                },
            };
            let put = match self.row_put(&key, &state, checkpoint, revision, &instance, &current) {
                Ok(put) => put,
                Err(e) => return self.failed(key, instance, current.checkpoint, e),
            };
            match self.read_model.table().put_item(put).await {
                Ok(()) => {
                    return RowOutcome {
                        projection: self.name.clone(),
                        key,
                        instance,
                        applied,
                        already_applied: already,
                        rejected,
                        checkpoint,
                        revision,
                        written: true,
                        state: Some(state),
                        failure,
                    }
                }
                Err(TableError::ConditionalCheckFailed { .. }) if attempt < self.max_attempts => {
                    let ceiling = 2u64 << attempt.min(8);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..=ceiling))).await;
                }
                Err(TableError::ConditionalCheckFailed { .. }) => {
                    let e = Error::WriteContention {
                        target: row_id,
                        attempts: attempt,
                    };
                    return self.failed(key, instance, current.checkpoint, e);
                }
                Err(e) => return self.failed(key, instance, current.checkpoint, e.into()),
            }
        }
    }

    fn row_put(
        &self,
        key: &Item,
        state: &M,
        checkpoint: u64,
        revision: Option<u64>,
        instance: &StreamId,
        current: &Current<M>,
    ) -> Result<Put, Error> {
        let mut item = self.read_model.to_item(state)?;
        if key
            .iter()
            .any(|(name, value)| item.get(name) != Some(value))
        {
            return Err(Error::InvalidArgument(format!(
                "projection {}: the row state must keep the key attributes of row {}",
                self.name,
                encode(key)
            )));
        }
        item.insert(self.checkpoint_field.clone(), n(checkpoint));
        item.insert(SOURCE_ATTRIBUTE.to_owned(), s(instance.to_string()));
        let pk = self.read_model.table().schema().key.partition.name.clone();
        let condition = match (&self.revision_field, revision) {
            (Some(field), Some(next)) => {
                item.insert(field.clone(), n(next));
                match (current.exists, current.revision) {
                    (false, _) => Condition::not_exists(pk),
                    (true, Some(read)) => Condition::eq(field.clone(), n(read)),
                    (true, None) => Condition::exists(pk).and(Condition::absent(field.clone())),
                }
            }
            _ => match (current.exists, current.checkpoint_stored) {
                (false, _) => Condition::not_exists(pk),
                (true, true) => Condition::eq(self.checkpoint_field.clone(), n(current.checkpoint)),
                (true, false) => {
                    Condition::exists(pk).and(Condition::absent(self.checkpoint_field.clone()))
                }
            },
        };
        Ok(Put::new(item).when(condition))
    }
}

/// A printable identity of a table key.
pub(crate) fn encode(key: &Item) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(k, v)| match v {
            crate::item::AttributeValue::S(text) => format!("{k}={text}"),
            other => format!("{k}={other:?}"),
        })
        .collect();
    parts.sort();
    parts.join("|")
}

/// Reads a counter (checkpoint or revision) of a row: `None` when absent or
/// `NULL`; anything but an unsigned integer is a decode error, never "absent".
fn read_counter(item: &Item, field: &str, key: &Item) -> Result<Option<u64>, Error> {
    match get_present(item, field) {
        None => Ok(None),
        Some(AttributeValue::N(text)) => match text.trim().parse() {
            Ok(value) => Ok(Some(value)),
            Err(_) => Err(bad_counter(field, key, text)),
        },
        Some(other) => Err(bad_counter(field, key, &format!("{other:?}"))),
    }
}

fn bad_counter(field: &str, key: &Item, value: &str) -> Error {
    Error::ItemDecode {
        entity: encode(key),
        message: format!("{field} holds {value}, not an unsigned integer"),
    }
}
