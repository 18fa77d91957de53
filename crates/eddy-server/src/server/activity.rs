//! Whether a connection is in use: the requests in progress on it (from
//! the request head to the last byte of the response, so a long-poll or an
//! SSE stream counts all along), and a timer that fires when it has had
//! none for too long, or when its client stopped taking the bytes of its
//! responses (a frame handed over and not taken, with no response of the
//! connection progressing, for the write timeout). It also holds the
//! connection's budget of unread response bytes ([`UnreadBudget`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::Service;

use crate::{probes, App};

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
    /// Its requests came over HTTP/2 (known from its first request).
    http2: AtomicBool,
    /// When the last request ended, in milliseconds since `opened`.
    last_end_ms: AtomicU64,
    /// Responses whose last frame was handed to the connection and not
    /// yet taken (the body was not asked for its next frame since).
    outstanding: AtomicUsize,
    /// Frames its clients took so far: the timer compares it between two
    /// looks, so a response's progress costs no clock read.
    taken: AtomicU64,
    /// The connection's budget of unread response bytes.
    unread: UnreadBudget,
}

/// The timeouts a connection's timer enforces (see [`Activity::expired`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// No request in progress for this long.
    pub idle: Duration,
    /// HTTP/1: the next request's head not whole this long after the
    /// last response.
    pub next_head: Duration,
    /// A response's bytes not taken for this long.
    pub write: Duration,
}

/// Why a connection's timer fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No request in progress for the idle timeout.
    Unused,
    /// Its client took no byte of its responses for the write timeout.
    Stalled,
}

impl Activity {
    /// The activity of a connection accepted at `opened`, which may hold
    /// `max_unread` bytes of read responses.
    pub(crate) fn new(opened: Instant, max_unread: usize) -> Self {
        Activity {
            opened,
            busy: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            last_end_ms: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            taken: AtomicU64::new(0),
            unread: UnreadBudget::new(max_unread),
        }
    }

    fn begin(self: &Arc<Self>, version: hyper::Version) -> Busy {
        if self.started.fetch_add(1, Ordering::AcqRel) == 0 && version == hyper::Version::HTTP_2 {
            self.http2.store(true, Ordering::Release);
        }
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    fn since_opened_ms(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Resolves when the connection has had no request in progress for
    /// `idle` since its last one ended (on HTTP/1, for `next_head` if that
    /// is shorter: the next request's head must have come by then, so a
    /// head sent slowly or stopped halfway is cut) or, before its first
    /// request, at `first_request_by` (a client that connects and sends
    /// nothing, or only part of a head, a TLS handshake or an HTTP/2
    /// preface); or when a response had a frame its client did not take,
    /// and no response progressed, for `write_timeout`. This one timer
    /// does what hyper's header-read timeout would, without arming a timer
    /// for every request.
    pub(crate) async fn expired(&self, first_request_by: Instant, timeouts: Timeouts) -> Expired {
        let Timeouts {
            idle,
            next_head,
            write: write_timeout,
        } = timeouts;
        // Frames taken at the last look, if a frame was out then.
        let mut out_at_last_look: Option<u64> = None;
        loop {
            let now = Instant::now();
            if self.started.load(Ordering::Acquire) == 0 {
                if first_request_by <= now {
                    return Expired::Unused;
                }
                // A first request may start, and stall, meanwhile.
                tokio::time::sleep_until(first_request_by.min(now + write_timeout)).await;
                continue;
            }
            let deadline = if self.busy.load(Ordering::Acquire) > 0 {
                // A frame out now and at the last look, a write timeout
                // ago, with none taken since: the client takes nothing.
                let taken = self.taken.load(Ordering::Acquire);
                if self.outstanding.load(Ordering::Acquire) > 0 {
                    if out_at_last_look == Some(taken) {
                        return Expired::Stalled;
                    }
                    out_at_last_look = Some(taken);
                } else {
                    out_at_last_look = None;
                }
                // In use: look again every write timeout, so a stall is
                // noticed within two.
                now + idle.min(write_timeout)
            } else {
                out_at_last_look = None;
                let last_end = self.last_end_ms.load(Ordering::Acquire);
                let wait = if self.http2.load(Ordering::Acquire) {
                    idle
                } else {
                    idle.min(next_head)
                };
                let unused = self.opened + Duration::from_millis(last_end) + wait;
                if unused <= now {
                    return Expired::Unused;
                }
                unused
            };
            tokio::time::sleep_until(deadline).await;
        }
    }

    /// The connection is closed: its requests still running (HTTP/2
    /// streams run on tasks of their own) make no more reads.
    pub(crate) fn closed(&self) {
        self.unread.close();
    }
}

/// A connection's budget of unread response bytes: a read takes its share
/// before it reads, and its response body gives it back once sent (or
/// dropped). Requests find it in their extensions; a request served
/// without a connection (a test's `oneshot`) has none and is not bounded.
#[derive(Clone)]
pub(crate) struct UnreadBudget {
    bytes: Arc<Semaphore>,
    max: usize,
}

impl UnreadBudget {
    fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        UnreadBudget {
            bytes: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Takes `bytes` of the budget (at most all of it), waiting while
    /// earlier responses hold it; `None` once the connection is closed
    /// (its requests that still run make no more reads).
    pub(crate) async fn take(&self, bytes: usize) -> Option<UnreadBytes> {
        let bytes = u32::try_from(bytes.clamp(1, self.max)).unwrap_or(u32::MAX);
        let permit = Arc::clone(&self.bytes)
            .acquire_many_owned(bytes)
            .await
            .ok()?;
        Some(UnreadBytes(permit))
    }

    /// The connection is closed: no more of the budget is handed out.
    fn close(&self) {
        self.bytes.close();
    }
}

/// A share of a connection's [`UnreadBudget`], taken before a read.
pub(crate) struct UnreadBytes(OwnedSemaphorePermit);

impl UnreadBytes {
    /// Keeps `bytes` (what the response really holds) for `response`,
    /// giving back the rest; its body gives them back once sent.
    pub(crate) fn hold<B>(mut self, bytes: usize, response: &mut hyper::Response<B>) {
        let keep = bytes.max(1);
        if keep < self.0.num_permits() {
            drop(self.0.split(self.0.num_permits() - keep));
        }
        response.extensions_mut().insert(HeldBytes {
            _share: Arc::new(self),
        });
    }
}

/// The unread bytes a response holds, in its extensions until the
/// connection's tracked body takes them over.
#[derive(Clone)]
pub(crate) struct HeldBytes {
    _share: Arc<UnreadBytes>,
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

    fn call(&mut self, mut request: hyper::Request<Incoming>) -> TrackedFuture {
        let busy = self.activity.begin(request.version());
        if probes::is_liveness(&request) {
            // Answered here, as `App` would: without the boxed future of
            // the application and the read budget's extension, which cost
            // a twentieth of the probe.
            return TrackedFuture {
                response: Answer::Ready(Some(probes::alive())),
                busy: Some(busy),
            };
        }
        // Only reads take from the budget: other requests are spared the
        // extension.
        if request.method() == hyper::Method::GET {
            request
                .extensions_mut()
                .insert(self.activity.unread.clone());
        }
        TrackedFuture {
            response: Answer::App(self.app.call(request)),
            busy: Some(busy),
        }
    }
}

/// The application's answer, whose body keeps the request counted.
pub(crate) struct TrackedFuture {
    response: Answer,
    busy: Option<Busy>,
}

/// Where a request's response comes from.
enum Answer {
    /// Known when the request came (taken when polled).
    Ready(Option<axum::response::Response>),
    /// The application's.
    App(<App as Service<hyper::Request<Incoming>>>::Future),
}

impl Future for TrackedFuture {
    type Output = Result<hyper::Response<TrackedBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = match &mut self.response {
            Answer::Ready(ready) => ready.take(),
            Answer::App(served) => match served.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => Some(response),
                Poll::Ready(Err(never)) => match never {},
                Poll::Pending => return Poll::Pending,
            },
        };
        // Polled again after it answered: hyper never does.
        let Some(mut response) = response else {
            return Poll::Pending;
        };
        let busy = self.busy.take();
        let held = response.extensions_mut().remove::<HeldBytes>();
        Poll::Ready(Ok(response.map(|body| TrackedBody {
            body,
            _busy: busy,
            _held: held,
            handed: false,
        })))
    }
}

/// A response body that counts its request as in progress until it is
/// sent (or dropped), and notes whether its client takes its frames.
pub(crate) struct TrackedBody {
    body: Body,
    _busy: Option<Busy>,
    /// The connection's unread bytes it holds until it is sent.
    _held: Option<HeldBytes>,
    /// A frame was handed over and the body not asked again since.
    handed: bool,
}

impl TrackedBody {
    fn activity(&self) -> Option<&Activity> {
        self._busy.as_ref().map(|busy| &*busy.0)
    }

    /// Notes that the frame handed before is taken (or never will be).
    fn taken(&mut self) {
        if std::mem::take(&mut self.handed) {
            if let Some(activity) = self.activity() {
                activity.taken.fetch_add(1, Ordering::AcqRel);
                activity.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.taken();
    }
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        // Asked again: the connection took the frame handed before.
        self.taken();
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            if let Some(activity) = self.activity() {
                activity.outstanding.fetch_add(1, Ordering::AcqRel);
            }
            self.handed = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
