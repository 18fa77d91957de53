//! Append → live-reader latency against any Durable Streams server.
//!
//! A long-poll reader waits at the tail; the writer appends; the sample is
//! the time from just before the append is sent until the reader has the
//! data. Prints `p50_ms p99_ms samples`. A third argument reads through
//! another server (two servers sharing a database: latency across
//! processes).
//!
//! With `WAITED=P` set, it first creates P other streams and holds one
//! idle long-poll reader on each of them open on the reader's server (so
//! that server waits on P + 1 paths while the samples are taken), and
//! starts sampling once that server's `eddy_live_readers` gauge counts
//! them all.
//!
//! ```sh
//! cargo run --release -p eddy-server --example live_latency -- http://127.0.0.1:4437 300
//! WAITED=1000 cargo run --release -p eddy-server --example live_latency -- URL 300 READER_URL
//! ```

use std::time::{Duration, Instant};

use futures::StreamExt;

/// The next offset a response names, if any.
fn next_offset(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Creates `count` streams through `base` and holds an idle long-poll
/// reader on each through `reader_base` (asked again when it times out),
/// then waits until the reader's server counts them as live readers.
async fn hold_waited(base: &str, reader_base: &str, count: usize, run: u128) -> anyhow::Result<()> {
    // Its own connection pool: one connection per held reader.
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let created: Vec<anyhow::Result<(String, String)>> = futures::stream::iter(0..count)
        .map(|i| {
            let http = http.clone();
            let name = format!("bench/waited-{run}-{i}");
            let url = format!("{base}/{name}");
            async move {
                let response = http
                    .put(&url)
                    .header("content-type", "text/plain")
                    .send()
                    .await?
                    .error_for_status()?;
                let offset = next_offset(&response).unwrap_or_else(|| "-1".into());
                Ok((name, offset))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for stream in created {
        let (name, offset) = stream?;
        let (http, url) = (http.clone(), format!("{reader_base}/{name}"));
        tokio::spawn(async move {
            // Idle streams: every answer is a timeout; ask again at once.
            while let Ok(response) = http
                .get(format!("{url}?offset={offset}&live=long-poll"))
                .send()
                .await
            {
                if response.bytes().await.is_err() {
                    break;
                }
            }
            eprintln!("a held reader of {url} stopped");
        });
    }
    let metrics = format!("{reader_base}/metrics");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let text = http
            .get(&metrics)
            .timeout(Duration::from_secs(30))
            .send()
            .await?
            .text()
            .await?;
        let readers = text
            .lines()
            .find_map(|line| line.strip_prefix("eddy_live_readers "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if readers >= count as f64 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {readers} of {count} held readers are live on {reader_base}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:4437".into());
    let rounds: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(300);
    let reader_base = args.next().unwrap_or_else(|| base.clone());
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let waited: usize = std::env::var("WAITED")
        .ok()
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    if waited > 0 {
        hold_waited(&base, &reader_base, waited, nanos).await?;
    }
    let name = format!("bench/latency-rs-{nanos}");
    let url = format!("{base}/{name}");
    let read_url = format!("{reader_base}/{name}");
    http.put(&url)
        .header("content-type", "text/plain")
        .send()
        .await?
        .error_for_status()?;
    let head = http.head(&url).send().await?;
    let mut offset = head
        .headers()
        .get("stream-next-offset")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-1")
        .to_owned();
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let reader = tokio::spawn({
            let http = http.clone();
            let poll = format!("{read_url}?offset={offset}&live=long-poll");
            async move {
                let response = http.get(poll).send().await?;
                let next = next_offset(&response);
                let status = response.status();
                response.bytes().await?;
                Ok::<_, reqwest::Error>((Instant::now(), status, next))
            }
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        let started = Instant::now();
        let write = http
            .post(&url)
            .header("content-type", "text/plain")
            .body(format!("m{i}"))
            .send()
            .await?;
        write.error_for_status()?;
        let (received, status, next) = reader.await??;
        if status == reqwest::StatusCode::OK {
            samples.push(received.saturating_duration_since(started));
        }
        if let Some(next) = next {
            offset = next;
        }
    }
    samples.sort();
    let pick = |q: f64| {
        let i = ((q * samples.len() as f64) as usize).min(samples.len().saturating_sub(1));
        samples
            .get(i)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
    };
    println!("{:.3} {:.3} {}", pick(0.5), pick(0.99), samples.len());
    Ok(())
}
