//! `eddy streams …`: stream tools on the embedded store.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use eddy_streams::{
    export, import, Append, Payload, ProducerPosition, ReadFrom, StreamConfig, StreamPath,
};

use crate::progress::Bar;
use crate::store::StoreArgs;

/// Stream tools; every command opens the store that `--data`,
/// `--storage` or `--server` names (the SQLite store under `./eddy-data`
/// by default).
#[derive(Args, Debug)]
pub struct StreamsArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: StreamsCommand,
}

#[derive(Subcommand, Debug)]
enum StreamsCommand {
    /// Create a stream (succeeds if it exists with the same configuration).
    Create {
        /// The stream path, such as `facts/ws-42`.
        path: String,
        /// The content type; `application/json` makes a JSON stream.
        #[arg(long, default_value = eddy_streams::JSON)]
        content_type: String,
        /// Expire the stream this many seconds after its last read or append.
        #[arg(long)]
        ttl: Option<u64>,
        /// Create the stream closed.
        #[arg(long)]
        closed: bool,
        /// Keep only part of its history: `messages=N`, `bytes=SIZE`,
        /// `age=DURATION`, joined by `;` (as the `Eddy-Retention` header).
        #[arg(long, value_name = "POLICY")]
        retention: Option<String>,
        /// Compact the (JSON state) stream with this policy
        /// (`Eddy-Compaction`'s grammar: `age=1h; deletes=7d`, or `on`).
        #[arg(long, value_name = "POLICY")]
        compaction: Option<eddy_streams::Compaction>,
    },
    /// Append data: the argument, or standard input when there is none. On a
    /// JSON stream a top-level array appends one message per element.
    Append {
        /// The stream path.
        path: String,
        /// The data to append.
        #[arg(value_name = "DATA")]
        body: Option<String>,
        /// Close the stream with this append.
        #[arg(long)]
        close: bool,
        /// Append as this idempotent producer (with --epoch and --seq).
        #[arg(long, requires = "seq")]
        producer: Option<String>,
        /// The producer epoch.
        #[arg(long, default_value_t = 0)]
        epoch: u64,
        /// The producer sequence number.
        #[arg(long, requires = "producer")]
        seq: Option<u64>,
        /// Append only if the stream's tail is this offset.
        #[arg(long)]
        expect_tail: Option<String>,
    },
    /// Print messages, one per line, from an offset to the tail.
    Read {
        /// The stream path.
        path: String,
        /// Where to start: `-1` (the beginning), `now`, or an offset.
        #[arg(long, default_value = "-1", allow_hyphen_values = true)]
        from: String,
        /// Stop after this many messages.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Print messages as they arrive, until the stream is closed.
    Tail {
        /// The stream path.
        path: String,
        /// Where to start: `-1`, `now` (the default), or an offset.
        #[arg(long, default_value = "now", allow_hyphen_values = true)]
        from: String,
    },
    /// Close a stream: no more appends.
    Close {
        /// The stream path.
        path: String,
    },
    /// Run one compaction pass of a compacted stream now (the server's
    /// sweep runs them when due): drop the changes later changes of the
    /// same row supersede, before the policy's lag.
    Compact {
        /// The stream path.
        path: String,
    },
    /// Delete a stream.
    Delete {
        /// The stream path.
        path: String,
    },
    /// List streams: path, content type, tail, open or closed, bytes
    /// kept, the earliest offset kept, and the retention policy.
    Ls {
        /// Only paths that start with this prefix.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Write a backup of the streams (JSON lines: each stream's
    /// configuration, close, producers and messages, as of one commit per
    /// stream) while the store keeps serving.
    Export {
        /// Only streams whose path starts with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The backup file; standard output when not given.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Restore a backup written by `export`: the same messages at the same
    /// offsets, with producers that still deduplicate retries.
    Import {
        /// The backup file; standard input when not given.
        file: Option<PathBuf>,
        /// Replace streams that exist (otherwise the import stops at the
        /// first one, before writing anything of it).
        #[arg(long)]
        overwrite: bool,
    },
}

/// How long `tail` waits before it looks at the file again (other
/// processes' appends raise no wake-up here).
const TAIL_POLL: Duration = Duration::from_millis(200);

/// How much one read asks for.
const READ_CHUNK: usize = 1 << 20;

/// Runs a `streams` command.
pub async fn run(args: StreamsArgs) -> anyhow::Result<()> {
    let store = args.store.open().await?;
    let mut out = std::io::stdout().lock();
    match args.command {
        StreamsCommand::Create {
            path,
            content_type,
            ttl,
            closed,
            retention,
            compaction,
        } => {
            let mut config = StreamConfig::bytes(content_type);
            if let Some(policy) = retention {
                config = config.with_retention(policy.parse()?);
            }
            if let Some(policy) = compaction {
                config = config.with_compaction(policy);
            }
            if let Some(secs) = ttl {
                config = config.with_ttl(Duration::from_secs(secs));
            }
            if closed {
                config = config.closed();
            }
            let created = store
                .create(&stream_path(&path)?, config, Payload::empty())
                .await?;
            let verb = if created.created { "created" } else { "exists" };
            writeln!(out, "{verb} {path} at {}", created.info.tail)?;
        }
        StreamsCommand::Append {
            path,
            body,
            close,
            producer,
            epoch,
            seq,
            expect_tail,
        } => {
            let body = match body {
                Some(body) => body.into_bytes(),
                None => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .context("cannot read standard input")?;
                    buf
                }
            };
            let mut append = Append::body(body);
            append.close = close;
            if let (Some(id), Some(seq)) = (producer, seq) {
                append = append.with_producer(ProducerPosition::new(id, epoch, seq));
            }
            if let Some(offset) = expect_tail {
                append = append.expecting_tail(offset.parse()?);
            }
            let appended = store.append(&stream_path(&path)?, append).await?;
            let note = match (appended.duplicate, appended.closed) {
                (true, _) => " (duplicate, nothing written)",
                (false, true) => " (closed)",
                (false, false) => "",
            };
            writeln!(out, "{}{note}", appended.next_offset)?;
        }
        StreamsCommand::Read { path, from, limit } => {
            let path = stream_path(&path)?;
            let mut from: ReadFrom = from.parse()?;
            let mut left = limit.unwrap_or(usize::MAX);
            while left > 0 {
                let chunk = store.read(&path, from, READ_CHUNK).await?;
                for message in chunk.messages.iter().take(left) {
                    print_message(&mut out, message)?;
                }
                left = left.saturating_sub(chunk.messages.len());
                if chunk.up_to_date {
                    break;
                }
                from = ReadFrom::Offset(chunk.next_offset);
            }
        }
        StreamsCommand::Tail { path, from } => {
            let path = stream_path(&path)?;
            let mut from: ReadFrom = from.parse()?;
            loop {
                let chunk = store.read(&path, from, READ_CHUNK).await?;
                for message in &chunk.messages {
                    print_message(&mut out, message)?;
                }
                out.flush()?;
                if chunk.closed {
                    break;
                }
                from = ReadFrom::Offset(chunk.next_offset);
                if chunk.up_to_date {
                    store.wait(&path, chunk.next_offset, TAIL_POLL).await?;
                }
            }
        }
        StreamsCommand::Close { path } => {
            let closed = store
                .append(&stream_path(&path)?, Append::close_only())
                .await?;
            writeln!(out, "closed {path} at {}", closed.next_offset)?;
        }
        StreamsCommand::Compact { path } => {
            let path = stream_path(&path)?;
            let dropped = store.compact(&path).await?;
            let info = store.head(&path).await?;
            writeln!(
                out,
                "compacted {path}: dropped {dropped} messages, {} bytes kept",
                info.bytes
            )?;
        }
        StreamsCommand::Delete { path } => {
            store.delete(&stream_path(&path)?).await?;
            writeln!(out, "deleted {path}")?;
        }
        StreamsCommand::Ls { prefix } => {
            for info in store.list(&prefix).await? {
                let state = if info.closed { "closed" } else { "open" };
                let compaction = info
                    .config
                    .compaction
                    .map_or_else(|| "none".to_owned(), |policy| policy.to_string());
                writeln!(
                    out,
                    "{}\t{}\t{}\t{state}\t{} bytes\tfrom {}\tretention {}\tcompaction {}",
                    info.path,
                    info.config.content_type,
                    info.tail,
                    info.bytes,
                    info.earliest,
                    info.config.retention,
                    compaction
                )?;
            }
        }
        StreamsCommand::Export { prefix, output } => {
            let mut bar = Bar::new();
            let summary = match output {
                Some(file) => {
                    let file = std::fs::File::create(&file)
                        .with_context(|| format!("cannot create {}", file.display()))?;
                    export(store.as_ref(), &prefix, &mut BufWriter::new(file), &mut bar).await?
                }
                None => export(store.as_ref(), &prefix, &mut BufWriter::new(out), &mut bar).await?,
            };
            bar.done(format!(
                "exported {} streams, {} messages",
                summary.streams, summary.messages
            ));
        }
        StreamsCommand::Import { file, overwrite } => {
            let mut bar = Bar::new();
            let summary = match file {
                Some(file) => {
                    let file = std::fs::File::open(&file)
                        .with_context(|| format!("cannot open {}", file.display()))?;
                    import(
                        store.as_ref(),
                        &mut BufReader::new(file),
                        overwrite,
                        &mut bar,
                    )
                    .await?
                }
                None => {
                    import(
                        store.as_ref(),
                        &mut std::io::stdin().lock(),
                        overwrite,
                        &mut bar,
                    )
                    .await?
                }
            };
            bar.done(format!(
                "imported {} streams, {} messages",
                summary.streams, summary.messages
            ));
        }
    }
    Ok(())
}

fn stream_path(path: &str) -> anyhow::Result<StreamPath> {
    Ok(StreamPath::new(path)?)
}

fn print_message(out: &mut impl Write, message: &[u8]) -> anyhow::Result<()> {
    if message.contains(&b'\n') {
        // Keep one message per line: show multi-line payloads escaped.
        let text = String::from_utf8_lossy(message);
        writeln!(out, "{}", text.escape_default())?;
    } else {
        out.write_all(message)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
