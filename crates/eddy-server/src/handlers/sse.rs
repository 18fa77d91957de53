//! GET with `live=sse`: a server-sent event stream of `data` events, each
//! followed by a `control` event with the next offset, the cursor, and
//! whether the reader is up to date or the stream closed.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use eddy_streams::{ReadChunk, ReadFrom, StreamPath, Wait};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::encode::{self, SseEncoding};
use super::put;
use crate::cursor;
use crate::error::ApiError;
use crate::protocol;
use crate::state::{AppState, LiveReader};

pub(super) async fn sse(
    state: &AppState,
    path: &StreamPath,
    from: ReadFrom,
    client_cursor: Option<String>,
) -> Result<Response, ApiError> {
    // The first read happens before answering, so an unknown stream is a
    // plain 404 rather than an empty event stream.
    let first = state
        .store
        .read(path, from, state.config.max_read_bytes)
        .await?;
    let slot = state.live_reader()?;
    let encoding = SseEncoding::for_content_type(&first.content_type);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(8);
    tokio::spawn(run(
        state.clone(),
        path.clone(),
        first,
        encoding,
        client_cursor,
        tx,
        slot,
    ));
    let mut out = HeaderMap::new();
    put(
        &mut out,
        header::CONTENT_TYPE.as_str(),
        "text/event-stream".into(),
    );
    put(&mut out, header::CACHE_CONTROL.as_str(), "no-cache".into());
    if encoding == SseEncoding::Base64 {
        put(&mut out, protocol::SSE_DATA_ENCODING, "base64".into());
    }
    Ok((
        StatusCode::OK,
        out,
        Body::from_stream(ReceiverStream::new(rx)),
    )
        .into_response())
}

/// Feeds events to one SSE client until it leaves, the stream closes, the
/// stream goes away, or the server shuts down.
async fn run(
    state: AppState,
    path: StreamPath,
    first: ReadChunk,
    encoding: SseEncoding,
    mut client_cursor: Option<String>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    _slot: LiveReader,
) {
    let mut chunk = first;
    loop {
        if !chunk.messages.is_empty() {
            state.metrics.reads.fetch_add(1, Ordering::Relaxed);
            if tx
                .send(Ok(encode::data_event(encoding, &chunk.messages)))
                .await
                .is_err()
            {
                return;
            }
        }
        let cursor = cursor::next(SystemTime::now(), client_cursor.as_deref());
        if tx.send(Ok(control(&chunk, &cursor))).await.is_err() || chunk.closed {
            return;
        }
        client_cursor = Some(cursor);
        let next = chunk.next_offset;
        if chunk.up_to_date {
            loop {
                let waited = tokio::select! {
                    waited = state.store.wait(&path, next, state.config.sse_keep_alive) => waited,
                    () = tx.closed() => return,
                    () = state.shutting_down() => return,
                };
                match waited {
                    Ok(Wait::Changed(_)) => break,
                    Ok(Wait::TimedOut(_)) => {
                        if tx
                            .send(Ok(Bytes::from_static(b": keep-alive\n\n")))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        }
        chunk = match state
            .store
            .read(&path, ReadFrom::Offset(next), state.config.max_read_bytes)
            .await
        {
            Ok(chunk) => chunk,
            Err(err) => {
                tracing::debug!(%path, error = %err, "SSE stream ended");
                return;
            }
        };
    }
}

/// The control event after a chunk.
fn control(chunk: &ReadChunk, cursor: &str) -> Bytes {
    let mut control = serde_json::Map::new();
    control.insert(
        "streamNextOffset".into(),
        chunk.next_offset.to_string().into(),
    );
    if chunk.closed {
        control.insert("streamClosed".into(), true.into());
        control.insert("upToDate".into(), true.into());
    } else {
        control.insert("streamCursor".into(), cursor.into());
        if chunk.up_to_date {
            control.insert("upToDate".into(), true.into());
        }
    }
    let json = serde_json::Value::Object(control).to_string();
    encode::event("control", json.as_bytes())
}
