//! What the test modules share: a server on a memory store, and the
//! series of its `/metrics` page.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use eddy_server::{RunningServer, Server, ServerConfig};
use eddy_streams::MemoryStorage;

/// A server with `config` on a fresh memory store, at a free local port.
pub(crate) async fn start(config: ServerConfig) -> RunningServer {
    Server::bind(
        ([127, 0, 0, 1], 0).into(),
        Arc::new(MemoryStorage::new()),
        config,
    )
    .await
    .expect("bind")
    .spawn()
}

/// The server's `/metrics` page.
pub(crate) async fn metrics_page(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body")
}

/// The value of the unlabelled series `name` on a `/metrics` page.
pub(crate) fn series<T: FromStr>(page: &str, name: &str) -> Option<T> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the unlabelled series `name` on the server's page has a
/// value that `reached` accepts: the server's own account that it reached
/// a state.
pub(crate) async fn until_series(base: &str, name: &str, reached: impl Fn(f64) -> bool) {
    let http = reqwest::Client::new();
    for _ in 0..2000 {
        let page = metrics_page(&http, base).await;
        if series(&page, name).is_some_and(&reached) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the server's {name} never reached the value waited for");
}
