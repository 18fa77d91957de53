//! The listening server: an accept loop with request-header timeouts and a
//! graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use eddy_streams::Storage;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::{app, AppState, ServerConfig};

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    shutdown: watch::Sender<bool>,
    config: ServerConfig,
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
        })
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
        } = self;
        let service = TowerToHyperService::new(app(state));
        let graceful = GracefulShutdown::new();
        let mut connections = JoinSet::new();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                // Reap finished connections as they end.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(err) => {
                            // Out of file descriptors and the like: back off briefly.
                            tracing::warn!(error = %err, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let connection = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(config.header_timeout)
                        .serve_connection(TokioIo::new(stream), service.clone());
                    let connection = graceful.watch(connection);
                    connections.spawn(async move {
                        if let Err(err) = connection.await {
                            tracing::debug!(error = %err, "connection ended with an error");
                        }
                    });
                }
                () = &mut signal => break,
            }
        }
        drop(listener);
        shutdown.send_replace(true);
        if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
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
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until(async move {
            let _ = stopped.await;
        }));
        RunningServer { addr, stop, task }
    }
}

/// A server running on a background task.
pub struct RunningServer {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it gracefully and waits until it has stopped.
    pub async fn stop(self) -> std::io::Result<()> {
        let _ = self.stop.send(());
        self.task
            .await
            .map_err(|e| std::io::Error::other(format!("server task failed: {e}")))?
    }
}
