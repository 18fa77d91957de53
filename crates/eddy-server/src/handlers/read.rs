//! GET: catch-up reads and long-polls. SSE is in [`super::sse`].

use std::time::SystemTime;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use eddy_streams::{ReadChunk, ReadFrom, StreamPath, Wait};

use super::encode;
use super::{put, put_offset, respond};
use crate::cache::{self, Freshness};
use crate::cursor;
use crate::error::ApiError;
use crate::parse::{self, Live};
use crate::protocol;
use crate::server::{UnreadBudget, UnreadBytes};
use crate::state::AppState;

pub(super) async fn get(
    state: &AppState,
    path: &StreamPath,
    query: Option<&str>,
    headers: &HeaderMap,
    unread: Option<&UnreadBudget>,
) -> Result<Response, ApiError> {
    let parsed = parse::read_query(query)?;
    let from = parsed.offset.unwrap_or(ReadFrom::Beginning);
    match parsed.live {
        Live::No => catch_up(state, path, from, query, headers, unread).await,
        Live::LongPoll => long_poll(state, path, from, parsed.cursor.as_deref(), unread).await,
        Live::Sse => super::sse::sse(state, path, from, parsed.cursor).await,
    }
}

/// A catch-up read. Its answer is cached for good only when the offset in
/// its URL is one of the stream's own: a read from `-1`, the zero offset
/// or a fork source's offset depends on the stream the path holds now, so
/// it is answered with the data and `no-store`, naming the same bytes'
/// immutable URL in `Content-Location` (or, with
/// `redirect_first_reads`, redirected there: see [`cache::own_offset_url`]).
async fn catch_up(
    state: &AppState,
    path: &StreamPath,
    from: ReadFrom,
    query: Option<&str>,
    headers: &HeaderMap,
    unread: Option<&UnreadBudget>,
) -> Result<Response, ApiError> {
    let max = match parse::header(headers, protocol::MAX_BYTES)? {
        Some(sent) => usize::try_from(parse::decimal("Eddy-Max-Bytes", sent, false)?)
            .unwrap_or(usize::MAX)
            .min(state.config.max_read_bytes),
        None => state.config.max_read_bytes,
    };
    // The connection's share is taken before the read: a client that
    // does not take its answers makes its next reads wait, not the
    // server's memory grow.
    let share = take_unread(unread, max).await?;
    let redirect = state.config.cache.redirect_first_reads;
    // `-1` and the zero offset name whichever stream the path holds now:
    // to redirect, one message is enough to learn where its data starts.
    let sentinel = matches!(from, ReadFrom::Beginning)
        || matches!(from, ReadFrom::Offset(offset) if offset.is_zero());
    let chunk = state
        .store
        .read(path, from, if sentinel && redirect { 1 } else { max })
        .await?;
    let own = matches!(from, ReadFrom::Tail) || from == ReadFrom::Offset(chunk.start);
    if !own && redirect {
        return Ok(cache::redirect(cache::own_offset_url(query, chunk.start)));
    }
    state.metrics.reads.increment(1);
    let etag = cache::etag(&chunk);
    let mut out = chunk_headers(&chunk);
    let freshness = if !own || from == ReadFrom::Tail || chunk.up_to_date {
        Freshness::Tail
    } else {
        Freshness::Historical
    };
    if !own {
        if let Ok(url) = HeaderValue::try_from(cache::own_offset_url(query, chunk.start)) {
            out.insert(header::CONTENT_LOCATION, url);
        }
    }
    put(
        &mut out,
        header::CACHE_CONTROL,
        cache::control(state, path, freshness),
    );
    put(&mut out, header::VARY, cache::READ_VARY);
    if let Some(sent) = parse::header(headers, header::IF_NONE_MATCH)?
        .and_then(|sent| cache::matching_tag(sent, &etag))
    {
        // The tag the client holds, so a compressed copy stays valid.
        let tag = if sent == "*" { etag } else { sent.to_owned() };
        put(&mut out, header::ETAG, tag);
        return Ok(respond(StatusCode::NOT_MODIFIED, out, Body::empty()));
    }
    put(&mut out, header::ETAG, etag);
    let framed = parse::header(headers, protocol::FRAMING)? == Some(protocol::FRAMING_MESSAGES);
    let positioned = framed && parse::header(headers, protocol::POSITIONS)? == Some("true");
    let body = if positioned {
        put(&mut out, protocol::FRAMING, protocol::FRAMING_MESSAGES);
        put(&mut out, protocol::POSITIONS, "true");
        encode::framed_at(&chunk)
    } else if framed {
        put(&mut out, protocol::FRAMING, protocol::FRAMING_MESSAGES);
        encode::framed(&chunk.messages)
    } else {
        encode::body(&chunk.content_type, &chunk.messages)
    };
    Ok(holding(share, respond(StatusCode::OK, out, body.into())))
}

/// A share of the connection's unread budget for a response of up to
/// `bytes` (none for a request served without a connection); an error
/// once the connection is closed, so that no read is made for it.
async fn take_unread(
    unread: Option<&UnreadBudget>,
    bytes: usize,
) -> Result<Option<UnreadBytes>, ApiError> {
    match unread {
        Some(budget) => match budget.take(bytes).await {
            Some(share) => Ok(Some(share)),
            None => Err(ApiError::ConnectionClosed),
        },
        None => Ok(None),
    }
}

/// `response`, holding `share` for the bytes of its body until it is sent.
fn holding(share: Option<UnreadBytes>, mut response: Response) -> Response {
    if let Some(share) = share {
        let hint = hyper::body::Body::size_hint(response.body());
        let bytes = usize::try_from(hint.lower()).unwrap_or(usize::MAX);
        share.hold(bytes, &mut response);
    }
    response
}

async fn long_poll(
    state: &AppState,
    path: &StreamPath,
    from: ReadFrom,
    client_cursor: Option<&str>,
    unread: Option<&UnreadBudget>,
) -> Result<Response, ApiError> {
    // Readers at one offset share their reads: an append that wakes ten
    // thousand of them costs one read.
    let mut chunk = state
        .live_reads(path, from)
        .read(&state.store, None)
        .await?;
    if chunk.messages.is_empty() && !chunk.closed {
        let _slot = state.live_reader()?;
        // Joined before waiting, so that it holds every reader this wait's
        // commit wakes.
        let group = state.live_reads(path, ReadFrom::Offset(chunk.next_offset));
        let waited = tokio::select! {
            waited = state.store.wait(path, chunk.next_offset, state.config.long_poll_timeout) => Some(waited?),
            () = state.shutting_down() => None,
        };
        if let Some(Wait::Changed(info)) = waited {
            chunk = group
                .read(&state.store, Some((info.tail, info.closed)))
                .await?;
        }
    }
    state.metrics.reads.increment(1);
    let mut out = chunk_headers(&chunk);
    // Data from the offset the URL names is the same for every client with
    // this URL when it is one of the stream's own offsets; `-1`, `now` and
    // other streams' offsets depend on the stream the path holds now, and
    // a timeout is stale at once.
    let freshness = if chunk.messages.is_empty() || from != ReadFrom::Offset(chunk.start) {
        Freshness::Tail
    } else {
        Freshness::LongPollData
    };
    put(
        &mut out,
        header::CACHE_CONTROL,
        cache::control(state, path, freshness),
    );
    if !chunk.closed {
        put(
            &mut out,
            protocol::CURSOR,
            cursor::next(SystemTime::now(), client_cursor),
        );
    }
    if chunk.messages.is_empty() {
        return Ok(respond(StatusCode::NO_CONTENT, out, Body::empty()));
    }
    put(&mut out, header::ETAG, cache::etag(&chunk));
    // The read is shared; each answer's body is its own.
    let share = take_unread(unread, chunk.messages.iter().map(|m| m.len()).sum()).await?;
    let body = encode::body(&chunk.content_type, &chunk.messages);
    Ok(holding(share, respond(StatusCode::OK, out, body.into())))
}

/// The headers of a read response.
fn chunk_headers(chunk: &ReadChunk) -> HeaderMap {
    let mut out = super::response_headers();
    put(&mut out, header::CONTENT_TYPE, chunk.content_type.clone());
    put_offset(&mut out, protocol::NEXT_OFFSET, chunk.next_offset);
    put_offset(&mut out, protocol::READ_START, chunk.start);
    if chunk.up_to_date {
        put(&mut out, protocol::UP_TO_DATE, "true");
    }
    if chunk.closed {
        put(&mut out, protocol::CLOSED, "true");
    }
    super::put_retention(&mut out, &chunk.retention);
    super::put_compaction(&mut out, chunk.compaction.as_ref());
    super::put_dropped_deletes(&mut out, chunk.dropped_deletes);
    out
}
