//! Writing a unit's outputs: checking them before the first append,
//! encoding every item before anything is written, and appending each
//! output with its producer position.

use bytes::Bytes;
use eddy_streams::{
    Append, Payload, ProducerPosition, StateMessage, Storage, StreamConfig, StreamError, StreamPath,
};

use super::Session;
use crate::checkpoint::CheckpointKey;
use crate::declare::{Params, State};
use crate::emits::{Items, OutputItem};
use crate::handles::{OutputKind, OutputSpec};
use crate::{Bound, CommitKind, Emits, ProjectionError, Result, Unit};

impl<P: Params, S: State> Session<P, S> {
    /// Creates absent outputs on this owner; refuses closed, gone and
    /// absent foreign outputs.
    pub(super) async fn check_outputs(&mut self) -> Result<()> {
        if self.outputs_checked {
            return Ok(());
        }
        for (output, path) in self
            .bound
            .projection
            .outputs()
            .iter()
            .zip(&self.bound.outputs)
        {
            let invalid = |reason: String| ProjectionError::InvalidOutput {
                output: output.name.clone(),
                path: path.to_string(),
                reason,
            };
            match self.host.storage.head(path).await {
                Ok(info) if info.closed => return Err(invalid("the stream is closed".into())),
                Ok(_) => {}
                Err(StreamError::NotFound { .. }) if !output.foreign => {
                    self.host
                        .storage
                        .create(path, StreamConfig::json(), Payload::empty())
                        .await?;
                }
                Err(StreamError::NotFound { .. }) => {
                    return Err(invalid(
                        "a foreign output must exist before the first append".into(),
                    ))
                }
                Err(StreamError::Gone { .. } | StreamError::SoftDeleted { .. }) => {
                    return Err(invalid("the stream was deleted".into()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.outputs_checked = true;
        Ok(())
    }

    /// Encodes the items of every output (see [`encode_outputs`]).
    pub(super) fn encode_outputs(&self, emits: &Emits) -> Result<Vec<(usize, Vec<Bytes>)>> {
        encode_outputs(self.bound.projection.outputs(), &self.bound.outputs, emits)
    }

    /// How the unit writes its encoded outputs: the appends of each. A
    /// replay takes the appends its pin recorded; a fresh unit splits each
    /// output's items into appends within the append limit (an item that
    /// fits no append fails the unit with `pin/invalid-output`).
    pub(super) fn plan(
        &self,
        encoded: Vec<(usize, Vec<Bytes>)>,
        replay: bool,
    ) -> Result<Vec<OutputAppends>> {
        let declared = self.bound.projection.outputs();
        let recorded = self.checkpoint.pending.as_ref().map(|p| &p.appends);
        encoded
            .into_iter()
            .map(|(index, messages)| {
                let (output, path) = (&declared[index], &self.bound.outputs[index]);
                let invalid = |reason: String| ProjectionError::InvalidOutput {
                    output: output.name.clone(),
                    path: path.to_string(),
                    reason,
                };
                let appends = match recorded.and_then(|r| r.get(&output.name)) {
                    Some(counts) if replay => split_as(messages, counts).ok_or_else(|| {
                        invalid(format!(
                            "the replayed unit wrote other items than its pin recorded \
                             (appends of {counts:?} items): the handler must be deterministic"
                        ))
                    })?,
                    _ if replay => vec![messages],
                    _ => split_appends(messages, self.append_limit)
                        .map_err(|size| invalid(too_large(size, self.append_limit)))?,
                };
                Ok(OutputAppends { index, appends })
            })
            .collect()
    }

    /// Appends each output's planned appends with consecutive producer
    /// positions; returns how many sequence numbers each output used.
    ///
    /// An append the store refuses as too large is split again when the
    /// store cannot hold its position yet (`fresh`: the unit was pinned by
    /// this attempt, or the append before it reported the position
    /// before): the rest of that output is split within the store's limit,
    /// pinned again, and sent on. Otherwise it fails the unit.
    pub(super) async fn append_outputs(
        &mut self,
        plan: &mut [OutputAppends],
        unit: &Unit<P>,
        fresh: bool,
    ) -> Result<Vec<(String, u64)>> {
        let mut emitted = Vec::new();
        for at in 0..plan.len() {
            let index = plan[at].index;
            let output = self.bound.projection.outputs()[index].name.clone();
            let path = self.bound.outputs[index].clone();
            let base = self.checkpoint.next_seq.get(&output).copied().unwrap_or(0);
            let mut previous: Option<u64> = None;
            let mut i = 0;
            while i < plan[at].appends.len() {
                let seq = base + i as u64;
                let position = ProducerPosition::new(self.producer_id(&output), 0, seq);
                let messages = plan[at].appends[i].clone();
                let size = append_size(&messages);
                let append = Append::messages(messages).with_producer(position);
                match self.host.storage.append(&path, append).await {
                    Ok(appended) => {
                        previous = appended.producer.map(|(_, highest)| highest);
                        i += 1;
                    }
                    Err(StreamError::TooLarge { limit, .. })
                        if (i == 0 && fresh) || previous == seq.checked_sub(1) =>
                    {
                        let learned = if limit > 0 && limit < size {
                            limit
                        } else {
                            size / 2
                        };
                        self.append_limit = self.append_limit.min(learned).max(1);
                        let rest: Vec<Bytes> = plan[at].appends.drain(i..).flatten().collect();
                        let again = split_appends(rest, self.append_limit).map_err(|size| {
                            ProjectionError::InvalidOutput {
                                output: output.clone(),
                                path: path.to_string(),
                                reason: too_large(size, self.append_limit),
                            }
                        })?;
                        plan[at].appends.extend(again);
                        self.pin(unit, plan).await?;
                    }
                    Err(e) => return Err(append_error(&output, &path, e)),
                }
            }
            emitted.push((output, plan[at].appends.len() as u64));
        }
        Ok(emitted)
    }

    /// The producer id of one output of this binding.
    fn producer_id(&self, output: &str) -> String {
        producer_id(&self.bound.key, output, &self.checkpoint.generation)
    }
}

/// The producer id of `output` of the binding `key` in `generation`:
/// stable across retries, new when the binding is rebuilt.
fn producer_id(key: &CheckpointKey, output: &str, generation: &str) -> String {
    format!(
        "eddy-projection/{}/{}/{}/{output}/{generation}",
        key.projection, key.version, key.params
    )
}

/// Releases the producer state of every output of `bound` in
/// `generation` (see [`Storage::release_producer`]): for a binding about
/// to be forgotten, whose producers no one can retry any more. A store
/// failure that may pass is the caller's error, so that the forget waits
/// for it; a store that cannot release, or an output that is gone, only
/// keeps the state.
pub(crate) async fn release_producers<P: Params, S: State>(
    storage: &dyn Storage,
    bound: &Bound<P, S>,
    generation: &str,
) -> Result<()> {
    if bound.projection.commit_kind() != CommitKind::Producer {
        return Ok(());
    }
    for (output, path) in bound.projection.outputs().iter().zip(&bound.outputs) {
        let id = producer_id(&bound.key, &output.name, generation);
        match storage.release_producer(path, &id).await {
            Ok(_)
            | Err(
                StreamError::NotFound { .. }
                | StreamError::Gone { .. }
                | StreamError::SoftDeleted { .. },
            ) => {}
            Err(e) if e.is_retryable() => return Err(e.into()),
            Err(e) => tracing::debug!(
                projection = bound.projection.id(),
                output = output.name,
                "the output keeps the forgotten binding's producer state: {e}"
            ),
        }
    }
    Ok(())
}

/// One output's items for a unit, in the appends that write them (each
/// within the append limit).
pub(crate) struct OutputAppends {
    /// The output's index in the declaration.
    pub index: usize,
    /// The appends, in order; each takes the next producer position.
    pub appends: Vec<Vec<Bytes>>,
}

impl OutputAppends {
    /// How many items each append holds, when there is more than one.
    pub fn counts(&self) -> Option<Vec<u64>> {
        (self.appends.len() > 1).then(|| self.appends.iter().map(|a| a.len() as u64).collect())
    }
}

/// The bytes an append of `messages` counts against a limit: each item
/// and a separator, and the brackets of a JSON array body (as a remote
/// store sends them).
pub(crate) fn append_size(messages: &[Bytes]) -> usize {
    messages
        .iter()
        .fold(1usize, |size, m| size.saturating_add(m.len() + 1))
}

/// Splits `messages` into consecutive appends of at most `limit` bytes
/// each ([`append_size`]) and at most the store's default count of
/// messages ([`eddy_streams::DEFAULT_MAX_APPEND_MESSAGES`]); `Err` with the
/// size of an item that is over the limit on its own.
pub(crate) fn split_appends(messages: Vec<Bytes>, limit: usize) -> Result<Vec<Vec<Bytes>>, usize> {
    let mut appends: Vec<Vec<Bytes>> = Vec::new();
    let mut current: Vec<Bytes> = Vec::new();
    let mut size = 1usize;
    for message in messages {
        let cost = message.len().saturating_add(1);
        if cost.saturating_add(1) > limit {
            return Err(message.len());
        }
        let full = current.len() == eddy_streams::DEFAULT_MAX_APPEND_MESSAGES;
        if !current.is_empty() && (full || size.saturating_add(cost) > limit) {
            appends.push(std::mem::take(&mut current));
            size = 1;
        }
        size = size.saturating_add(cost);
        current.push(message);
    }
    if !current.is_empty() {
        appends.push(current);
    }
    Ok(appends)
}

/// Splits `messages` into appends of `counts` items each; `None` when the
/// counts do not add up to the messages.
fn split_as(messages: Vec<Bytes>, counts: &[u64]) -> Option<Vec<Vec<Bytes>>> {
    let total: u64 = counts.iter().sum();
    if total != messages.len() as u64 {
        return None;
    }
    let mut rest = messages.into_iter();
    Some(
        counts
            .iter()
            .map(|&count| rest.by_ref().take(count as usize).collect())
            .collect(),
    )
}

fn too_large(size: usize, limit: usize) -> String {
    format!(
        "an item of {size} bytes is over the append limit of {limit} bytes: no append can carry it"
    )
}

/// Encodes the items of every output of a unit, checking each against
/// its output's declaration (`declared`, bound to `paths`): the messages
/// to append, by output index. A mistake fails with `pin/invalid-output`
/// before anything is written.
pub(crate) fn encode_outputs(
    declared: &[OutputSpec],
    paths: &[StreamPath],
    emits: &Emits,
) -> Result<Vec<(usize, Vec<Bytes>)>> {
    let invalid = |index: usize, reason: String| ProjectionError::InvalidOutput {
        output: declared
            .get(index)
            .map_or_else(String::new, |o| o.name.clone()),
        path: paths
            .get(index)
            .map_or_else(String::new, ToString::to_string),
        reason,
    };
    if let Some(reason) = &emits.invalid {
        return Err(ProjectionError::InvalidOutput {
            output: String::new(),
            path: String::new(),
            reason: reason.clone(),
        });
    }
    let mut encoded = Vec::new();
    for (&index, items) in emits
        .outputs
        .iter()
        .filter(|(_, items)| !items.list.is_empty())
    {
        let output = declared
            .get(index)
            .ok_or_else(|| invalid(index, "the projection declares no such output".into()))?;
        let messages =
            encode_items(&output.kind, items).map_err(|reason| invalid(index, reason))?;
        encoded.push((index, messages));
    }
    Ok(encoded)
}

/// The error of an append to `output` at `path`: an output that is
/// closed, gone or absent cannot take the unit (`pin/invalid-output`),
/// and neither can one that no longer knows the binding's producer after
/// the binding wrote to it: the stream it wrote to was deleted and another
/// one created at its path.
pub(crate) fn append_error(output: &str, path: &StreamPath, err: StreamError) -> ProjectionError {
    let invalid = |reason: String| ProjectionError::InvalidOutput {
        output: output.to_owned(),
        path: path.to_string(),
        reason,
    };
    match err {
        StreamError::Closed { .. }
        | StreamError::Gone { .. }
        | StreamError::SoftDeleted { .. }
        | StreamError::NotFound { .. } => invalid(err.to_string()),
        StreamError::ProducerSeqGap {
            expected: 0,
            received,
            ..
        } if received > 0 => invalid(format!(
            "the stream holds none of this binding's {received} earlier appends: it was deleted \
             and created again since (or lost its producer state). Forget the binding to write \
             its outputs again from the start"
        )),
        other => other.into(),
    }
}

/// Encodes the items of one output of `kind`: its JSON items become
/// slices of one buffer. The reason when one cannot be written there.
fn encode_items(kind: &OutputKind, items: &Items) -> std::result::Result<Vec<Bytes>, String> {
    let json = Bytes::copy_from_slice(&items.json);
    items
        .list
        .iter()
        .map(|item| encode_item(kind, item, &json))
        .collect()
}

/// Encodes one item for an output of `kind`, its JSON taken from `json`;
/// the reason when it cannot be written there.
fn encode_item(
    kind: &OutputKind,
    item: &OutputItem,
    json: &Bytes,
) -> std::result::Result<Bytes, String> {
    let (stream, collections) = match (kind, item) {
        (OutputKind::Json, OutputItem::Json(range)) => {
            return match json.get(range.clone()) {
                Some(_) => Ok(json.slice(range.clone())),
                None => Err("an item lies outside its output's buffer".into()),
            }
        }
        (
            OutputKind::State {
                stream,
                collections,
            },
            _,
        ) => (stream, collections),
        (OutputKind::Json, _) => return Err("a JSON output takes items, not state entries".into()),
    };
    let name = |index: usize| {
        collections
            .get(index)
            .ok_or_else(|| format!("the state output has no collection #{index}"))
    };
    let message = match item {
        OutputItem::Json(_) => {
            return Err("a state output takes row changes and controls, not items".into())
        }
        OutputItem::Upsert { collection, row } => stream.upsert(name(*collection)?, row),
        OutputItem::Remove { collection, key } => stream.remove(name(*collection)?, key.clone()),
        OutputItem::Control(control) => Ok(StateMessage::from(*control)),
    }
    .map_err(|e| e.to_string())?;
    message.encode().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(sizes: &[usize]) -> Vec<Bytes> {
        sizes.iter().map(|&n| Bytes::from(vec![b'1'; n])).collect()
    }

    fn counts(appends: &[Vec<Bytes>]) -> Vec<usize> {
        appends.iter().map(Vec::len).collect()
    }

    #[test]
    fn appends_hold_what_fits_their_limit_with_its_framing() {
        // Each item costs its bytes and a separator, each append two brackets.
        let split = split_appends(items(&[3, 3, 3, 3, 3]), 9).expect("fits");
        assert_eq!(counts(&split), [2, 2, 1]);
        assert!(split.iter().all(|a| append_size(a) <= 9));
        let whole = split_appends(items(&[3, 3, 3]), 13).expect("fits");
        assert_eq!(counts(&whole), [3]);
        assert_eq!(split_appends(items(&[3, 8]), 9), Err(8));
        assert!(split_appends(Vec::new(), 9).expect("nothing").is_empty());
    }

    #[test]
    fn appends_hold_at_most_the_stores_default_message_count() {
        let many = items(&vec![1; eddy_streams::DEFAULT_MAX_APPEND_MESSAGES + 1]);
        let split = split_appends(many, usize::MAX).expect("fits");
        assert_eq!(
            counts(&split),
            [eddy_streams::DEFAULT_MAX_APPEND_MESSAGES, 1]
        );
    }

    #[test]
    fn recorded_counts_split_the_same_items_again() {
        let split = split_as(items(&[1, 2, 3, 4]), &[1, 3]).expect("adds up");
        assert_eq!(counts(&split), [1, 3]);
        assert!(split_as(items(&[1, 2]), &[1, 3]).is_none());
    }
}
