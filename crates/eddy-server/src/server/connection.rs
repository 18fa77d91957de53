//! One accepted connection: TLS when configured, then HTTP/1.1 or HTTP/2
//! (cleartext with prior knowledge, or ALPN `h2` over TLS) with the
//! configured limits.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::tls::{self, Opening};
use crate::{App, Metrics, ServerConfig};

/// What every connection of one server shares.
pub(crate) struct Connections {
    builder: auto::Builder<TokioExecutor>,
    service: TowerToHyperService<App>,
    tls: Option<TlsAcceptor>,
    header_timeout: Duration,
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
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.http2.max_concurrent_streams)
            .initial_stream_window_size(config.http2.stream_window_bytes)
            .initial_connection_window_size(config.http2.connection_window_bytes);
        Connections {
            builder,
            service: TowerToHyperService::new(app),
            tls: tls.map(TlsAcceptor::from),
            header_timeout: config.header_timeout,
            metrics,
        }
    }

    /// Serves one connection until it ends or the server shuts down.
    pub(crate) async fn serve(self: Arc<Self>, stream: TcpStream, watcher: Watcher) {
        let _open = Open::count(&self.metrics);
        let Some(acceptor) = &self.tls else {
            return self.http(stream, watcher).await;
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
                    Ok(Ok(stream)) => self.http(stream, watcher).await,
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

    async fn http<I>(&self, io: I, watcher: Watcher)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let connection = self
            .builder
            .serve_connection(TokioIo::new(io), self.service.clone());
        if let Err(err) = watcher.watch(connection).await {
            tracing::debug!(error = %err, "connection ended with an error");
        }
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
