//! `--config FILE`: a TOML file of a command's options. Its keys are the
//! command's long flags (`max-streams = 100`, `no-fsync = true`,
//! `webhook-allow-network = ["10.0.0.0/8"]`), so every key also has a flag
//! and an `EDDY_*` environment variable. A flag wins over the variable,
//! which wins over the file, which wins over the default: the file's
//! values are handed to clap as flags for exactly the options that neither
//! the command line nor the environment set.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// The id of the `--config` option in every command that takes one.
const CONFIG: &str = "config";

/// Parses the process arguments as `P`, with the values of the
/// subcommand's `--config` file (if it has one) filled in. Exits like
/// clap does on `--help`, `--version` and bad arguments.
pub fn parse<P: clap::Parser>() -> anyhow::Result<P> {
    parse_from(std::env::args_os().collect())
}

/// [`parse`] over given arguments (the first is the program name).
pub fn parse_from<P: clap::Parser>(mut args: Vec<OsString>) -> anyhow::Result<P> {
    let command = P::command();
    let matches = command.clone().get_matches_from(&args);
    if let Some((name, sub_matches)) = matches.subcommand() {
        let file = sub_matches
            .try_get_one::<PathBuf>(CONFIG)
            .ok()
            .flatten()
            .cloned();
        if let (Some(file), Some(sub)) = (file, command.find_subcommand(name)) {
            let flags = flags_from_file(sub, sub_matches, &file)?;
            if !flags.is_empty() {
                args.extend(flags);
                let matches = command.get_matches_from(&args);
                return P::from_arg_matches(&matches).map_err(|e| e.exit());
            }
        }
    }
    P::from_arg_matches(&matches).map_err(|e| e.exit())
}

/// The flags the file adds: one per key whose option the command line and
/// the environment left unset.
fn flags_from_file(
    command: &Command,
    matches: &ArgMatches,
    file: &Path,
) -> anyhow::Result<Vec<OsString>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the config file {}", file.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .with_context(|| format!("parsing the config file {}", file.display()))?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let arg = command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(key.as_str()) && key != CONFIG)
            .with_context(|| {
                format!(
                    "unknown key `{key}` in {}: the keys are the long options of `eddy {}` (see --help)",
                    file.display(),
                    command.get_name()
                )
            })?;
        let set_outside = matches!(
            matches.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if set_outside {
            continue;
        }
        let switch = !arg.get_action().takes_values();
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for value in values {
            match (switch, value) {
                (true, toml::Value::Boolean(true)) => flags.push(format!("--{key}").into()),
                (true, toml::Value::Boolean(false)) => {}
                (true, _) => bail!("`{key}` in {} must be true or false", file.display()),
                (false, toml::Value::String(text)) => flags.push(format!("--{key}={text}").into()),
                (
                    false,
                    toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_),
                ) => flags.push(format!("--{key}={value}").into()),
                (false, _) => bail!(
                    "`{key}` in {} must be a string, a number or a list of them",
                    file.display()
                ),
            }
        }
    }
    Ok(flags)
}

/// The documented table of a command's options: key (and flag), variable,
/// default, meaning. `CONFIG.md`'s copy is checked against it by a test.
#[cfg(test)]
fn table(command: &Command) -> String {
    let mut table = String::from(
        "| key / flag | environment | default | meaning |\n| --- | --- | --- | --- |\n",
    );
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let env = arg
            .get_env()
            .map(|env| format!("`{}`", env.to_string_lossy()))
            .unwrap_or_default();
        let default = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let help = arg
            .get_help()
            .map(|help| help.to_string().replace('\n', " "))
            .unwrap_or_default();
        let _ = std::fmt::Write::write_fmt(
            &mut table,
            format_args!("| `{long}` | {env} | {default} | {help} |\n"),
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::CommandFactory;

    use super::*;
    use crate::serve::ServeArgs;
    use crate::{Cli, Command as Eddy};

    fn serve(args: &[&str], file: &str) -> anyhow::Result<ServeArgs> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("eddy.toml");
        std::fs::write(&path, file)?;
        let mut argv: Vec<OsString> = vec!["eddy".into(), "serve".into()];
        argv.extend(args.iter().map(OsString::from));
        argv.push(format!("--config={}", path.display()).into());
        match parse_from::<Cli>(argv)?.command {
            Eddy::Serve(args) => Ok(*args),
            _ => bail!("not serve"),
        }
    }

    #[test]
    fn the_file_fills_in_what_flags_leave_unset() {
        let file = r#"
            max-streams = 7
            no-fsync = true
            long-poll-timeout = "500ms"
            webhook-allow-network = ["10.0.0.0/8", "::1"]
            log-format = "json"
        "#;
        let args = serve(&["--max-streams", "9"], file).expect("parse");
        assert_eq!(args.max_streams, 9, "the flag wins");
        assert!(args.no_fsync);
        assert_eq!(args.long_poll_timeout, Duration::from_millis(500));
        assert_eq!(args.webhook_allowed_networks.len(), 2);
        assert_eq!(args.log.log_format, crate::logging::LogFormat::Json);
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        // Only this test reads this variable.
        std::env::set_var("EDDY_MAX_LIVE_READERS", "11");
        let args = serve(&[], "max-live-readers = 5\n");
        std::env::remove_var("EDDY_MAX_LIVE_READERS");
        assert_eq!(args.expect("parse").max_live_readers, 11);
    }

    #[test]
    fn retention_rules_come_from_flags_or_the_file_and_bad_ones_are_refused() {
        let file = "retention = [\"logs/**=age=7d\", \"metrics/*=messages=1000; bytes=10MB\"]\n";
        let args = serve(&[], file).expect("parse");
        let rules: Vec<String> = args.retention.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            rules,
            ["logs/**=age=7d", "metrics/*=messages=1000; bytes=10MB"]
        );
        let args = serve(
            &["--retention", "a/*=messages=5", "--retention", "b/**=none"],
            file,
        )
        .expect("parse");
        assert_eq!(args.retention.len(), 2, "the flags win over the file");
        assert_eq!(args.retention[0].to_string(), "a/*=messages=5");
        // Regression: rules were split at commas, so a pattern with
        // `{a,b}` was cut in two (and refused).
        let args = serve(&[], "retention = [\"logs/{a,b}/**=age=7d\"]\n").expect("parse");
        let rules: Vec<String> = args.retention.iter().map(|r| r.to_string()).collect();
        assert_eq!(rules, ["logs/{a,b}/**=age=7d"]);
        let bad = Cli::command()
            .try_get_matches_from(["eddy", "serve", "--retention", "logs/**=age=7"])
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("unknown unit")),
            "{bad:?}"
        );
    }

    #[test]
    fn compaction_rules_come_from_flags_or_the_file_and_bad_ones_are_refused() {
        let file = "compaction = [\"state/{a,b}/*=none\", \"state/**=age=1h; deletes=7d\"]\n";
        let args = serve(&[], file).expect("parse");
        let rules: Vec<String> = args.compaction.iter().map(|r| r.to_string()).collect();
        assert_eq!(rules, ["state/{a,b}/*=none", "state/**=age=1h; deletes=7d"]);
        let args = serve(&["--compaction", "s/**=on"], file).expect("parse");
        let rules: Vec<String> = args.compaction.iter().map(|r| r.to_string()).collect();
        assert_eq!(rules, ["s/**=deletes=1d"], "the flags win over the file");
        let bad = Cli::command()
            .try_get_matches_from(["eddy", "serve", "--compaction", "s/**=lag=5"])
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("unknown key")),
            "{bad:?}"
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused() {
        let unknown = serve(&[], "max-stream = 7\n").err().map(|e| e.to_string());
        assert!(unknown.is_some_and(|m| m.contains("unknown key `max-stream`")));
        assert!(serve(&[], "no-fsync = 3\n").is_err());
        assert!(serve(&[], "config = \"other.toml\"\n").is_err());
        assert!(serve(&[], "max-streams = \n").is_err(), "not TOML");
    }

    /// Every option of `eddy serve` has an `EDDY_*` variable, and
    /// `CONFIG.md` documents exactly the options the command has.
    #[test]
    fn every_serve_option_has_a_variable_and_is_documented() {
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").expect("serve");
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let expected = format!("EDDY_{}", long.to_uppercase().replace('-', "_"));
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert!(
                env.as_deref() == Some(expected.as_str())
                    || (long == "webhook-allow-network" && env.is_some()),
                "--{long} has the variable {env:?}, expected {expected}"
            );
        }
        let documented = include_str!("../CONFIG.md");
        let table = table(serve);
        assert!(
            documented.contains(&table),
            "CONFIG.md must hold this table:\n{table}"
        );
    }
}
