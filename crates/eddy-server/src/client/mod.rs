//! [`RemoteStorage`]: the [`Storage`] trait over HTTP, against any server
//! that speaks the Durable Streams protocol with Eddy's extensions (message
//! framing on reads, listing, duplicate and error-code headers).

mod errors;
mod headers;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Buf, Bytes};
use eddy_streams::{
    is_json, Append, Appended, Committed, Created, Expiry, Fork, Notifier, Offset, Payload,
    ReadChunk, ReadFrom, Storage, StreamConfig, StreamError, StreamInfo, StreamPath, Wait,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use reqwest::{Method, RequestBuilder, Response, StatusCode};

use crate::protocol;
use crate::wire::ListedStream;
use errors::ErrorParts;

/// Characters escaped in one path segment.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|')
    .add(b'[')
    .add(b']')
    .add(b'&')
    .add(b'+');

/// A stream store in another process, reached over HTTP.
///
/// Every call is one request (an append of pre-split messages to a stream
/// whose type is not yet known adds a `HEAD`). [`Storage::wait`] uses
/// long-polls; [`Storage::committed`] reports the commits made through this
/// client only, since HTTP has no process-wide feed.
#[derive(Debug)]
pub struct RemoteStorage {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    notifier: Notifier,
    content_types: Mutex<HashMap<String, String>>,
}

impl RemoteStorage {
    /// A client of the server at `base_url` (`http://127.0.0.1:4437`).
    pub fn new(base_url: &str) -> Result<Self, StreamError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| StreamError::internal_from("cannot build the HTTP client", e))?;
        Ok(RemoteStorage {
            base: base_url.trim_end_matches('/').to_owned(),
            http,
            token: None,
            notifier: Notifier::default(),
            content_types: Mutex::new(HashMap::new()),
        })
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    fn url(&self, path: &StreamPath) -> String {
        self.url_under(&self.base, path)
    }

    /// `base` followed by the stream path's segments, each encoded.
    fn url_under(&self, base: &str, path: &StreamPath) -> String {
        let mut url = base.to_owned();
        for segment in path.as_str().split('/') {
            url.push('/');
            url.extend(utf8_percent_encode(segment, SEGMENT));
        }
        url
    }

    /// The URL of one page of the listing of `prefix` after `after`.
    fn page_url(&self, prefix: &str, after: Option<&str>, limit: usize) -> String {
        let mut url = format!(
            "{}/{}streams?prefix={}&limit={}",
            self.base,
            protocol::RESERVED_PREFIX,
            utf8_percent_encode(prefix, SEGMENT),
            limit.clamp(1, eddy_streams::MAX_LIST_PAGE)
        );
        if let Some(after) = after {
            url.push_str("&after=");
            url.extend(utf8_percent_encode(after, SEGMENT));
        }
        url
    }

    fn request(&self, method: Method, url: String) -> RequestBuilder {
        let builder = self.http.request(method, url);
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    async fn send(&self, builder: RequestBuilder) -> Result<Response, StreamError> {
        builder.send().await.map_err(|e| {
            if e.is_builder() {
                StreamError::internal_from("cannot build the request", e)
            } else {
                StreamError::unavailable_from("the request to the stream server failed", e)
            }
        })
    }

    fn remember(&self, path: &StreamPath, content_type: &str) {
        let mut types = self.content_types.lock().unwrap_or_else(|e| e.into_inner());
        types.insert(path.to_string(), content_type.to_owned());
    }

    async fn content_type(&self, path: &StreamPath) -> Result<String, StreamError> {
        let known = {
            let types = self.content_types.lock().unwrap_or_else(|e| e.into_inner());
            types.get(path.as_str()).cloned()
        };
        match known {
            Some(content_type) => Ok(content_type),
            None => Ok(self.head(path).await?.config.content_type),
        }
    }

    /// The request body of a payload for a stream of `content_type`.
    fn body(payload: Payload, content_type: &str) -> Result<Bytes, StreamError> {
        match payload {
            Payload::Body(body) => Ok(body),
            Payload::Messages(messages) if messages.is_empty() => Ok(Bytes::new()),
            Payload::Messages(messages) if is_json(content_type) => {
                // One level of array flattening restores exactly these messages.
                let mut array = Vec::with_capacity(messages.iter().map(|m| m.len() + 1).sum::<usize>() + 2);
                array.push(b'[');
                for (i, message) in messages.iter().enumerate() {
                    if i > 0 {
                        array.push(b',');
                    }
                    array.extend_from_slice(message);
                }
                array.push(b']');
                Ok(Bytes::from(array))
            }
            Payload::Messages(mut messages) if messages.len() == 1 => Ok(messages.remove(0)),
            Payload::Messages(_) => Err(StreamError::InvalidArgument(
                "the protocol carries one message per append on byte streams; append them one by one"
                    .into(),
            )),
        }
    }

    /// The server's own report of the projection bindings in its store
    /// (its console's `/_eddy/bindings`): the server inspects its store
    /// itself, so what only it can see (durable wake-up marks) shows too.
    /// `None` when the server's console is off.
    pub async fn bindings(
        &self,
    ) -> Result<Option<Vec<eddy_projection::BindingReport>>, StreamError> {
        let url = format!("{}{}", self.base, crate::console::BINDINGS);
        let response = self.send(self.request(Method::GET, url)).await?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| StreamError::unavailable_from("reading the binding report failed", e))?;
        if !status.is_success() {
            return Err(StreamError::internal(format!(
                "the server refused its binding report ({status}): {}",
                String::from_utf8_lossy(&body).trim()
            )));
        }
        serde_json::from_slice(&body).map(Some).map_err(|e| {
            StreamError::internal_from("the server's binding report does not decode", e)
        })
    }

    fn commit(&self, path: &StreamPath, tail: Offset, closed: bool) {
        self.notifier.commit(Committed {
            path: path.to_string(),
            tail,
            closed,
        });
    }

    async fn created(
        &self,
        path: &StreamPath,
        response: Response,
        sent_bytes: usize,
    ) -> Result<Created, StreamError> {
        let status = response.status();
        if !status.is_success() {
            return Err(ErrorParts::read(response)
                .await
                .into_error(path, sent_bytes));
        }
        let info = headers::info(path, response.headers())?;
        self.remember(path, &info.config.content_type);
        let created = status == StatusCode::CREATED;
        if created {
            self.commit(path, info.tail, info.closed);
        }
        Ok(Created { created, info })
    }
}

/// Sets the expiry headers of a create.
fn with_expiry(builder: RequestBuilder, expiry: Option<Expiry>) -> RequestBuilder {
    match expiry {
        None | Some(Expiry::Never) => builder,
        Some(Expiry::Ttl(secs)) => builder.header(protocol::TTL, secs.to_string()),
        Some(Expiry::At(at)) => {
            builder.header(protocol::EXPIRES_AT, crate::parse::format_rfc3339(at))
        }
    }
}

#[async_trait]
impl Storage for RemoteStorage {
    async fn create(
        &self,
        path: &StreamPath,
        config: StreamConfig,
        initial: Payload,
    ) -> Result<Created, StreamError> {
        let body = Self::body(initial, &config.content_type)?;
        let mut builder = self
            .request(Method::PUT, self.url(path))
            .header(reqwest::header::CONTENT_TYPE, &config.content_type);
        builder = with_expiry(builder, Some(config.expiry));
        // No policy sent leaves the server's rules to choose one.
        if let Some(policy) = config.compaction {
            builder = builder.header(protocol::COMPACTION, policy.to_string());
        }
        if !config.retention.is_none() {
            builder = builder.header(protocol::RETENTION, config.retention.to_string());
        }
        if config.closed {
            builder = builder.header(protocol::CLOSED, "true");
        }
        let sent_bytes = body.len();
        let response = self.send(builder.body(body)).await?;
        self.created(path, response, sent_bytes).await
    }

    async fn fork(&self, path: &StreamPath, fork: Fork) -> Result<Created, StreamError> {
        let body = match &fork.content_type {
            Some(content_type) => Self::body(fork.initial.clone(), content_type)?,
            None if fork.initial.is_empty() => Bytes::new(),
            None => Self::body(
                fork.initial.clone(),
                &self.content_type(&fork.source).await?,
            )?,
        };
        let sent_bytes = body.len();
        let mut builder = self
            .request(Method::PUT, self.url(path))
            .header(protocol::FORKED_FROM, format!("/{}", fork.source))
            .body(body);
        if let Some(offset) = fork.offset {
            builder = builder.header(protocol::FORK_OFFSET, offset.to_string());
        }
        if fork.sub_offset > 0 {
            builder = builder.header(protocol::FORK_SUB_OFFSET, fork.sub_offset.to_string());
        }
        if let Some(content_type) = &fork.content_type {
            builder = builder.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        builder = with_expiry(builder, fork.expiry);
        if let Some(policy) = fork.compaction {
            builder = builder.header(protocol::COMPACTION, policy.to_string());
        }
        if let Some(retention) = fork.retention {
            builder = builder.header(protocol::RETENTION, retention.to_string());
        }
        if fork.closed {
            builder = builder.header(protocol::CLOSED, "true");
        }
        let response = self.send(builder).await?;
        self.created(path, response, sent_bytes).await
    }

    async fn append(&self, path: &StreamPath, append: Append) -> Result<Appended, StreamError> {
        let content_type = match &append.content_type {
            Some(sent) => sent.clone(),
            None if append.payload.is_empty() => String::new(),
            None => self.content_type(path).await?,
        };
        let body = Self::body(append.payload, &content_type)?;
        let sent_bytes = body.len();
        let mut builder = self.request(Method::POST, self.url(path));
        if !content_type.is_empty() {
            builder = builder.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        if let Some(producer) = &append.producer {
            builder = builder
                .header(protocol::PRODUCER_ID, &producer.id)
                .header(protocol::PRODUCER_EPOCH, producer.epoch.to_string())
                .header(protocol::PRODUCER_SEQ, producer.seq.to_string());
        }
        if let Some(expected) = append.expected_tail {
            builder = builder.header(protocol::EXPECTED_OFFSET, expected.to_string());
        }
        if let Some(seq) = &append.stream_seq {
            builder = builder.header(protocol::STREAM_SEQ, seq);
        }
        if append.close {
            builder = builder.header(protocol::CLOSED, "true");
        }
        let response = self.send(builder.body(body)).await?;
        if !response.status().is_success() {
            return Err(ErrorParts::read(response)
                .await
                .into_error(path, sent_bytes));
        }
        let appended = headers::appended(response.headers())?;
        if !appended.duplicate {
            self.commit(path, appended.next_offset, appended.closed);
        }
        Ok(appended)
    }

    async fn read(
        &self,
        path: &StreamPath,
        from: ReadFrom,
        max_bytes: usize,
    ) -> Result<ReadChunk, StreamError> {
        let offset = match from {
            ReadFrom::Beginning => "-1".to_owned(),
            ReadFrom::Tail => "now".to_owned(),
            ReadFrom::Offset(offset) => offset.to_string(),
        };
        let builder = self
            .request(Method::GET, format!("{}?offset={offset}", self.url(path)))
            .header(protocol::FRAMING, protocol::FRAMING_MESSAGES)
            .header(protocol::POSITIONS, "true")
            .header(protocol::MAX_BYTES, max_bytes.max(1).to_string());
        let response = self.send(builder).await?;
        if !response.status().is_success() {
            return Err(ErrorParts::read(response).await.into_error(path, 0));
        }
        let headers = response.headers().clone();
        let framed = headers
            .get(protocol::FRAMING)
            .is_some_and(|v| v.as_bytes() == protocol::FRAMING_MESSAGES.as_bytes());
        let positioned = framed
            && headers
                .get(protocol::POSITIONS)
                .is_some_and(|v| v.as_bytes() == b"true");
        let body = response
            .bytes()
            .await
            .map_err(|e| StreamError::unavailable_from("reading the response failed", e))?;
        let content_type = headers::text(&headers, reqwest::header::CONTENT_TYPE)?;
        self.remember(path, &content_type);
        let mut positions = None;
        let messages = if positioned {
            let (at, messages) = unframe_at(body)?;
            positions = Some(at);
            messages
        } else if framed {
            unframe(body)?
        } else if body.is_empty() {
            Vec::new()
        } else {
            vec![body]
        };
        let next_offset = headers::offset(&headers, protocol::NEXT_OFFSET)?;
        let up_to_date = headers::flag(&headers, protocol::UP_TO_DATE);
        let start = headers::offset(&headers, protocol::READ_START).unwrap_or(next_offset);
        let positions = positions.filter(|at: &Vec<u64>| {
            !at.iter()
                .zip(start.position()..)
                .all(|(position, expected)| *position == expected)
        });
        Ok(ReadChunk {
            start,
            content_type,
            messages,
            // The positions extension tells each message's offset; the
            // protocol alone only the chunk's end.
            positions,
            next_offset,
            up_to_date,
            closed: headers::flag(&headers, protocol::CLOSED),
            retention: headers::retention(&headers)?,
            compaction: headers::compaction(&headers)?,
            dropped_deletes: headers::dropped_deletes(&headers)?,
        })
    }

    async fn head(&self, path: &StreamPath) -> Result<StreamInfo, StreamError> {
        let response = self
            .send(self.request(Method::HEAD, self.url(path)))
            .await?;
        if !response.status().is_success() {
            return Err(ErrorParts::read(response).await.into_error(path, 0));
        }
        let info = headers::info(path, response.headers())?;
        self.remember(path, &info.config.content_type);
        Ok(info)
    }

    async fn delete(&self, path: &StreamPath) -> Result<(), StreamError> {
        let response = self
            .send(self.request(Method::DELETE, self.url(path)))
            .await?;
        if !response.status().is_success() {
            return Err(ErrorParts::read(response).await.into_error(path, 0));
        }
        self.content_types
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(path.as_str());
        self.notifier.touch(path.as_str());
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<StreamInfo>, StreamError> {
        let url = format!(
            "{}/{}streams?prefix={}",
            self.base,
            protocol::RESERVED_PREFIX,
            utf8_percent_encode(prefix, SEGMENT)
        );
        let response = self.send(self.request(Method::GET, url)).await?;
        if !response.status().is_success() {
            let path = StreamPath::new("_eddy/streams")?;
            return Err(ErrorParts::read(response).await.into_error(&path, 0));
        }
        let listed: Vec<ListedStream> = response
            .json()
            .await
            .map_err(|e| StreamError::internal_from("the server's listing does not decode", e))?;
        Ok(listed.into_iter().map(StreamInfo::from).collect())
    }

    /// One page, from the server's paged listing.
    async fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<eddy_streams::ListPage, StreamError> {
        let url = self.page_url(prefix, after, limit);
        let response = self.send(self.request(Method::GET, url)).await?;
        if !response.status().is_success() {
            let path = StreamPath::new("_eddy/streams")?;
            return Err(ErrorParts::read(response).await.into_error(&path, 0));
        }
        let page: crate::wire::ListedPage = response
            .json()
            .await
            .map_err(|e| StreamError::internal_from("the server's listing does not decode", e))?;
        Ok(eddy_streams::ListPage {
            streams: page.streams.into_iter().map(StreamInfo::from).collect(),
            next: page.next,
        })
    }

    /// One page of paths, from the server's paged listing of paths.
    async fn list_paths_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<eddy_streams::PathPage, StreamError> {
        let url = self.page_url(prefix, after, limit) + "&paths=true";
        let response = self.send(self.request(Method::GET, url)).await?;
        if !response.status().is_success() {
            let path = StreamPath::new("_eddy/streams")?;
            return Err(ErrorParts::read(response).await.into_error(&path, 0));
        }
        let page: crate::wire::ListedPaths = response
            .json()
            .await
            .map_err(|e| StreamError::internal_from("the server's listing does not decode", e))?;
        Ok(eddy_streams::PathPage {
            paths: page.paths,
            next: page.next,
        })
    }

    /// `POST /_eddy/compact/PATH`: the server runs the pass.
    async fn compact(&self, path: &StreamPath) -> Result<u64, StreamError> {
        let base = format!("{}/{}compact", self.base, protocol::RESERVED_PREFIX);
        let url = self.url_under(&base, path);
        let response = self.send(self.request(Method::POST, url)).await?;
        if !response.status().is_success() {
            return Err(ErrorParts::read(response).await.into_error(path, 0));
        }
        let compacted: crate::wire::Compacted = response.json().await.map_err(|e| {
            StreamError::internal_from("the server's compaction answer does not decode", e)
        })?;
        Ok(compacted.dropped)
    }

    /// The server's `/readyz`: 200 is yes; any other answer is a
    /// `storage-failure` that carries its text.
    async fn writable(&self) -> Result<(), StreamError> {
        let url = format!("{}/readyz", self.base);
        let response = self.send(self.request(Method::GET, url)).await?;
        if response.status().is_success() {
            return Ok(());
        }
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Err(StreamError::unavailable(format!(
            "the stream server is not ready ({status}): {}",
            text.trim()
        )))
    }

    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    async fn wait(
        &self,
        path: &StreamPath,
        after: Offset,
        timeout: Duration,
    ) -> Result<Wait, StreamError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let url = format!("{}?offset={after}&live=long-poll", self.url(path));
            let poll = self.send(self.request(Method::GET, url));
            let response = match tokio::time::timeout_at(deadline, poll).await {
                Err(_) => return Ok(Wait::TimedOut(self.head(path).await?)),
                Ok(response) => response?,
            };
            let status = response.status();
            if !status.is_success() {
                return match ErrorParts::read(response).await.into_error(path, 0) {
                    // Another stream is at the path now: the caller's next
                    // read decides, as with a local store.
                    StreamError::StaleOffset { .. } => Ok(Wait::Changed(self.head(path).await?)),
                    err => Err(err),
                };
            }
            let closed = headers::flag(response.headers(), protocol::CLOSED);
            if status == StatusCode::OK || closed {
                return Ok(Wait::Changed(self.head(path).await?));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Wait::TimedOut(self.head(path).await?));
            }
        }
    }
}

/// Splits a framed read body whose frames start with their positions
/// into the positions and the messages.
fn unframe_at(mut body: Bytes) -> Result<(Vec<u64>, Vec<Bytes>), StreamError> {
    let truncated = || StreamError::internal("the server sent a truncated framed read body");
    let (mut positions, mut messages) = (Vec::new(), Vec::new());
    while body.has_remaining() {
        if body.remaining() < 12 {
            return Err(truncated());
        }
        positions.push(body.get_u64());
        let len = body.get_u32() as usize;
        if body.remaining() < len {
            return Err(truncated());
        }
        messages.push(body.split_to(len));
    }
    Ok((positions, messages))
}

/// Splits a framed read body into its messages.
fn unframe(mut body: Bytes) -> Result<Vec<Bytes>, StreamError> {
    let mut messages = Vec::new();
    while body.has_remaining() {
        if body.remaining() < 4 {
            return Err(StreamError::internal(
                "the server sent a truncated framed read body",
            ));
        }
        let len = body.get_u32() as usize;
        if body.remaining() < len {
            return Err(StreamError::internal(
                "the server sent a truncated framed read body",
            ));
        }
        messages.push(body.split_to(len));
    }
    Ok(messages)
}
