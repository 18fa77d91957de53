//! Append → live-reader latency against any Durable Streams server.
//!
//! A long-poll reader waits at the tail; the writer appends; the sample is
//! the time from just before the append is sent until the reader has the
//! data. Prints `p50_ms p99_ms samples`. A third argument reads through
//! another server (two servers sharing a database: latency across
//! processes).
//!
//! ```sh
//! cargo run --release -p eddy-server --example live_latency -- http://127.0.0.1:4437 300
//! ```

use std::time::{Duration, Instant};

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
                let next = response
                    .headers()
                    .get("stream-next-offset")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
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
