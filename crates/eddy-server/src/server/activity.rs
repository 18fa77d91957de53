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
use tokio::time::Instant;
use tower::Service;

use crate::App;

/// The requests in progress on one connection. A request only counts
/// itself in and out (and notes when it ended): the connection's timer
/// looks at these when it fires, so no request wakes a task or re-arms a
/// timer.
pub(crate) struct Activity {
    /// When the connection was accepted; times below count from it.
    opened: Instant,
    /// Requests in progress now.
    busy: AtomicUsize,
    /// Requests started so far.
    started: AtomicU64,
    /// When the last request ended, in milliseconds since `opened`.
    last_end_ms: AtomicU64,
}

impl Activity {
    /// The activity of a connection accepted at `opened`.
    pub(crate) fn new(opened: Instant) -> Self {
        Activity {
            opened,
            busy: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last_end_ms: AtomicU64::new(0),
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    fn since_opened_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Resolves when the connection has had no request in progress for
    /// `idle` since its last one ended or, before its first request, at
    /// `first_request_by` (a client that connects and sends nothing, or
    /// only a TLS handshake or an HTTP/2 preface).
    pub(crate) async fn expired(&self, first_request_by: Instant, idle: Duration) {
        tokio::time::sleep_until(first_request_by).await;
        if self.started.load(Ordering::Acquire) == 0 {
            return;
        }
        loop {
            let deadline = if self.busy.load(Ordering::Acquire) > 0 {
                // In use: look again an idle period from now.
                Instant::now() + idle
            } else {
                let last_end = self.last_end_ms.load(Ordering::Acquire);
                self.opened + Duration::from_millis(last_end) + idle
            };
            if deadline <= Instant::now() {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One request in progress; dropped with its response body.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        // The end is noted before the request stops counting, so a timer
        // that sees the connection unused also sees when it became so.
        let now = self.0.since_opened_ms();
        self.0.last_end_ms.fetch_max(now, Ordering::AcqRel);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
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
