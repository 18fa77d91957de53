//! Writing a unit's outputs: checking them before the first append,
//! encoding every item before anything is written, and appending each
//! output with its producer position.

use bytes::Bytes;
use eddy_streams::{
    Append, Payload, ProducerPosition, StateMessage, StreamConfig, StreamError, StreamPath,
};

use super::Session;
use crate::declare::{Params, State};
use crate::emits::{Items, OutputItem};
use crate::handles::{OutputKind, OutputSpec};
use crate::{Emits, ProjectionError, Result};

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
                Err(StreamError::Gone { .. }) => {
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

    /// Appends each output's encoded items with its producer position;
    /// returns the outputs that used a sequence number.
    pub(super) async fn append_outputs(
        &self,
        encoded: Vec<(usize, Vec<Bytes>)>,
    ) -> Result<Vec<String>> {
        let declared = self.bound.projection.outputs();
        let mut emitted = Vec::new();
        for (index, messages) in encoded {
            let (output, path) = (&declared[index], &self.bound.outputs[index]);
            let seq = self
                .checkpoint
                .next_seq
                .get(&output.name)
                .copied()
                .unwrap_or(0);
            let position = ProducerPosition::new(self.producer_id(&output.name), 0, seq);
            let append = Append::messages(messages).with_producer(position);
            self.host
                .storage
                .append(path, append)
                .await
                .map_err(|e| append_error(&output.name, path, e))?;
            emitted.push(output.name.clone());
        }
        Ok(emitted)
    }

    /// The producer id of one output of this binding: stable across
    /// retries, new when the binding is rebuilt.
    fn producer_id(&self, output: &str) -> String {
        format!(
            "eddy-projection/{}/{}/{}/{output}/{}",
            self.bound.key.projection,
            self.bound.key.version,
            self.bound.key.params,
            self.checkpoint.generation
        )
    }
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
/// closed, gone or absent cannot take the unit (`pin/invalid-output`).
pub(crate) fn append_error(output: &str, path: &StreamPath, err: StreamError) -> ProjectionError {
    match err {
        StreamError::Closed { .. } | StreamError::Gone { .. } | StreamError::NotFound { .. } => {
            ProjectionError::InvalidOutput {
                output: output.to_owned(),
                path: path.to_string(),
                reason: err.to_string(),
            }
        }
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
        OutputItem::Control(control) => Ok(StateMessage::Control(*control)),
    }
    .map_err(|e| e.to_string())?;
    message.encode().map_err(|e| e.to_string())
}
