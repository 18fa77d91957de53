//! The floor of one request on this machine: a bare hyper server (the same
//! hyper-util connection builder and runtime as `eddy serve`, HTTP/1.1 and
//! cleartext HTTP/2) that reads each request's body and answers a fixed
//! one, with no router, middleware, logging or store.
//!
//! A `GET` is answered `200` with `ok` (as `/healthz` is); any other
//! request `204` with a `Stream-Next-Offset` of the length Eddy's
//! append answer carries. Whatever `eddy serve` costs beyond it is
//! Eddy's; `scripts/bench/instructions.sh` and `scripts/bench/server.sh
//! pinned` measure both.
//!
//! ```sh
//! taskset -c 0 cargo run --release -p eddy-server --example request_floor -- 127.0.0.1:4498
//! ```

use std::convert::Infallible;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

/// An offset as long as the ones Eddy hands out.
const NEXT_OFFSET: &str = "0000000000000001_0000000000000000_0000000000000000";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4498".into());
    let listener = TcpListener::bind(&address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    println!("http://{}", listener.local_addr()?);
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let builder = Arc::clone(&builder);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request| async move {
                Ok::<_, Infallible>(answer(request).await)
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let get = request.method() == Method::GET;
    // Read the body, as a server that stores it must.
    let _ = request.into_body().collect().await;
    let mut response = Response::new(Full::new(if get {
        Bytes::from_static(b"ok")
    } else {
        Bytes::new()
    }));
    if !get {
        *response.status_mut() = StatusCode::NO_CONTENT;
        response
            .headers_mut()
            .insert("stream-next-offset", HeaderValue::from_static(NEXT_OFFSET));
    }
    response
}
