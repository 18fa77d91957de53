//! POST: append data, close, or both, under the writer's conditions.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use eddy_streams::{Append, Payload, StreamPath};

use super::{put, put_offset, read_body};
use crate::error::ApiError;
use crate::parse;
use crate::protocol;
use crate::state::AppState;

pub(super) async fn append(
    state: &AppState,
    path: &StreamPath,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let [closed, producer_id, producer_epoch, producer_seq, stream_seq, expected, content_type] =
        parse::pick(
            headers,
            &[
                protocol::CLOSED,
                protocol::PRODUCER_ID,
                protocol::PRODUCER_EPOCH,
                protocol::PRODUCER_SEQ,
                protocol::STREAM_SEQ,
                protocol::EXPECTED_OFFSET,
                header::CONTENT_TYPE,
            ],
        )?;
    let close = parse::is_true(closed);
    let producer = parse::producer_of(producer_id, producer_epoch, producer_seq)?;
    let expected = expected
        .map(|v| parse::offset("Stream-Expected-Offset", v))
        .transpose()?;
    let body = read_body(state, body).await?;
    let size = body.len();
    let has_data = !body.is_empty();
    let mut append = Append::new(Payload::Body(body));
    if has_data {
        let content_type = content_type
            .ok_or_else(|| ApiError::bad_request("an append with data needs a Content-Type"))?;
        append = append.with_content_type(content_type);
    }
    append.close = close;
    append.producer = producer.clone();
    append.stream_seq = stream_seq.map(str::to_owned);
    append.expected_tail = expected;
    let appended = state.store.append(path, append).await?;
    let metrics = &state.metrics;
    if appended.duplicate {
        metrics.duplicate_appends.increment(1);
    } else if has_data {
        metrics.appends.increment(1);
        metrics.append_bytes.increment(size as u64);
    }
    let mut out = super::response_headers();
    put_offset(&mut out, protocol::NEXT_OFFSET, appended.next_offset);
    if appended.duplicate {
        put(&mut out, protocol::DUPLICATE, "true");
    }
    if appended.closed {
        put(&mut out, protocol::CLOSED, "true");
    }
    if let Some((epoch, seq)) = appended.producer {
        put(&mut out, protocol::PRODUCER_EPOCH, epoch.to_string());
        put(&mut out, protocol::PRODUCER_SEQ, seq.to_string());
    }
    let status = if producer.is_some() && has_data && !appended.duplicate {
        StatusCode::OK
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(super::respond(status, out, Body::empty()))
}
