//! Whether a connection is in use: the requests in progress on it (from
//! the request head to the last byte of the response, so a long-poll or an
//! SSE stream counts all along), and a timer that fires when it has had
//! none for too long.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::Service;

use crate::App;

/// The requests in progress on one connection.
#[derive(Default)]
pub(crate) struct Activity {
    /// Requests in progress now.
    busy: AtomicUsize,
    /// Requests started so far.
    started: AtomicU64,
    /// Signalled when the last request in progress ends.
    idle: Notify,
}

impl Activity {
    fn begin(self: &Arc<Self>) -> Busy {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Resolves when the connection has had no request in progress for
    /// `idle` since its last one ended or, before its first request, at
    /// `opening` (a client that connects and sends nothing, or only a
    /// TLS handshake or an HTTP/2 preface).
    pub(crate) async fn expired(&self, opening: Instant, idle: Duration) {
        loop {
            if self.busy.load(Ordering::Acquire) > 0 {
                // The end of the last request stores a permit if it comes
                // before this wait begins: it is not missed.
                self.idle.notified().await;
                continue;
            }
            let started = self.started.load(Ordering::Acquire);
            let deadline = if started == 0 {
                opening
            } else {
                Instant::now() + idle
            };
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    let unused = self.started.load(Ordering::Acquire) == started
                        && self.busy.load(Ordering::Acquire) == 0;
                    if unused {
                        return;
                    }
                }
                // A request began and ended meanwhile: idle from now.
                () = self.idle.notified() => {}
            }
        }
    }
}

/// One request in progress; dropped with its response body.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_one();
        }
    }
}

/// The application, counting the requests of one connection in its
/// [`Activity`].
#[derive(Clone)]
pub(crate) struct Tracked {
    app: App,
    activity: Arc<Activity>,
}

impl Tracked {
    pub(crate) fn new(app: App, activity: Arc<Activity>) -> Self {
        Tracked { app, activity }
    }
}

impl Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<TrackedBody>;
    type Error = Infallible;
    type Future = TrackedFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<Incoming>) -> TrackedFuture {
        let busy = self.activity.begin();
        TrackedFuture {
            response: self.app.call(request),
            busy: Some(busy),
        }
    }
}

/// The application's answer, whose body keeps the request counted.
pub(crate) struct TrackedFuture {
    response: <App as Service<hyper::Request<Incoming>>>::Future,
    busy: Option<Busy>,
}

impl Future for TrackedFuture {
    type Output = Result<hyper::Response<TrackedBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = match self.response.as_mut().poll(cx) {
            Poll::Ready(Ok(response)) => response,
            Poll::Ready(Err(never)) => match never {},
            Poll::Pending => return Poll::Pending,
        };
        let busy = self.busy.take();
        Poll::Ready(Ok(response.map(|body| TrackedBody { body, _busy: busy })))
    }
}

/// A response body that counts its request as in progress until it is
/// sent (or dropped).
pub(crate) struct TrackedBody {
    body: Body,
    _busy: Option<Busy>,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
