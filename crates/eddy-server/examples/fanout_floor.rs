//! The floor of long-poll fan-out on this machine: a bare hyper server
//! (the same hyper-util connection builder as `eddy serve`, HTTP/1.1 and
//! cleartext HTTP/2) that speaks just enough of the protocol for the
//! `live_fanout` client, with no router, middleware or store.
//!
//! Long-polls park on one shared signal; a `POST` releases every parked
//! reader with an answer shaped like Eddy's (the same headers, values of
//! the same length, a body of the appended bytes). Whatever `live_fanout`
//! measures against it is what answering that many readers costs in hyper
//! and the kernel alone, so `eddy serve`'s figures read against it.
//!
//! ```sh
//! taskset -c 0 cargo run --release -p eddy-server --example fanout_floor -- 127.0.0.1:4499
//! taskset -c 1 cargo run --release -p eddy-server --example live_fanout -- http://127.0.0.1:4499 10000 3
//! ```

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The one stream's state: its message count and last message.
struct Floor {
    appended: watch::Sender<(u64, Bytes)>,
    parked: AtomicUsize,
    requests: AtomicU64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4499".into());
    let listener = TcpListener::bind(&address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    println!("http://{}", listener.local_addr()?);
    let floor = Arc::new(Floor {
        appended: watch::channel((0, Bytes::new())).0,
        parked: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(u32::MAX);
    let builder = Arc::new(builder);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (floor, builder) = (Arc::clone(&floor), Arc::clone(&builder));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let floor = Arc::clone(&floor);
                async move { Ok::<_, Infallible>(answer(&floor, request).await) }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(floor: &Floor, request: Request<Incoming>) -> Response<Full<Bytes>> {
    floor.requests.fetch_add(1, Ordering::Relaxed);
    let (count, _) = floor.appended.borrow().clone();
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let parked = floor.parked.load(Ordering::Relaxed);
            respond(
                StatusCode::OK,
                format!("eddy_live_readers {parked}\n").into(),
            )
        }
        (&Method::PUT, _) => respond(StatusCode::CREATED, Bytes::new()),
        (&Method::HEAD, _) => {
            let mut response = respond(StatusCode::OK, Bytes::new());
            let tail = offset(count);
            if let Ok(value) = tail.parse() {
                response.headers_mut().insert("stream-next-offset", value);
            }
            response
        }
        (&Method::POST, _) => {
            let body = match request.into_body().collect().await {
                Ok(body) => body.to_bytes(),
                Err(_) => return respond(StatusCode::BAD_REQUEST, Bytes::new()),
            };
            floor.appended.send_modify(|(count, last)| {
                *count += 1;
                *last = body;
            });
            respond(StatusCode::NO_CONTENT, Bytes::new())
        }
        (&Method::GET, _) => long_poll(floor, count).await,
        _ => respond(StatusCode::METHOD_NOT_ALLOWED, Bytes::new()),
    }
}

/// Parks until the next append, then answers with its message and the
/// headers Eddy's long-poll answer carries.
async fn long_poll(floor: &Floor, seen: u64) -> Response<Full<Bytes>> {
    let mut appended = floor.appended.subscribe();
    floor.parked.fetch_add(1, Ordering::Relaxed);
    let changed = appended
        .wait_for(|(count, _)| *count > seen)
        .await
        .map(|state| state.clone());
    floor.parked.fetch_sub(1, Ordering::Relaxed);
    let Ok((count, body)) = changed else {
        return respond(StatusCode::SERVICE_UNAVAILABLE, Bytes::new());
    };
    let mut response = respond(StatusCode::OK, body);
    let (start, next) = (offset(count - 1), offset(count));
    let etag = format!("\"{start}:{next}\"");
    let cursor = floor.requests.load(Ordering::Relaxed) % 10_000_000;
    for (name, value) in [
        ("content-type", "text/plain".to_owned()),
        ("stream-next-offset", next),
        ("eddy-read-start", start),
        ("stream-up-to-date", "true".into()),
        ("cache-control", "public, max-age=20".into()),
        ("stream-cursor", cursor.to_string()),
        ("etag", etag),
        ("x-content-type-options", "nosniff".into()),
        ("cross-origin-resource-policy", "cross-origin".into()),
        ("access-control-allow-origin", "*".into()),
        ("access-control-expose-headers", EXPOSED.into()),
        (
            "x-request-id",
            "00000000-0000-4000-8000-000000000000".into(),
        ),
    ] {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// As long as the list `eddy serve` sends, so the answers weigh the same.
const EXPOSED: &str = "stream-next-offset, stream-up-to-date, stream-cursor, \
stream-closed, stream-ttl, stream-expires-at, producer-epoch, producer-seq, \
producer-expected-seq, producer-received-seq, stream-sse-data-encoding, etag, location, \
content-type, eddy-error, eddy-stream-bytes, eddy-read-start, eddy-duplicate, eddy-limit, \
retry-after, x-request-id";

/// An offset in Eddy's fixed-width text form.
fn offset(count: u64) -> String {
    format!("{:016}_{count:016}", 0)
}

fn respond(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}
