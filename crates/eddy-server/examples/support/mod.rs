//! What the fan-out examples share: the name of a fresh stream and the
//! summary line of their latency samples.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A stream path under `/bench` that no earlier run used.
pub fn fresh_path(prefix: &str) -> anyhow::Result<String> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    Ok(format!("/bench/{prefix}-{nanos}"))
}

/// Prints `p50_ms p99_ms max_ms served_within_100ms_percent samples`.
pub fn print_summary(mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pick = |q: f64| {
        let i = ((q * samples.len() as f64) as usize).min(samples.len().saturating_sub(1));
        samples.get(i).map_or(f64::NAN, |d| ms(*d))
    };
    let within = samples
        .iter()
        .filter(|d| **d <= Duration::from_millis(100))
        .count();
    println!(
        "{:.1} {:.1} {:.1} {:.1} {}",
        pick(0.5),
        pick(0.99),
        samples.last().map_or(f64::NAN, |d| ms(*d)),
        100.0 * within as f64 / samples.len().max(1) as f64,
        samples.len()
    );
}
