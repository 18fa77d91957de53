//! `POST /_eddy/compact/PATH`: one compaction pass of the stream at PATH
//! now, as `eddy streams compact --server` asks for it. The pass is what
//! the sweep runs when the stream is due; it changes what a stream keeps,
//! so it takes the token that may write the stream. The answer is a JSON
//! object: the messages the pass dropped and the bytes the stream keeps.

use axum::http::{HeaderMap, Method};
use axum::response::Response;

use crate::auth::{self, Access, Caller, Operation};
use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::Compacted;

pub(super) async fn compact(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    path: &str,
) -> Result<Response, ApiError> {
    if method != Method::POST {
        return Err(ApiError::MethodNotAllowed(method.clone()));
    }
    let path = crate::parse::stream_path(path)?;
    let caller = Caller::of(&state.config, headers);
    auth::authorize(
        &state.config,
        caller,
        Access::Stream(Operation::Write, path.as_str()),
    )?;
    let dropped = state.store.compact(&path).await?;
    let bytes = state.store.head(&path).await?.bytes;
    super::json(&Compacted { dropped, bytes })
}
