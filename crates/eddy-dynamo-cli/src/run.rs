//! Running a command: find the projection, read the row keys, work through
//! them with a progress bar, print one line per row.

use std::io::Write;

use eddy_dynamo::{RebuildInstances, StreamId};
use indicatif::{ProgressBar, ProgressStyle};

use crate::command::{ProjectionCommand, RowsArgs};
use crate::error::CliError;
use crate::repair::{RowRepair, RowReport};

/// Rows from which a command shows a progress bar.
const PROGRESS_FROM: usize = 2;

/// Runs `command` on the mounted `projections`, printing one line per row
/// to `out`. Stops at the first row that fails.
pub async fn run(
    command: &ProjectionCommand,
    projections: &[&dyn RowRepair],
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    let rows = match command {
        ProjectionCommand::Rebuild(a) => &a.rows,
        ProjectionCommand::CatchUp(a) => &a.rows,
        ProjectionCommand::Status(a) => &a.rows,
    };
    let projection = find(projections, &rows.projection)?;
    let keys = keys(rows)?;
    let instances = match command {
        ProjectionCommand::Rebuild(a) => instances(&a.instances)?,
        _ => RebuildInstances::new(),
    };
    let progress = progress(keys.len());
    for (text, key) in keys {
        let failed = |source: eddy_dynamo::Error| CliError::Row {
            row: text.clone(),
            code: source.code(),
            source,
        };
        let line = match command {
            ProjectionCommand::Rebuild(_) => {
                let report = projection
                    .rebuild(key, instances.clone())
                    .await
                    .map_err(failed)?;
                format!("{text} rebuilt: {}", describe(&report))
            }
            ProjectionCommand::CatchUp(_) => {
                let report = projection.catch_up(key).await.map_err(failed)?;
                format!("{text} caught up: {}", describe(&report))
            }
            ProjectionCommand::Status(_) => {
                let checkpoints = projection.checkpoints(key).await.map_err(failed)?;
                let listed: Vec<String> = checkpoints
                    .iter()
                    .map(|(source, id, version)| format!("{source}#{id}={version}"))
                    .collect();
                format!(
                    "{text} checkpoints: {}",
                    if listed.is_empty() {
                        "none".into()
                    } else {
                        listed.join(" ")
                    }
                )
            }
        };
        progress
            .suspend(|| writeln!(out, "{line}"))
            .map_err(|source| CliError::Io {
                path: "standard output".into(),
                source,
            })?;
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok(())
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
