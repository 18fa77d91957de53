//! `eddy status`: the streams of a store at a glance, every projection
//! binding whose checkpoint lives there (how far behind its inputs it is,
//! when it last committed, and what is stuck), and the reports components
//! beside the store published there (an outbox bridge's parked rows).

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::bail;
use clap::Args;
use eddy_projection::{BindingHealth, BindingReport, RESERVED_PREFIX};
use eddy_streams::{Expiry, Report, StreamInfo};
use serde::Serialize;

use crate::logging::{self, LogArgs};
use crate::serve::parse_duration;
use crate::store::StoreArgs;

/// Options of `eddy status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    log: LogArgs,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// Fail (exit status 1, after printing) when a binding is more than
    /// this many messages behind on any input.
    #[arg(long, value_name = "MESSAGES")]
    fail_on_lag: Option<u64>,
    /// Streams with a fixed expiry within this long count as expiring soon.
    #[arg(long, default_value = "60m", value_parser = parse_duration)]
    expiring_within: Duration,
}

/// What `eddy status --json` prints.
#[derive(Debug, Serialize)]
struct Status {
    streams: StreamsSummary,
    bindings: Vec<BindingReport>,
    /// Whether the store keeps durable wake-up marks (SQLite and
    /// PostgreSQL do; a remote server's are not visible through it).
    keeps_wake_marks: bool,
    /// What components beside the store reported there.
    reports: Vec<Report>,
}

/// The streams of the store, Eddy's own (`__eddy/`) apart.
#[derive(Debug, Default, Serialize)]
struct StreamsSummary {
    count: u64,
    bytes: u64,
    closed: u64,
    with_ttl: u64,
    /// Paths of streams whose fixed expiry falls within `--expiring-within`.
    expiring_soon: Vec<String>,
    internal: u64,
    internal_bytes: u64,
}

/// Runs `eddy status`.
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    logging::init(args.log.log_format);
    let (store, sql_checkpoints) = args.store.open_with_checkpoints().await?;
    let listed = store.list("").await?;
    // A server reports its bindings itself when its console is on: it
    // sees its store's wake-up marks, which its clients cannot.
    let reported = match args.store.remote()? {
        Some(remote) => remote.bindings().await?,
        None => None,
    };
    let (bindings, keeps_wake_marks) = match reported {
        Some(bindings) => (bindings, true),
        None => (
            eddy_projection::inspect_with(&store, sql_checkpoints.as_deref()).await?,
            store.wake_marks().is_some(),
        ),
    };
    let reports = eddy_streams::reports(store.as_ref()).await?;
    let status = Status {
        streams: summarize(&listed, SystemTime::now() + args.expiring_within),
        bindings,
        keeps_wake_marks,
        reports,
    };
    for binding in &status.bindings {
        if let Some(error) = &binding.error {
            tracing::warn!(binding = %binding.checkpoint_path, %error, "a binding cannot be read");
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &status)?;
        writeln!(out)?;
    } else {
        table(&mut out, &status, args.expiring_within)?;
    }
    out.flush()?;
    if let Some(limit) = args.fail_on_lag {
        let behind: Vec<String> = status
            .bindings
            .iter()
            .filter_map(|b| {
                let lag = b.inputs.iter().map(|i| i.lag_messages).max()?;
                (lag > limit).then(|| format!("{} ({lag} messages)", b.checkpoint_path))
            })
            .collect();
        if !behind.is_empty() {
            bail!(
                "bindings more than {limit} messages behind: {}",
                behind.join(", ")
            );
        }
    }
    Ok(())
}

fn summarize(listed: &[StreamInfo], expiring_before: SystemTime) -> StreamsSummary {
    let mut summary = StreamsSummary::default();
    for info in listed {
        if info.path.starts_with(RESERVED_PREFIX) {
            summary.internal += 1;
            summary.internal_bytes += info.bytes;
            continue;
        }
        summary.count += 1;
        summary.bytes += info.bytes;
        summary.closed += u64::from(info.closed);
        match info.config.expiry {
            Expiry::Ttl(_) => summary.with_ttl += 1,
            Expiry::At(at) if at <= expiring_before => {
                summary.expiring_soon.push(info.path.clone());
            }
            Expiry::At(_) | Expiry::Never => {}
        }
    }
    summary
}

fn table(out: &mut impl Write, status: &Status, within: Duration) -> anyhow::Result<()> {
    let s = &status.streams;
    writeln!(
        out,
        "streams: {} ({} bytes), {} closed, {} with a TTL, {} expiring within {}s; {} of Eddy's own ({} bytes)",
        s.count,
        s.bytes,
        s.closed,
        s.with_ttl,
        s.expiring_soon.len(),
        within.as_secs(),
        s.internal,
        s.internal_bytes
    )?;
    for path in &s.expiring_soon {
        writeln!(out, "  expiring soon: {path}")?;
    }
    reports(out, &status.reports)?;
    if status.bindings.is_empty() {
        writeln!(out, "no projection bindings keep checkpoints here")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<40} {:<10} {:>7} {:>10} {:>12} {:>14}  {:<9}  PENDING",
        "BINDING", "STATE", "UNITS", "LAG MSGS", "LAG BYTES", "LAST COMMIT", "WAKE"
    )?;
    let now = unix_ms(SystemTime::now());
    for b in &status.bindings {
        let lag_messages: u64 = b.inputs.iter().map(|i| i.lag_messages).sum();
        let lag_bytes: u64 = b.inputs.iter().map(|i| i.lag_bytes).sum();
        let exact = if b.inputs.iter().all(|i| i.lag_bytes_exact) {
            ""
        } else {
            "+"
        };
        let last = b.committed_at_ms.map_or("-".to_owned(), |at| {
            format!("{}s ago", now.saturating_sub(at) / 1000)
        });
        let pending = b
            .pending
            .as_ref()
            .map_or("-".to_owned(), |p| format!("unit {}", p.key));
        let wake = match &b.wake_mark {
            None => "-",
            Some(mark) if mark.deferred_until_ms.is_some() => "deferred",
            Some(_) => "pending",
        };
        writeln!(
            out,
            "{:<40} {:<10} {:>7} {:>10} {:>12} {:>14}  {wake:<9}  {pending}",
            format!("{} v{} {}", b.projection, b.version, b.params),
            health(b.state),
            b.units,
            lag_messages,
            format!("{lag_bytes}{exact}"),
            last,
        )?;
        for input in &b.inputs {
            let tail = input
                .tail
                .map_or("?".to_owned(), |t| t.position().to_string());
            let path = input.path.as_deref().unwrap_or("(path not recorded yet)");
            writeln!(
                out,
                "    {} {path}: at message {} of {tail}, {} behind",
                input.name,
                input.offset.position(),
                input.lag_messages
            )?;
        }
        if b.checkpoint_table {
            writeln!(
                out,
                "    checkpoint: a row of the store's projection_checkpoints table"
            )?;
        }
        if let Some(failure) = &b.failure {
            let ago = now.saturating_sub(failure.at_ms) / 1000;
            writeln!(
                out,
                "    last error ({}, {ago}s ago): {}",
                failure.code, failure.message
            )?;
        }
        if let Some(error) = &b.error {
            writeln!(out, "    cannot read: {error}")?;
        }
        if let Some(mark) = &b.wake_mark {
            let due = mark.deferred_until_ms.map_or(String::new(), |due| {
                format!(
                    ", runs again in {}s",
                    due.saturating_sub(now).div_ceil(1000)
                )
            });
            writeln!(
                out,
                "    wake-up mark: {} commits since it caught up (last on {}), {} failed runs{due}",
                mark.pending_commits, mark.path, mark.failed_runs
            )?;
        }
    }
    if !status.keeps_wake_marks {
        writeln!(
            out,
            "wake-up marks: this store keeps none it can show (a remote server's stay in its own store)"
        )?;
    }
    Ok(())
}

/// The reports of components beside the store, each with what needs an
/// operator.
fn reports(out: &mut impl Write, reports: &[Report]) -> anyhow::Result<()> {
    let now = unix_ms(SystemTime::now());
    for report in reports {
        let ago = now.saturating_sub(report.changed_ms) / 1000;
        writeln!(
            out,
            "{}: {} (since {ago}s ago)",
            report.source, report.summary
        )?;
        for item in &report.items {
            let since = now.saturating_sub(item.since_ms) / 1000;
            writeln!(
                out,
                "    {} {} ({since}s ago): {}",
                item.subject, item.code, item.message
            )?;
        }
        let unlisted = report.items_total.saturating_sub(report.items.len() as u64);
        if unlisted > 0 {
            writeln!(out, "    … and {unlisted} more")?;
        }
    }
    Ok(())
}

fn health(state: BindingHealth) -> &'static str {
    match state {
        BindingHealth::CaughtUp => "caught-up",
        BindingHealth::Behind => "behind",
        BindingHealth::Pinned => "pinned",
        BindingHealth::Failed => "failed",
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
