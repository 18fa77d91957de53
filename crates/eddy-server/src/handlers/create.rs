//! PUT: create a stream, optionally with data, closed, expiring, or as a
//! fork of another stream.

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::Response;
use eddy_streams::{Expiry, Fork, Payload, StreamConfig, StreamPath, OCTET_STREAM};

use super::{describe, put, read_body};
use crate::auth::{self, Access, Caller, Operation};
use crate::error::ApiError;
use crate::parse;
use crate::protocol;
use crate::state::AppState;

pub(super) async fn create(
    state: &AppState,
    path: &StreamPath,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let closed = parse::closed(headers)?;
    let expiry = parse::expiry(headers)?;
    let retention = parse::retention(headers)?
        .or_else(|| crate::retention::policy_for(&state.config.retention, path.as_str()));
    let content_type = parse::header(headers, header::CONTENT_TYPE)?;
    // A rule applies to JSON streams only (a fork without a content type
    // keeps its source's policy); the header to any, which the store
    // refuses on other streams.
    let compaction = match parse::compaction(headers)? {
        Some(policy) => policy,
        None if content_type.is_some_and(eddy_streams::is_json) => {
            crate::retention::policy_for(&state.config.compaction, path.as_str()).flatten()
        }
        None => None,
    };
    let fork = fork_request(headers)?;
    if let Some(fork) = &fork {
        let caller = Caller::of(&state.config, headers);
        let source = Access::Stream(Operation::ForkFrom, fork.source.as_str());
        auth::authorize(&state.config, caller, source)?;
    }
    let body = read_body(state, body).await?;
    let slot = match state.streams.reserve(state.store.as_ref()).await {
        Ok(slot) => Some(slot),
        // At the cap, a PUT of a stream that exists still gets its answer
        // (200 for the same configuration, 409 otherwise).
        Err(_) if state.store.head(path).await.is_ok() => None,
        Err(err) => return Err(err),
    };
    let created = match fork {
        Some(mut fork) => {
            fork.initial = Payload::Body(body);
            fork.content_type = content_type.map(str::to_owned);
            fork.expiry = expiry;
            fork.retention = retention;
            fork.compaction = compaction;
            fork.closed = closed;
            state.store.fork(path, fork).await
        }
        None => {
            let config = StreamConfig {
                content_type: content_type.unwrap_or(OCTET_STREAM).to_owned(),
                expiry: expiry.unwrap_or(Expiry::Never),
                closed,
                retention: retention.unwrap_or_default(),
                compaction,
            };
            state.store.create(path, config, Payload::Body(body)).await
        }
    }
    .map_err(ApiError::on_create)?;
    if let (true, Some(slot)) = (created.created, slot) {
        slot.kept();
    }
    let mut out = super::response_headers();
    describe(&mut out, &created.info);
    let host = parse::header(headers, header::HOST)?.unwrap_or("localhost");
    put(
        &mut out,
        header::LOCATION,
        format!("http://{host}{}", uri.path()),
    );
    let status = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(super::respond(status, out, Body::empty()))
}

/// The fork headers, if this create is a fork.
fn fork_request(headers: &HeaderMap) -> Result<Option<Fork>, ApiError> {
    let source = parse::header(headers, protocol::FORKED_FROM)?;
    let offset = parse::header(headers, protocol::FORK_OFFSET)?;
    let sub = parse::header(headers, protocol::FORK_SUB_OFFSET)?;
    let Some(source) = source else {
        if offset.is_some() || sub.is_some() {
            return Err(ApiError::bad_request(
                "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
            ));
        }
        return Ok(None);
    };
    let mut fork = Fork::of(parse::fork_source(source)?);
    if let Some(offset) = offset {
        fork = fork.at(parse::offset("Stream-Fork-Offset", offset)?);
    }
    if let Some(sub) = sub {
        fork = fork.sub_offset(parse::decimal("Stream-Fork-Sub-Offset", sub, true)?);
    }
    Ok(Some(fork))
}
