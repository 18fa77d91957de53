//! The whole HTTP application as one tower service: the middleware every
//! request passes through (`middleware.rs`), around the endpoints.
//!
//! The middleware wraps the application once, not each route: axum's
//! `Router::layer` wraps every route's boxed handler in a boxed copy of the
//! whole stack, and the boxes, clones and moves of large futures that
//! come with it cost about an eighth of a `/healthz` request. And stream
//! paths do not go through the router at all: only the operational
//! endpoints' few paths do, so a stream request pays no route match and no
//! path-parameter bookkeeping.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::response::Response;
use axum::{BoxError, Router};
use futures::future::Either;
use futures::FutureExt;
use tower::{Layer, Service};
use tower_http::compression::Compression;

use crate::compression::Compressible;
use crate::state::AppState;
use crate::{compression, handlers, middleware, probes, router};

/// The HTTP application over one [`AppState`]: a [`tower::Service`] for
/// requests with any body, which [`Server`](crate::Server) serves and
/// tests drive directly (`tower::ServiceExt::oneshot`).
///
/// Cloning it is cheap (one shared pointer). To serve it inside another
/// axum application, mount it as a fallback or under a prefix:
///
/// ```
/// # use std::sync::Arc;
/// # use eddy_server::{app, AppState, ServerConfig};
/// # use eddy_streams::MemoryStorage;
/// let (_stop, stopping) = tokio::sync::watch::channel(false);
/// let state = AppState::new(Arc::new(MemoryStorage::new()), ServerConfig::default(), stopping);
/// let router: axum::Router = axum::Router::new()
///     .route("/hello", axum::routing::get(|| async { "hi" }))
///     .fallback_service(app(state));
/// ```
#[derive(Clone)]
pub struct App(Arc<Parts>);

/// What the application is made of.
pub(crate) struct Parts {
    /// The server's state.
    pub state: AppState,
    /// The endpoints.
    pub endpoints: Endpoints,
    /// The endpoints behind tower-http's compression, for requests that
    /// accept a coding.
    pub compressed: Compression<Endpoints, Compressible>,
}

/// The whole HTTP application over `state`.
pub fn app(state: AppState) -> App {
    let endpoints = Endpoints {
        router: router::operational(&state),
        state: state.clone(),
    };
    let compressed = compression::layer(&state.config.compression).layer(endpoints.clone());
    App(Arc::new(Parts {
        state,
        endpoints,
        compressed,
    }))
}

type Served = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<axum::http::Request<B>> for App
where
    B: HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Served;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        if probes::is_liveness(&request) {
            // Probed many times a second by every load balancer: answered
            // before the middleware, as cheaply as the bare HTTP stack.
            return Box::pin(std::future::ready(Ok(probes::alive())));
        }
        let parts = Arc::clone(&self.0);
        let request = request.map(Body::new);
        Box::pin(async move { Ok(middleware::serve(&parts, request).await) })
    }
}

/// The endpoints under the middleware: the operational router for its
/// paths, the stream handler for every other.
#[derive(Clone)]
pub(crate) struct Endpoints {
    router: Router,
    state: AppState,
}

impl Endpoints {
    /// Answers `request`. A plain function choosing its branch's future,
    /// not an `async fn`: that would keep the request in its own state
    /// beside the copy the branch holds, and every request's future
    /// (copied whole into its box) would be that much larger.
    pub(crate) fn serve(&self, request: Request) -> impl Future<Output = Response> + Send {
        if router::routes(request.uri().path()) {
            let answer = self.router.clone().call(request);
            Either::Left(answer.map(|answered| match answered {
                Ok(response) => response,
                Err(never) => match never {},
            }))
        } else {
            Either::Right(handlers::stream(State(self.state.clone()), request))
        }
    }
}

type EndpointFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The endpoints as a service, for the compression service around them.
impl Service<Request> for Endpoints {
    type Response = Response;
    type Error = Infallible;
    type Future = EndpointFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Always ready: an axum router is, and the handler is a function.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        Box::pin(self.serve(request).map(Ok))
    }
}
