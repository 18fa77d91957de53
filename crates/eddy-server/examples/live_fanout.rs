//! Fan-out of one append to many long-poll readers, against any Durable
//! Streams server that reports `eddy_live_readers` at `/metrics`.
//!
//! Each round parks `readers` long-polls at the tail of one stream, waits
//! until the server counts them all as live, appends one message, and
//! takes for each reader the time from just before the append is sent
//! until its answer arrives. Prints
//! `p50_ms p99_ms max_ms served_within_100ms_percent samples`.
//!
//! By default each reader has its own HTTP/1.1 connection, written by hand
//! so that the client costs little, and the time runs to the first byte of
//! the answer. With a fourth argument `h2c:CONNECTIONS` the readers share
//! that many cleartext HTTP/2 connections (prior knowledge; the server
//! must allow `readers / CONNECTIONS` concurrent streams per connection),
//! and the time runs to the answer's headers.
//!
//! ```sh
//! cargo run --release -p eddy-server --example live_fanout -- http://127.0.0.1:4437 10000 3
//! cargo run --release -p eddy-server --example live_fanout -- http://127.0.0.1:4437 10000 3 h2c:20
//! ```

use std::sync::Arc;
mod support;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// How many connections are being opened at once (the server's accept
/// backlog is finite).
const CONNECTING: usize = 256;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:4437".into());
    let readers: usize = args
        .next()
        .map(|r| r.parse())
        .transpose()?
        .unwrap_or(10_000);
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(3);
    let transport = match args.next() {
        None => Transport::Http1,
        Some(arg) => Transport::parse(&arg)?,
    };
    let address = base
        .strip_prefix("http://")
        .context("the base URL must be http://host:port")?
        .trim_end_matches('/')
        .to_owned();
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let path = support::fresh_path("fanout")?;
    let url = format!("{base}{path}");
    http.put(&url)
        .header("content-type", "text/plain")
        .send()
        .await?
        .error_for_status()?;
    let mut samples = Vec::with_capacity(readers * rounds);
    for round in 0..rounds {
        let tail = http
            .head(&url)
            .send()
            .await?
            .headers()
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .context("HEAD has no Stream-Next-Offset")?
            .to_owned();
        let request = Arc::new(format!(
            "GET {path}?offset={tail}&live=long-poll HTTP/1.1\r\nHost: {address}\r\n\r\n"
        ));
        let started = Arc::new(tokio::sync::OnceCell::<Instant>::new());
        let connecting = Arc::new(Semaphore::new(CONNECTING));
        let mut tasks = Vec::with_capacity(readers);
        let h2 = match &transport {
            Transport::Http1 => Vec::new(),
            Transport::H2c(connections) => h2c_clients(*connections)?,
        };
        let long_poll = format!("{url}?offset={tail}&live=long-poll");
        for i in 0..readers {
            let started = Arc::clone(&started);
            if let Some(client) = h2.get(i % h2.len().max(1)) {
                let (client, long_poll) = (client.clone(), long_poll.clone());
                tasks.push(tokio::spawn(async move {
                    let latency = h2_answer(&client, &long_poll, &started).await?;
                    // The round keeps the clients, and so their connections, open.
                    Ok::<_, anyhow::Error>((latency, None))
                }));
                continue;
            }
            let (address, request) = (address.clone(), Arc::clone(&request));
            let connecting = Arc::clone(&connecting);
            tasks.push(tokio::spawn(async move {
                let mut stream = {
                    let _permit = connecting.acquire().await?;
                    let stream = TcpStream::connect(&address).await?;
                    stream.set_nodelay(true)?;
                    stream
                };
                stream.write_all(request.as_bytes()).await?;
                // The connection stays open until the round is over, so
                // that closing it costs the server nothing while it answers.
                let latency = first_answer(&mut stream, &started).await?;
                Ok::<_, anyhow::Error>((latency, Some(stream)))
            }));
        }
        wait_for_live_readers(&http, &base, readers).await?;
        let sent = Instant::now();
        let _ = started.set(sent);
        http.post(&url)
            .header("content-type", "text/plain")
            .body(format!("round {round}"))
            .send()
            .await?
            .error_for_status()?;
        let mut refused = 0;
        let mut open = Vec::with_capacity(readers);
        for task in tasks {
            match task.await? {
                Ok((latency, stream)) => {
                    samples.push(latency);
                    open.push(stream);
                }
                Err(err) => {
                    refused += 1;
                    if refused == 1 {
                        eprintln!("a reader failed: {err:#}");
                    }
                }
            }
        }
        if refused > 0 {
            bail!("{refused} of {readers} readers were not answered with data in round {round}");
        }
        drop((open, h2));
    }
    support::print_summary(samples);
    Ok(())
}

/// How the readers reach the server.
enum Transport {
    /// One HTTP/1.1 connection per reader.
    Http1,
    /// Readers spread over this many HTTP/2 connections.
    H2c(usize),
}

impl Transport {
    fn parse(arg: &str) -> anyhow::Result<Self> {
        let connections: usize = arg
            .strip_prefix("h2c:")
            .context("the fourth argument is h2c:CONNECTIONS")?
            .parse()
            .context("h2c:CONNECTIONS takes a number")?;
        ensure!(connections > 0, "at least one HTTP/2 connection");
        Ok(Transport::H2c(connections))
    }
}

/// `connections` HTTP/2 clients; reqwest keeps one connection per client
/// and host.
fn h2c_clients(connections: usize) -> anyhow::Result<Vec<reqwest::Client>> {
    (0..connections)
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .tcp_nodelay(true)
                .build()
                .context("building an HTTP/2 client")
        })
        .collect()
}

/// Sends one long-poll over HTTP/2 and returns how long after the append
/// its answer's headers came; the answer must be `200` (data).
async fn h2_answer(
    client: &reqwest::Client,
    url: &str,
    started: &tokio::sync::OnceCell<Instant>,
) -> anyhow::Result<Duration> {
    let response = client.get(url).send().await?;
    let arrived = Instant::now();
    ensure!(
        response.version() == reqwest::Version::HTTP_2,
        "answered over {:?}, not HTTP/2",
        response.version()
    );
    ensure!(
        response.status() == reqwest::StatusCode::OK,
        "answered {}, not 200",
        response.status()
    );
    let Some(sent) = started.get() else {
        bail!("answered before the append");
    };
    Ok(arrived.saturating_duration_since(*sent))
}

/// Waits for the first bytes of the answer and returns how long after the
/// append they came; the answer must be `200` (data), not `204`.
async fn first_answer(
    stream: &mut TcpStream,
    started: &tokio::sync::OnceCell<Instant>,
) -> anyhow::Result<Duration> {
    let mut head = [0u8; 12];
    let mut filled = 0;
    let mut arrived = None;
    while filled < head.len() {
        let n = stream.read(&mut head[filled..]).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        arrived.get_or_insert_with(Instant::now);
        filled += n;
    }
    let status = String::from_utf8_lossy(&head[9..12]).into_owned();
    if status != "200" {
        bail!("answered {status}, not 200");
    }
    let (Some(arrived), Some(sent)) = (arrived, started.get()) else {
        bail!("answered before the append");
    };
    Ok(arrived.saturating_duration_since(*sent))
}

/// Polls `/metrics` until the server counts `readers` live readers.
async fn wait_for_live_readers(
    http: &reqwest::Client,
    base: &str,
    readers: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = http
            .get(format!("{base}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let live = metrics
            .lines()
            .find_map(|line| line.strip_prefix("eddy_live_readers "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if live >= readers {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {live} of {readers} readers became live within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
