//! Wake streams: one keyed row per source stream saying how far it is.

use eddy_streams::{Offset, Route, StateStream, StreamError};
use serde::{Deserialize, Serialize};

use crate::declare::Params;
use crate::{Commit, Declare, Projection, Result};

/// The one collection of a wake stream: rows keyed by `stream`.
pub const WAKE_COLLECTION: &str = "source";

/// A wake row: the source stream, its committed tail, and whether it is
/// closed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeRow {
    /// The source stream's path (the row key).
    pub stream: String,
    /// The source's offset after its last item.
    pub offset: Offset,
    /// `Some(true)` once the source is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<bool>,
}

/// Declares a wake stream at `route`: a state stream with the fixed
/// [`WAKE_COLLECTION`] of [`WakeRow`]s.
pub fn wake_stream(id: &str, route: &str) -> Result<StateStream, StreamError> {
    Ok(StateStream::new(id, route)?.collection::<WakeRow>(WAKE_COLLECTION, "stream"))
}

/// Declares a wake projection: for each binding it keeps one row
/// `{ stream, offset, closed? }` for its source in `output`, and deletes
/// the row when the source is gone; the binding is then forgotten and
/// its producer on `output` released, so sources can come and go without
/// end under the store's producer cap. It commits with the producer commit,
/// so a missing wake stream is created on this owner; declare `output`
/// with [`wake_stream`]. The source's items are not decoded, so any stream
/// can be a source.
pub fn wake<P: Params>(id: &str, input: Route, output: &StateStream) -> Result<Projection<P, ()>> {
    let declare = Declare::<P>::new(id);
    let source = declare.input_bytes("input", input);
    let wakes = declare.state_output("output", output);
    let rows = declare.collection::<WakeRow>(wakes, WAKE_COLLECTION);
    declare.map_accum_batch(Commit::producer(), (), move |(), batch, _unit, emits| {
        let slice = batch.slice(source);
        if slice.gone {
            emits.remove(rows, slice.path);
        } else if !slice.items.is_empty() || slice.closed {
            let row = WakeRow {
                stream: slice.path.to_owned(),
                offset: slice.to,
                closed: slice.closed.then_some(true),
            };
            emits.upsert(rows, row);
        }
    })
}
