//! The listening server: an accept loop with a cap on open connections,
//! HTTP/1.1 and HTTP/2 on every connection, optional TLS, handshake,
//! request-header and idle timeouts, and a graceful shutdown.
//!
//! At the cap, the server accepts no more connections until one closes:
//! new clients wait in the kernel's listen backlog (and, past it, their
//! connection attempts are retried by their TCP stack). Waiting costs the
//! server nothing (no descriptor, no task), where accepting only to refuse
//! would spend a descriptor and a write on every attempt of a flood, and
//! the timeouts free the slots of clients that hold connections unused.

mod activity;
mod connection;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use eddy_streams::Storage;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::{app, AppState, ServerConfig};
pub(crate) use activity::{UnreadBudget, UnreadBytes};
use connection::Connections;
pub use tls::{TlsCertificates, TlsError};

/// A bound server, ready to run.
///
/// Every connection speaks HTTP/1.1 or HTTP/2: cleartext HTTP/2 needs
/// prior knowledge (`curl --http2-prior-knowledge`); with
/// [`tls`](Self::tls), clients choose by ALPN.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    shutdown: watch::Sender<bool>,
    config: ServerConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) to serve `store`.
    pub async fn bind(
        addr: SocketAddr,
        store: Arc<dyn Storage>,
        config: ServerConfig,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let (shutdown, stopping) = watch::channel(false);
        Ok(Server {
            listener,
            state: AppState::new(store, config.clone(), stopping),
            shutdown,
            config,
            tls: None,
        })
    }

    /// Serves TLS only, with `certificates` (ALPN `h2` and `http/1.1`). A
    /// plain HTTP request on this port gets a 400 that says to use
    /// `https://`.
    pub fn tls(mut self, certificates: &Arc<TlsCertificates>) -> Result<Server, TlsError> {
        self.tls = Some(certificates.server_config()?);
        Ok(self)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// The shared state (for metrics).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `signal` resolves, then stops accepting, ends live
    /// reads, and waits (up to the configured grace period) for in-flight
    /// requests to finish. Connections still open when the grace period
    /// is over are dropped, so this returns within the grace period even
    /// when a request is stuck.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> std::io::Result<()> {
        let Server {
            listener,
            state,
            shutdown,
            config,
            tls,
        } = self;
        crate::subscriptions::start(&state);
        let serving = Arc::new(Connections::new(
            &config,
            app(state.clone()),
            tls,
            Arc::clone(state.metrics()),
        ));
        let slots = Arc::new(Semaphore::new(
            config.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        ));
        let mut connections = JoinSet::new();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                // Reap finished connections as they end.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = accept(&listener, &slots) => {
                    let Some((stream, slot)) = accepted else {
                        // Out of file descriptors and the like: back off briefly.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let serve = Arc::clone(&serving).serve(stream, shutdown.subscribe());
                    connections.spawn(async move {
                        serve.await;
                        drop(slot);
                    });
                }
                () = &mut signal => break,
            }
        }
        drop(listener);
        shutdown.send_replace(true);
        let drained = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(config.shutdown_grace, drained)
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = connections.len(),
                "shutdown grace period over; dropping the remaining connections"
            );
        }
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        Ok(())
    }

    /// Runs the server on a background task; the returned handle stops it.
    pub fn spawn(self) -> RunningServer {
        let addr = self.local_addr();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until(async move {
            let _ = stopped.await;
        }));
        RunningServer {
            addr,
            scheme,
            stop,
            task,
        }
    }
}

/// Waits for a free connection slot, then accepts a connection; `None`
/// when the accept failed.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    if slots.available_permits() == 0 {
        tracing::warn!(
            "the server holds --max-connections connections; new ones wait until one closes"
        );
    }
    let slot = Arc::clone(slots).acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, slot)),
        Err(err) => {
            tracing::warn!(error = %err, "accept failed");
            None
        }
    }
}

/// A server running on a background task.
pub struct RunningServer {
    addr: SocketAddr,
    scheme: &'static str,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Stops it gracefully and waits until it has stopped.
    pub async fn stop(self) -> std::io::Result<()> {
        let _ = self.stop.send(());
        self.task
            .await
            .map_err(|e| std::io::Error::other(format!("server task failed: {e}")))?
    }
}
