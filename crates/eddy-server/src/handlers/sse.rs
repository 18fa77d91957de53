//! GET with `live=sse`: a server-sent event stream of `data` events, each
//! followed by a `control` event with the next offset, the cursor, and
//! whether the reader is up to date or the stream closed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use eddy_streams::{Offset, ReadChunk, ReadFrom, StreamPath, Wait};

use super::encode::{self, SseEncoding};
use super::put;
use crate::cursor;
use crate::error::ApiError;
use crate::protocol;
use crate::shared_read::{ReadGroup, Seen};
use crate::state::{AppState, LiveReader};

/// nginx's header that turns off its buffering of one response.
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

pub(super) async fn sse(
    state: &AppState,
    path: &StreamPath,
    from: ReadFrom,
    client_cursor: Option<String>,
) -> Result<Response, ApiError> {
    // The first read happens before answering, so an unknown stream is a
    // plain 404 rather than an empty event stream.
    let first = state
        .live_reads(path, from)
        .read(&state.store, None)
        .await?;
    let slot = state.live_reader()?;
    let encoding = SseEncoding::for_content_type(&first.content_type);
    let feed = Feed {
        state: state.clone(),
        path: path.clone(),
        encoding,
        client_cursor,
        next: Step::Chunk(first),
        group: None,
        _slot: slot,
    };
    let events = futures::stream::unfold(feed, |mut feed| async move {
        let event = feed.next_event().await?;
        Some((Ok::<_, Infallible>(event), feed))
    });
    let mut out = super::response_headers();
    put(&mut out, header::CONTENT_TYPE, "text/event-stream");
    put(&mut out, header::CACHE_CONTROL, "no-cache");
    // Proxies that buffer responses (nginx) pass each event on at once.
    put(&mut out, X_ACCEL_BUFFERING, "no");
    if encoding == SseEncoding::Base64 {
        put(&mut out, protocol::SSE_DATA_ENCODING, "base64");
    }
    Ok((StatusCode::OK, out, Body::from_stream(events)).into_response())
}

/// One SSE client's events, made one at a time when the connection asks
/// for the next: a slow reader holds at most one chunk of the stream in
/// the server, and a reader that leaves drops the feed (and its wait).
struct Feed {
    state: AppState,
    path: StreamPath,
    encoding: SseEncoding,
    client_cursor: Option<String>,
    next: Step,
    /// The readers of the offset this feed waits at, which it joins
    /// before waiting so that one read answers everyone a commit wakes.
    group: Option<ReadGroup>,
    _slot: LiveReader,
}

/// What the feed does when asked for its next event.
enum Step {
    /// Send this chunk: its data event (if it has messages), then its
    /// control event.
    Chunk(Arc<ReadChunk>),
    /// Send the control event that follows a data event.
    Control(Arc<ReadChunk>),
    /// Read on from `next`, after waiting for data if `wait`; `seen` is
    /// the state a wake handed over, which the read shares with the
    /// readers woken by the same commit.
    Read {
        next: Offset,
        wait: bool,
        seen: Seen,
    },
    /// The stream is closed or gone, the server stops, or a read failed.
    Done,
}

impl Feed {
    /// The group of readers at `next`, joined if this feed is not in it.
    fn group_at(&mut self, next: Offset) -> ReadGroup {
        let from = ReadFrom::Offset(next);
        match &self.group {
            Some(group) if group.is_at(&self.path, from) => group.clone(),
            _ => {
                let group = self.state.live_reads(&self.path, from);
                self.group = Some(group.clone());
                group
            }
        }
    }

    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            match std::mem::replace(&mut self.next, Step::Done) {
                Step::Done => return None,
                Step::Chunk(chunk) if !chunk.messages.is_empty() => {
                    self.state.metrics.reads.increment(1);
                    let event = encode::data_event(self.encoding, &chunk.messages);
                    self.next = Step::Control(chunk);
                    return Some(event);
                }
                Step::Chunk(chunk) | Step::Control(chunk) => {
                    let cursor = cursor::next(SystemTime::now(), self.client_cursor.as_deref());
                    let event = control(&chunk, &cursor);
                    self.client_cursor = Some(cursor);
                    if !chunk.closed {
                        self.next = Step::Read {
                            next: chunk.next_offset,
                            wait: chunk.up_to_date,
                            seen: None,
                        };
                    }
                    return Some(event);
                }
                Step::Read {
                    next, wait: true, ..
                } => {
                    self.group_at(next);
                    let waited = tokio::select! {
                        waited = self.state.store.wait(&self.path, next, self.state.config.sse_keep_alive) => waited,
                        () = self.state.shutting_down() => return None,
                    };
                    match waited {
                        Ok(Wait::Changed(info)) => {
                            self.next = Step::Read {
                                next,
                                wait: false,
                                seen: Some((info.tail, info.closed)),
                            }
                        }
                        Ok(Wait::TimedOut(_)) => {
                            self.next = Step::Read {
                                next,
                                wait: true,
                                seen: None,
                            };
                            return Some(Bytes::from_static(b": keep-alive\n\n"));
                        }
                        Err(_) => return None,
                    }
                }
                Step::Read {
                    next,
                    wait: false,
                    seen,
                } => {
                    let read = self.group_at(next).read(&self.state.store, seen).await;
                    match read {
                        Ok(chunk) => {
                            if !chunk.messages.is_empty() {
                                // Moving on: the group stays with the readers
                                // still at `next`.
                                self.group = None;
                            }
                            self.next = Step::Chunk(chunk);
                        }
                        Err(err) => {
                            tracing::debug!(path = %self.path, error = %err, "SSE stream ended");
                            return None;
                        }
                    }
                }
            }
        }
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
