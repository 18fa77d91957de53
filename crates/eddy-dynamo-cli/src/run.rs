//! Running a command: find the projection, read the row keys, work through
//! them with a progress bar, print one line per row.

use std::io::Write;

use eddy_dynamo::{
    BoxError, Deliver, DrainReport, Effect, Item, PendingReport, RebuildInstances, RowPending,
    StreamId,
};
use futures::future::BoxFuture;
use indicatif::{ProgressBar, ProgressStyle};

use crate::command::{ProjectionCommand, RowsArgs};
use crate::error::{one_line, CliError};
use crate::repair::{RowRepair, RowReport};

/// Rows from which a command shows a progress bar.
const PROGRESS_FROM: usize = 2;

/// Runs `command` on the mounted `projections`, printing one line per row
/// to `out`. `deliver` hands outbox effects to their consumer for `drain`
/// and `drain-pending` (without one, those commands fail). Stops at the
/// first row that fails; a drain that leaves effects undelivered prints
/// them and fails at the end.
pub async fn run(
    command: &ProjectionCommand,
    projections: &[&dyn RowRepair],
    deliver: Option<&dyn Deliver>,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let (rows, action) = match command {
        ProjectionCommand::DrainPending(args) => {
            let projection = find(projections, &args.projection)?;
            let deliver = deliver.ok_or(CliError::NoDeliver {
                command: "drain-pending",
            })?;
            return drain_pending(projection, deliver, out).await;
        }
        ProjectionCommand::Status(args) if no_rows(&args.rows) => {
            let projection = find(projections, &args.rows.projection)?;
            return pending_rows(projection, out, false).await;
        }
        ProjectionCommand::Parked(args) => {
            let projection = find(projections, &args.projection)?;
            return pending_rows(projection, out, true).await;
        }
        ProjectionCommand::Retry(a) => (&a.rows, Action::Retry(deliver)),
        ProjectionCommand::Skip(a) if a.dead_letter => (
            &a.rows,
            Action::Skip(Some(deliver.ok_or(CliError::NoDeliver {
                command: "skip --dead-letter",
            })?)),
        ),
        ProjectionCommand::Skip(a) => (&a.rows, Action::Skip(None)),
        ProjectionCommand::Rebuild(a) => (&a.rows, Action::Rebuild(instances(&a.instances)?)),
        ProjectionCommand::CatchUp(a) => (&a.rows, Action::CatchUp),
        ProjectionCommand::Status(a) => (&a.rows, Action::Status),
        ProjectionCommand::Drain(a) => (
            &a.rows,
            Action::Drain(deliver.ok_or(CliError::NoDeliver { command: "drain" })?),
        ),
    };
    let projection = find(projections, &rows.projection)?;
    let keys = keys(rows)?;
    let progress = progress(keys.len());
    let mut undelivered = 0;
    for (text, key) in keys {
        let failed = |source: eddy_dynamo::Error| CliError::Row {
            row: text.clone(),
            code: source.code(),
            source,
        };
        let line = match &action {
            Action::Rebuild(instances) => {
                let report = projection
                    .rebuild(key, instances.clone())
                    .await
                    .map_err(failed)?;
                format!("{text} rebuilt: {}", describe(&report))
            }
            Action::CatchUp => {
                let report = projection.catch_up(key).await.map_err(failed)?;
                format!("{text} caught up: {}", describe(&report))
            }
            Action::Status => {
                let checkpoints = projection.checkpoints(key.clone()).await.map_err(failed)?;
                let pending = projection.pending(key).await.map_err(failed)?;
                let listed: Vec<String> = checkpoints
                    .iter()
                    .map(|(source, id, version)| format!("{source}#{id}={version}"))
                    .collect();
                let mut line = format!(
                    "{text} checkpoints: {}",
                    if listed.is_empty() {
                        "none".into()
                    } else {
                        listed.join(" ")
                    }
                );
                if let Some(pending) = pending {
                    line.push_str(&format!("; {}", describe_pending(&pending)));
                }
                line
            }
            Action::Drain(deliver) => {
                let report = projection.drain(key, *deliver).await.map_err(failed)?;
                undelivered += usize::from(report.undelivered.is_some() || report.parked.is_some());
                format!("{text} drained: {}", describe_drain(&report))
            }
            Action::Retry(deliver) => {
                let unparked = projection.unpark(key.clone()).await.map_err(failed)?;
                let mut line = match &unparked {
                    Some(parked) => format!("{text} unparked {}", effect_name(&parked.effect)),
                    None => format!("{text} not parked"),
                };
                if let (Some(deliver), Some(_)) = (deliver, &unparked) {
                    let report = projection.drain(key, *deliver).await.map_err(failed)?;
                    undelivered +=
                        usize::from(report.undelivered.is_some() || report.parked.is_some());
                    line.push_str(&format!(", then {}", describe_drain(&report)));
                }
                line
            }
            Action::Skip(dead_letter) => skip(projection, &text, key, *dead_letter).await?,
        };
        print(&progress, out, &line)?;
        progress.inc(1);
    }
    progress.finish_and_clear();
    match undelivered {
        0 => Ok(()),
        rows => Err(CliError::Undelivered { rows }),
    }
}

/// What a command does to each row.
enum Action<'a> {
    Rebuild(RebuildInstances),
    CatchUp,
    Status,
    Drain(&'a dyn Deliver),
    /// Unpark, then drain when there is a deliver.
    Retry(Option<&'a dyn Deliver>),
    /// Take the parked head out, moving it to the dead-letter stream of
    /// this deliver first when there is one.
    Skip(Option<&'a dyn Deliver>),
}

/// `skip` of one row: the parked head moved aside (or not) and dropped;
/// the line says exactly what was taken out.
async fn skip(
    projection: &dyn RowRepair,
    text: &str,
    key: serde_json::Value,
    dead_letter: Option<&dyn Deliver>,
) -> Result<String, CliError> {
    let failed = |source: eddy_dynamo::Error| CliError::Row {
        row: text.to_owned(),
        code: source.code(),
        source,
    };
    let pending = projection.pending(key.clone()).await.map_err(failed)?;
    let (Some(effect), Some(failure)) = pending
        .map(|p| (p.head, p.head_failure.filter(|f| f.parked)))
        .unwrap_or_default()
    else {
        return Err(CliError::NotParked {
            row: text.to_owned(),
        });
    };
    if let Some(deliver) = dead_letter {
        deliver
            .dead_letter(effect.clone(), failure.clone())
            .await
            .map_err(|source| CliError::DeadLetter {
                row: text.to_owned(),
                source,
            })?;
    }
    if !projection.drop_parked(key, &effect).await.map_err(failed)? {
        return Err(CliError::NotParked {
            row: text.to_owned(),
        });
    }
    let payload = effect
        .decode::<serde_json::Value>()
        .map_or_else(|_| format!("{:?}", effect.payload), |v| v.to_string());
    let how = if dead_letter.is_some() {
        "moved to the dead-letter stream"
    } else {
        "dropped"
    };
    Ok(format!(
        "{text} skipped: {how} {} (index {}, revision {}, position {}) payload {payload}; it had failed with {}: {}",
        effect_name(&effect),
        effect.index,
        effect.revision,
        effect.position,
        failure.code,
        failure.message
    ))
}

fn no_rows(rows: &RowsArgs) -> bool {
    rows.keys.is_empty() && rows.keys_file.is_none()
}

/// `status` without rows: every row with pending effects; `parked`: only
/// the parked ones.
async fn pending_rows(
    projection: &dyn RowRepair,
    out: &mut (dyn Write + Send),
    parked_only: bool,
) -> Result<(), CliError> {
    let mut rows = projection.pending_rows().await.map_err(whole)?;
    if parked_only {
        rows.retain(RowPending::is_parked);
    }
    let progress = ProgressBar::hidden();
    if rows.is_empty() {
        let none = if parked_only {
            "no parked rows"
        } else {
            "no rows with pending effects"
        };
        return print(&progress, out, none);
    }
    for row in &rows {
        let line = format!("{} {}", row_key(&row.row), describe_pending(row));
        print(&progress, out, &line)?;
    }
    Ok(())
}

/// `drain-pending`: a spinner counts the effects delivered.
async fn drain_pending(
    projection: &dyn RowRepair,
    deliver: &dyn Deliver,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let spinner = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {pos} effects delivered {elapsed}") {
        spinner.set_style(style);
    }
    let counting = Counting {
        inner: deliver,
        progress: spinner.clone(),
    };
    let report = projection.drain_pending(&counting).await.map_err(whole)?;
    spinner.finish_and_clear();
    for stuck in &report.undelivered {
        let line = format!(
            "{} undelivered: {}",
            row_key(&stuck.effect.row),
            describe_undelivered(&stuck.effect, stuck.error.as_ref())
        );
        print(&spinner, out, &line)?;
    }
    for parked in &report.parked {
        let line = format!(
            "{} parked: {}: {}: {}",
            row_key(&parked.effect.row),
            effect_name(&parked.effect),
            parked.failure.code,
            parked.failure.message
        );
        print(&spinner, out, &line)?;
    }
    for (row, error) in &report.failed {
        let line = format!(
            "{} failed: {}: {}",
            row_key(row),
            error.code(),
            crate::error::one_line(error)
        );
        print(&spinner, out, &line)?;
    }
    let line = format!(
        "drained {} row(s): {} delivered, {} busy, {} undelivered, {} parked, {} failed, {} stale index entries",
        report.rows,
        report.delivered,
        report.busy,
        report.undelivered.len(),
        report.parked.len(),
        report.failed.len(),
        report.stale
    );
    print(&spinner, out, &line)?;
    match (
        report.failed.len(),
        report.undelivered.len() + report.parked.len(),
    ) {
        (0, 0) => Ok(()),
        (0, rows) => Err(CliError::Undelivered { rows }),
        (rows, _) => Err(CliError::DrainFailed { rows }),
    }
}

/// A deliver that moves a progress bar on each success.
struct Counting<'a> {
    inner: &'a dyn Deliver,
    progress: ProgressBar,
}

impl Deliver for Counting<'_> {
    fn deliver(&self, effect: Effect) -> BoxFuture<'static, Result<(), BoxError>> {
        let delivering = self.inner.deliver(effect);
        let progress = self.progress.clone();
        Box::pin(async move {
            let delivered = delivering.await;
            if delivered.is_ok() {
                progress.inc(1);
            }
            delivered
        })
    }

    fn pass_done<'a>(&'a self, report: &'a PendingReport) -> BoxFuture<'a, ()> {
        self.inner.pass_done(report)
    }
}

fn whole(source: eddy_dynamo::Error) -> CliError {
    CliError::Failed {
        code: source.code(),
        source,
    }
}

fn print(progress: &ProgressBar, out: &mut (dyn Write + Send), line: &str) -> Result<(), CliError> {
    progress
        .suspend(|| writeln!(out, "{line}"))
        .map_err(|source| CliError::Io {
            path: "standard output".into(),
            source,
        })
}

fn find<'a>(projections: &[&'a dyn RowRepair], name: &str) -> Result<&'a dyn RowRepair, CliError> {
    projections
        .iter()
        .find(|p| p.name() == name)
        .copied()
        .ok_or_else(|| CliError::UnknownProjection {
            name: name.to_owned(),
            mounted: projections
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The row keys given, as text and JSON, in order.
fn keys(rows: &RowsArgs) -> Result<Vec<(String, serde_json::Value)>, CliError> {
    let mut texts = rows.keys.clone();
    if let Some(path) = &rows.keys_file {
        let content = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            path: path.display().to_string(),
            source,
        })?;
        texts.extend(
            content
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    if texts.is_empty() {
        return Err(CliError::InvalidArgument {
            argument: "--key".into(),
            reason: "name at least one row (--key or --keys-file)".into(),
        });
    }
    texts
        .into_iter()
        .map(|text| match serde_json::from_str(&text) {
            Ok(value @ serde_json::Value::Object(_)) => Ok((text, value)),
            Ok(_) => Err(invalid_key(&text, "not a JSON object".into())),
            Err(e) => Err(invalid_key(&text, e.to_string())),
        })
        .collect()
}

fn invalid_key(text: &str, reason: String) -> CliError {
    CliError::InvalidArgument {
        argument: format!("--key {text}"),
        reason,
    }
}

fn instances(given: &[String]) -> Result<RebuildInstances, CliError> {
    let mut instances = RebuildInstances::new();
    for text in given {
        let bad = |reason: String| CliError::InvalidArgument {
            argument: format!("--instance {text}"),
            reason,
        };
        let (source, id) = text
            .split_once('=')
            .ok_or_else(|| bad("expected <source>=<stream id>".into()))?;
        let id: StreamId = id
            .parse()
            .map_err(|e: eddy_dynamo::Error| bad(e.to_string()))?;
        instances = instances.add(source, id);
    }
    Ok(instances)
}

fn progress(rows: usize) -> ProgressBar {
    if rows < PROGRESS_FROM {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(rows as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} rows {elapsed}") {
        bar.set_style(style);
    }
    bar
}

fn describe(report: &RowReport) -> String {
    let mut text = match (report.written, report.removed) {
        (true, true) => "removed".to_owned(),
        (true, false) => "written".to_owned(),
        (false, _) => "unchanged".to_owned(),
    };
    if let Some(revision) = report.revision {
        text.push_str(&format!(", revision {revision}"));
    }
    for (source, id, applied, checkpoint) in &report.instances {
        text.push_str(&format!(
            ", {source}#{id}: {applied} applied, at {checkpoint}"
        ));
    }
    text
}

/// A table key as `pk=<value>|sk=<value>` (string values as they are).
fn row_key(key: &Item) -> String {
    let mut parts: Vec<String> = key
        .iter()
        .map(|(name, value)| match value {
            eddy_dynamo::AttributeValue::S(text) => format!("{name}={text}"),
            other => format!("{name}={other:?}"),
        })
        .collect();
    parts.sort();
    parts.join("|")
}

/// An effect by where it came from: `<source>#<stream id>@<version>`.
fn effect_name(effect: &Effect) -> String {
    format!("{}#{}@{}", effect.source, effect.stream_id, effect.version)
}

fn describe_undelivered(effect: &Effect, error: &(dyn std::error::Error + 'static)) -> String {
    format!("{}: {}", effect_name(effect), one_line(error))
}

fn describe_drain(report: &DrainReport) -> String {
    let mut text = format!("{} delivered", report.delivered);
    if let Some(stuck) = &report.undelivered {
        text.push_str(&format!(
            ", undelivered {}",
            describe_undelivered(&stuck.effect, stuck.error.as_ref())
        ));
    }
    if report.busy {
        text.push_str(", busy (another drainer holds the head)");
    }
    if let Some(parked) = &report.parked {
        text.push_str(&format!(
            ", parked at {}: {}: {}",
            effect_name(&parked.effect),
            parked.failure.code,
            parked.failure.message
        ));
    }
    text
}

fn describe_pending(pending: &RowPending) -> String {
    let mut text = format!("pending: {} effect(s)", pending.effects);
    if let Some(head) = &pending.head {
        text.push_str(&format!(", head {}", effect_name(head)));
        if let Some(age) = pending.head_age {
            text.push_str(&format!(" ({} s old)", age.as_secs()));
        }
    }
    if let Some(failure) = &pending.head_failure {
        let state = if failure.parked {
            "PARKED"
        } else {
            "last failure"
        };
        text.push_str(&format!(
            ", {state} after {} failure(s): {}: {}",
            failure.failures, failure.code, failure.message
        ));
    }
    match &pending.oldest_claim {
        None if pending.effects > 0 => text.push_str(", no claim"),
        None => {}
        Some(claim) => {
            let state = if claim.expired {
                "expired".to_owned()
            } else {
                format!("held for {} s more", claim.remaining.as_secs())
            };
            text.push_str(&format!(
                ", oldest claim on {} {state}",
                effect_name(&claim.effect)
            ));
        }
    }
    text
}
