//! The command group's error: one line, with the stable code of its cause.

/// Why a command failed. Its `Display` is one line: print it as is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The projection named on the command line is not mounted.
    #[error("no projection named {name}; mounted: {mounted}")]
    UnknownProjection {
        /// The name given.
        name: String,
        /// The names mounted, comma-separated.
        mounted: String,
    },
    /// An argument does not parse.
    #[error("invalid argument {argument}: {reason}")]
    InvalidArgument {
        /// Which argument.
        argument: String,
        /// Why.
        reason: String,
    },
    /// A row failed.
    #[error("{row}: {code}: {}", one_line(.source))]
    Row {
        /// The row key, as given.
        row: String,
        /// The stable error code.
        code: &'static str,
        /// The failure.
        #[source]
        source: eddy_dynamo::Error,
    },
    /// A drain command was given, but the application mounted the group
    /// without a `deliver`.
    #[error("{command} needs a deliver, and this application mounts none")]
    NoDeliver {
        /// The command.
        command: &'static str,
    },
    /// Effects stayed pending because their delivery failed (each row's is
    /// printed above).
    #[error("{rows} row(s) left an effect undelivered")]
    Undelivered {
        /// How many rows.
        rows: usize,
    },
    /// Rows whose drain failed (each is printed above); the others were
    /// drained.
    #[error("{rows} row(s) failed to drain")]
    DrainFailed {
        /// How many rows.
        rows: usize,
    },
    /// The whole command failed (not one row).
    #[error("{code}: {}", one_line(.source))]
    Failed {
        /// The stable error code.
        code: &'static str,
        /// The failure.
        #[source]
        source: eddy_dynamo::Error,
    },
    /// `skip` found no parked head on a row (nothing was taken out).
    #[error("{row}: not parked (its head effect is delivered by drains; skip takes out parked heads only)")]
    NotParked {
        /// The row key, as given.
        row: String,
    },
    /// `skip --dead-letter` could not move a row's parked effect (it
    /// stays parked).
    #[error("{row}: moving the parked effect to the dead-letter stream failed: {}", one_line(.source.as_ref()))]
    DeadLetter {
        /// The row key, as given.
        row: String,
        /// The consumer's failure.
        #[source]
        source: eddy_dynamo::BoxError,
    },
    /// Reading a file of keys failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// An error with its causes, on one line.
pub(crate) fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text.replace('\n', " ")
}
