//! `GET /_eddy/streams?prefix=...`: Eddy's own listing endpoint, which the
//! remote client uses for [`Storage::list`](eddy_streams::Storage::list)
//! (a JSON array of every stream under the prefix), and, with `limit`
//! and `after`, for [`Storage::list_page`](eddy_streams::Storage::list_page)
//! (an object: one page of `streams` and the `next` page's `after`), and
//! with `paths=true` too, for
//! [`Storage::list_paths_page`](eddy_streams::Storage::list_paths_page)
//! (one page of `paths` and the `next`).

use axum::http::Method;
use axum::response::Response;
use percent_encoding::percent_decode_str;

use crate::error::ApiError;
use crate::state::AppState;
use crate::wire::{ListedPage, ListedPaths, ListedStream};

pub(super) async fn list(
    state: &AppState,
    method: &Method,
    endpoint: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    if endpoint != "streams" {
        return Err(ApiError::bad_request(format!(
            "`/{}{endpoint}` is reserved; the endpoints there are `streams` and `compact/PATH`",
            crate::protocol::RESERVED_PREFIX
        )));
    }
    if method != Method::GET {
        return Err(ApiError::MethodNotAllowed(method.clone()));
    }
    let mut prefix = String::new();
    let mut after = None;
    let mut limit = None;
    let mut paths = false;
    for pair in query.unwrap_or("").split('&') {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        let decoded = || {
            percent_decode_str(value)
                .decode_utf8()
                .map(|v| v.into_owned())
                .map_err(|_| ApiError::bad_request(format!("`{name}` is not UTF-8")))
        };
        match name {
            "prefix" => prefix = decoded()?,
            "after" => after = Some(decoded()?),
            "limit" => {
                let n = decoded()?.parse::<usize>().ok().filter(|n| *n > 0);
                limit = Some(n.ok_or_else(|| {
                    ApiError::bad_request("`limit` is a number of streams, at least 1")
                })?);
            }
            "paths" => paths = decoded()? == "true",
            _ => {}
        }
    }
    if paths {
        let limit = limit.unwrap_or(eddy_streams::MAX_LIST_PAGE);
        let page = state
            .store
            .list_paths_page(&prefix, after.as_deref(), limit)
            .await?;
        super::json(&ListedPaths {
            paths: page.paths,
            next: page.next,
        })
    } else if after.is_none() && limit.is_none() {
        let streams: Vec<ListedStream> = state
            .store
            .list(&prefix)
            .await?
            .iter()
            .map(ListedStream::from)
            .collect();
        super::json(&streams)
    } else {
        let limit = limit.unwrap_or(eddy_streams::MAX_LIST_PAGE);
        let page = state
            .store
            .list_page(&prefix, after.as_deref(), limit)
            .await?;
        super::json(&ListedPage {
            streams: page.streams.iter().map(ListedStream::from).collect(),
            next: page.next,
        })
    }
}
