//! `eddy serve`: the process around the server (logging, signals, the
//! sweeper) over the store and configuration its options describe
//! ([`args`]).

use std::sync::Arc;

use anyhow::Context;
use eddy_server::{Server, TlsCertificates};

use crate::logging;

mod args;

pub use args::{parse_duration, ServeArgs, StorageKind};

/// Runs `eddy serve` until SIGINT or SIGTERM, then shuts down gracefully:
/// stops accepting, ends live reads, lets in-flight requests finish, and
/// closes the store.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    logging::init(args.log.log_format);
    let mut config = args.config()?;
    let stop = shutdown_signal()?;
    let (store, table) = args.open_store_with_table().await?;
    config.checkpoint_table = table;
    let sweeper = (!args.sweep_interval.is_zero())
        .then(|| crate::sweeper::spawn(Arc::clone(&store), args.sweep_interval));
    let mut server = Server::bind(args.listen, Arc::clone(&store), config).await?;
    // The store's own metrics (commit groups, writer queue) go to the
    // `metrics` facade: show them on this server's page.
    if server.state().metrics().install_global().is_err() {
        tracing::warn!("another metrics recorder is installed: /metrics leaves out the store's");
    }
    let mut scheme = "http";
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let certificates = TlsCertificates::from_pem_files(cert, key)?;
        reload_on_sighup(Arc::clone(&certificates))?;
        server = server.tls(&certificates)?;
        scheme = "https";
    }
    tracing::info!(address = %server.local_addr(), storage = ?args.storage, scheme, "eddy serve is listening");
    let address = format!("{scheme}://{}", server.local_addr());
    if args.no_console {
        println!("listening on {address}");
    } else {
        println!("listening on {address} (console: {address}/console)");
    }
    server.run_until(stop).await?;
    if let Some(sweeper) = sweeper {
        // Awaited, so that its handle on the store is gone before the store.
        sweeper.abort();
        let _ = sweeper.await;
    }
    drop(store);
    tracing::info!("eddy serve stopped");
    Ok(())
}

/// Installs the SIGINT and SIGTERM handlers now (before the server says it
/// is listening, so an early signal is not fatal) and returns a future that
/// resolves on the first of them.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
        tracing::info!("shutting down: finishing in-flight requests");
    })
}

/// Reads the TLS certificate and key again on every SIGHUP.
#[cfg(unix)]
fn reload_on_sighup(certificates: Arc<TlsCertificates>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            match certificates.reload() {
                Ok(()) => tracing::info!("TLS certificate and key reloaded"),
                Err(err) => {
                    tracing::error!(error = %err, "TLS reload failed; the current certificate stays");
                }
            }
        }
    });
    Ok(())
}

/// Without SIGHUP, certificates are read once.
#[cfg(not(unix))]
fn reload_on_sighup(_certificates: Arc<TlsCertificates>) -> anyhow::Result<()> {
    Ok(())
}

/// Ctrl-C stops the server.
#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
    })
}
