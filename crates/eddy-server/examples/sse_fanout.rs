//! Live fan-out of one append to many SSE readers over a few HTTP/2
//! connections (cleartext, prior knowledge), against any Durable Streams
//! server that speaks h2c.
//!
//! Opens `connections` HTTP/2 connections (one reqwest client each) and
//! spreads `readers` SSE reads of one stream over them, all starting at its
//! tail. Once every reader has received the server's first control event
//! (it is caught up), each round appends one message and takes for each
//! reader the time from just before the append is sent until the event
//! carrying that message arrives. Prints
//! `p50_ms p99_ms max_ms served_within_100ms_percent samples`.
//!
//! ```sh
//! cargo run --release -p eddy-server --example sse_fanout -- http://127.0.0.1:4437 1000 10 3
//! ```

mod support;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use reqwest::Version;
use tokio::sync::{mpsc, watch};

/// How long a round may take before the benchmark gives up.
const ROUND_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:4437".into());
    let readers: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(1_000);
    let connections: usize = args.next().map(|c| c.parse()).transpose()?.unwrap_or(10);
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(3);
    ensure!(connections > 0, "at least one connection");

    // reqwest keeps one HTTP/2 connection per client and host.
    let clients = (0..connections)
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .tcp_nodelay(true)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let url = format!("{base}{}", support::fresh_path("sse-fanout")?);
    let created = clients[0]
        .put(&url)
        .header("content-type", "text/plain")
        .send()
        .await?
        .error_for_status()?;
    ensure!(
        created.version() == Version::HTTP_2,
        "the server answered {:?}, not HTTP/2",
        created.version()
    );
    let tail = created
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .context("PUT has no Stream-Next-Offset")?
        .to_owned();

    // Each reader reports (round, arrival) for every round's message.
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel::<(usize, Instant)>();
    let (ready_tx, mut ready) = mpsc::channel::<()>(readers.max(1));
    let (failed_tx, mut failed) = watch::channel(None::<String>);
    for i in 0..readers {
        let client = clients[i % connections].clone();
        let url = format!("{url}?offset={tail}&live=sse");
        let (arrived_tx, ready_tx, failed_tx) =
            (arrived_tx.clone(), ready_tx.clone(), failed_tx.clone());
        tokio::spawn(async move {
            if let Err(err) = read_events(client, url, rounds, ready_tx, arrived_tx).await {
                let _ = failed_tx.send(Some(format!("reader {i}: {err:#}")));
            }
        });
    }
    drop((arrived_tx, ready_tx, failed_tx));

    for _ in 0..readers {
        tokio::select! {
            up = ready.recv() => up.context("a reader stopped before it was caught up")?,
            Ok(()) = failed.changed() => bail!("{}", failed.borrow().clone().unwrap_or_default()),
        }
    }

    let mut samples = Vec::with_capacity(readers * rounds);
    for round in 0..rounds {
        let sent = Instant::now();
        clients[0]
            .post(&url)
            .header("content-type", "text/plain")
            .body(marker(round))
            .send()
            .await?
            .error_for_status()?;
        let deadline = tokio::time::sleep(ROUND_DEADLINE);
        tokio::pin!(deadline);
        for served in 0..readers {
            tokio::select! {
                got = arrived.recv() => {
                    let (r, at) = got.context("the readers stopped")?;
                    ensure!(r == round, "round {r}'s message arrived during round {round}");
                    samples.push(at.saturating_duration_since(sent));
                }
                Ok(()) = failed.changed() => bail!("{}", failed.borrow().clone().unwrap_or_default()),
                _ = &mut deadline => bail!("round {round}: only {served} of {readers} readers served"),
            }
        }
    }

    support::print_summary(samples);
    Ok(())
}

/// The body appended in `round`; unique, so a reader finds it in its events.
fn marker(round: usize) -> String {
    format!("sse-fanout-round-{round};")
}

/// Reads one SSE response: signals `ready` at the first control event, then
/// reports each round's message as its event arrives, in order.
async fn read_events(
    client: reqwest::Client,
    url: String,
    rounds: usize,
    ready: mpsc::Sender<()>,
    arrived: mpsc::UnboundedSender<(usize, Instant)>,
) -> anyhow::Result<()> {
    let mut response = client.get(&url).send().await?.error_for_status()?;
    ensure!(response.version() == Version::HTTP_2, "not HTTP/2");
    let mut seen = String::new();
    let mut caught_up = false;
    let mut round = 0;
    while round < rounds {
        let Some(chunk) = response.chunk().await? else {
            bail!("the event stream ended in round {round}");
        };
        let now = Instant::now();
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if !caught_up && seen.contains("event: control") {
            caught_up = true;
            ready.send(()).await?;
        }
        while round < rounds {
            let Some(at) = seen.find(&marker(round)) else {
                break;
            };
            seen.drain(..at + marker(round).len());
            arrived.send((round, now))?;
            round += 1;
        }
    }
    Ok(())
}
