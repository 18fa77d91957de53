//! One accepted connection: TLS when configured, then HTTP/1.1 or HTTP/2
//! (cleartext with prior knowledge, or ALPN `h2` over TLS) with the
//! configured limits, closed when it stays unused too long.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::activity::{Activity, Expired, Timeouts, Tracked};
use super::tls::{self, Opening};
use crate::{App, Metrics, ServerConfig};

/// The most bytes an HTTP/2 stream buffers before its response body is
/// asked for its next frame.
const H2_SEND_BUFFER: usize = 64 * 1024;

/// What every connection of one server shares.
pub(crate) struct Connections {
    builder: auto::Builder<TokioExecutor>,
    app: App,
    tls: Option<TlsAcceptor>,
    header_timeout: Duration,
    idle_timeout: Duration,
    write_timeout: Duration,
    max_unread_bytes: usize,
    metrics: Arc<Metrics>,
}

impl Connections {
    pub(crate) fn new(
        config: &ServerConfig,
        app: App,
        tls: Option<Arc<rustls::ServerConfig>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The wait for each request head is bounded by the connection's
        // own timer (`Activity::expired`); hyper's would arm a timer for
        // every request.
        builder.http1().header_read_timeout(None);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.http2.max_concurrent_streams)
            // What a stream buffers beyond the response frame it was
            // handed: the frame itself is held under the connection's
            // unread budget until the body ends, which waits for the
            // buffer to drain below this.
            .max_send_buf_size(H2_SEND_BUFFER)
            .initial_stream_window_size(config.http2.stream_window_bytes)
            .initial_connection_window_size(config.http2.connection_window_bytes);
        Connections {
            builder,
            app,
            tls: tls.map(TlsAcceptor::from),
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            write_timeout: config.write_timeout,
            // One read's budget always fits.
            max_unread_bytes: config.max_unread_bytes.max(config.max_read_bytes),
            metrics,
        }
    }

    /// Serves one connection until it ends, stays unused too long, or the
    /// server shuts down (`stopping` turns `true`).
    pub(crate) async fn serve(self: Arc<Self>, stream: TcpStream, stopping: watch::Receiver<bool>) {
        let _open = Open::count(&self.metrics);
        // A client gets `header_timeout` from the accept to its first
        // request head: the TLS handshake, the HTTP/2 preface and the
        // head itself together.
        let opening = Instant::now() + self.header_timeout;
        let Some(acceptor) = &self.tls else {
            return self.http(stream, opening, stopping).await;
        };
        // The TLS handshake counts as part of the request head: a client
        // gets `header_timeout` for both.
        match tls::opening(&stream, self.header_timeout).await {
            Opening::Nothing => {}
            Opening::Plain => {
                Metrics::inc(&self.metrics.tls_failures);
                tls::refuse_plain_http(stream, self.header_timeout).await;
            }
            Opening::Tls => {
                match tokio::time::timeout(self.header_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => self.http(stream, opening, stopping).await,
                    Ok(Err(err)) => {
                        Metrics::inc(&self.metrics.tls_failures);
                        tracing::debug!(error = %err, "TLS handshake failed");
                    }
                    Err(_) => {
                        Metrics::inc(&self.metrics.tls_failures);
                        tracing::debug!("TLS handshake timed out");
                    }
                }
            }
        }
    }

    async fn http<I>(&self, io: I, opening: Instant, mut stopping: watch::Receiver<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new(Instant::now(), self.max_unread_bytes));
        let service =
            TowerToHyperService::new(Tracked::new(self.app.clone(), Arc::clone(&activity)));
        let connection = self.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        let _closed = Closed(&activity);
        // The timer and the shutdown signal are watched by a task of their
        // own: in the `select!` below they would be polled again at every
        // wake of the connection, a few times per request.
        let (stop, stopped) = oneshot::channel();
        let watcher = tokio::spawn({
            let activity = Arc::clone(&activity);
            let timeouts = Timeouts {
                idle: self.idle_timeout,
                next_head: self.header_timeout,
                write: self.write_timeout,
            };
            async move {
                let why = tokio::select! {
                    expired = activity.expired(opening, timeouts) => Some(expired),
                    _ = stopping.wait_for(|stopping| *stopping) => None,
                };
                let _ = stop.send(why);
            }
        });
        let _watcher = AbortOnDrop(watcher);
        let unused = tokio::select! {
            ended = connection.as_mut() => return log_end(ended),
            why = stopped => match why {
                Ok(Some(Expired::Unused)) => true,
                Ok(Some(Expired::Stalled)) => {
                    // Its client takes nothing: waiting for its responses
                    // to finish would hold them (and their live-reader
                    // slots) for good. Dropped at once.
                    Metrics::inc(&self.metrics.connections_stalled_closed);
                    tracing::debug!("a connection whose client took no response bytes for the write timeout was closed");
                    return;
                }
                // Shutting down.
                Ok(None) | Err(_) => false,
            },
        };
        // No request is in progress when the connection is unused; on a
        // shutdown, those in progress finish (the server bounds the wait).
        connection.as_mut().graceful_shutdown();
        if unused {
            Metrics::inc(&self.metrics.connections_idle_closed);
            match tokio::time::timeout(self.header_timeout, connection).await {
                Ok(ended) => log_end(ended),
                Err(_) => tracing::debug!("an unused connection did not close in time; dropped"),
            }
        } else {
            log_end(connection.await);
        }
    }
}

fn log_end(ended: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(err) = ended {
        tracing::debug!(error = %err, "connection ended with an error");
    }
}

/// Stops a connection's watcher task when the connection ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tells a connection's activity that it ended, however `http` returns.
struct Closed<'a>(&'a Activity);

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.closed();
    }
}

/// Counts a connection in `eddy_connections_total` and, while it is open,
/// in `eddy_connections_open`.
struct Open(Arc<Metrics>);

impl Open {
    fn count(metrics: &Arc<Metrics>) -> Self {
        Metrics::inc(&metrics.connections);
        metrics.connections_open.increment(1);
        Open(Arc::clone(metrics))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.connections_open.decrement(1);
    }
}
