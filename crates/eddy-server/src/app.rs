//! The whole HTTP application as one tower service: the middleware every
//! request passes through (request id and span, auth and the security and
//! CORS headers, caching defaults, compression), around the endpoints.
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
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::Response;
use axum::{BoxError, Router};
use futures::future::Either;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use crate::state::AppState;
use crate::{cache, compression, handlers, observe, router};

/// The HTTP application over one [`AppState`]: a [`tower::Service`] for
/// requests with any body, which [`Server`](crate::Server) serves and
/// tests drive directly (`tower::ServiceExt::oneshot`).
///
/// Cloning it is cheap (one boxed service). To serve it inside another
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
pub struct App(BoxCloneSyncService<Request, Response, Infallible>);

/// The whole HTTP application over `state`.
pub fn app(state: AppState) -> App {
    let endpoints = Endpoints {
        router: router::operational(&state),
        state: state.clone(),
    };
    // Outermost first. axum's middleware (`from_fn`, `map_response`)
    // wants axum's own body, so the bodies that tower-http's layers wrap
    // theirs in are turned back into it.
    let stack = ServiceBuilder::new()
        .map_response(into_axum_body)
        .layer(observe::layers())
        .layer(from_fn_with_state(state.clone(), router::guard))
        .layer(map_response(cache::tag_encoding))
        .map_response(into_axum_body)
        .layer(compression::layer(&state.config.compression))
        .service(endpoints);
    App(BoxCloneSyncService::new(stack))
}

/// A response with its body, whatever wraps it, as axum's body.
fn into_axum_body<B>(response: axum::http::Response<B>) -> Response
where
    B: HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(Body::new)
}

impl<B> Service<axum::http::Request<B>> for App
where
    B: HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = <BoxCloneSyncService<Request, Response, Infallible> as Service<Request>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        self.0.call(request.map(Body::new))
    }
}

/// The endpoints under the middleware: the operational router for its
/// paths, the stream handler for every other.
#[derive(Clone)]
struct Endpoints {
    router: Router,
    state: AppState,
}

type StreamFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl Service<Request> for Endpoints {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<<Router as Service<Request>>::Future, StreamFuture>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready: an axum router is, and the handler is a
        // plain function.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if router::routes(request.uri().path()) {
            Either::Left(self.router.call(request))
        } else {
            let state = self.state.clone();
            Either::Right(Box::pin(async move {
                Ok(handlers::stream(State(state), request).await)
            }))
        }
    }
}
