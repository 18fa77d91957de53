//! Backups: [`export`] writes a consistent copy of a store's streams as
//! JSON lines while the store keeps serving; [`import`] restores it into
//! any store.
//!
//! The format, one JSON value per line:
//!
//! 1. `{"header":{"format":"eddy-streams-backup","version":2}}`;
//! 2. per stream, `{"stream":{…}}` (path, content type, expiry, closed,
//!    count, bytes, `Stream-Seq`, the producer that closed it, the
//!    producers' positions with when each last wrote, `last_ms`: optional,
//!    a backup without it restores them as written at the restore, and
//!    where compaction dropped deletes past their lifetime), then
//!    its messages in order, each
//!    `{"text":"…"}` (UTF-8) or `{"base64":"…"}` (other bytes), with
//!    `{"skip":N}` where N positions hold no message (compaction dropped
//!    them; version 2, which reads version 1 too);
//! 3. `{"end":{"streams":N,"messages":M}}`, so a cut-off file is detected.
//!
//! Each stream is copied as of one commit ([`Storage::snapshot`]): its
//! messages up to that tail, with the producer states of that moment.
//! Forks are copied as plain streams holding the same messages.
//!
//! A restored stream holds the same messages at the same positions and
//! keeps its producers' states (their retries are still deduplicated), but
//! it is a new stream with a new incarnation: its offsets differ from the
//! original's. A backup is older than the store it came from, so the
//! original may have handed out offsets past the backup's tail for data the
//! restore does not hold; with a new incarnation those offsets are refused
//! as stale instead of naming other data. Readers and projections start
//! the restored streams again from the beginning.

use std::io::{BufRead, Write};

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::record::{expiry_columns, expiry_from_columns};
use crate::{
    DroppedDeletes, ProducerPosition, ReadFrom, Retention, SnapshotProducer, Storage, StreamConfig,
    StreamError, StreamPath, StreamSnapshot,
};

/// The `format` of the header line.
pub const BACKUP_FORMAT: &str = "eddy-streams-backup";
/// The newest format version this build writes and reads (2 added the
/// `skip` lines of compacted streams).
pub const BACKUP_VERSION: u32 = 2;

/// How many message bytes one read or one restore call carries.
const CHUNK_BYTES: usize = 1 << 20;

/// Why a backup or a restore stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The store refused a call about this stream.
    #[error("cannot copy stream `{path}`")]
    Store {
        /// The stream.
        path: String,
        /// The store's error.
        #[source]
        source: StreamError,
    },
    /// The stream exists in the target store and overwriting was not
    /// asked for; nothing of it was written.
    #[error("stream `{path}` exists in the target store; nothing of it was restored")]
    Exists {
        /// The stream.
        path: String,
    },
    /// Reading or writing the backup failed.
    #[error("backup I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The backup is not one this build reads, or is damaged.
    #[error("backup line {line}: {message}")]
    Format {
        /// The line, from 1.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

/// Follows a backup or a restore (progress bars); every method has a
/// no-op default, and `()` follows nothing.
pub trait BackupProgress {
    /// The export is about to copy `streams` streams of `bytes` bytes.
    fn start(&mut self, streams: u64, bytes: u64) {
        let _ = (streams, bytes);
    }
    /// `bytes` more message bytes of `path` were copied.
    fn copied(&mut self, path: &str, bytes: u64) {
        let _ = (path, bytes);
    }
    /// A stream is complete.
    fn finished(&mut self, path: &str) {
        let _ = path;
    }
}

impl BackupProgress for () {}

/// What a backup held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSummary {
    /// Streams copied.
    pub streams: u64,
    /// Messages copied.
    pub messages: u64,
}

/// One line of the format.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Header {
        format: String,
        version: u32,
    },
    Stream(Box<StreamLine>),
    Text(String),
    Base64(String),
    /// Positions without a message (a compacted stream's holes).
    Skip(u64),
    End(BackupSummary),
}

impl Line {
    /// The line of one message.
    fn message(message: &[u8]) -> Line {
        match std::str::from_utf8(message) {
            Ok(text) => Line::Text(text.to_owned()),
            Err(_) => Line::Base64(base64::engine::general_purpose::STANDARD.encode(message)),
        }
    }

    /// The message a message line holds.
    fn into_message(self) -> Result<Bytes, String> {
        match self {
            Line::Text(text) => Ok(Bytes::from(text)),
            Line::Base64(data) => base64::engine::general_purpose::STANDARD
                .decode(data)
                .map(Bytes::from)
                .map_err(|e| format!("a message is not base64: {e}")),
            _ => Err("not a message".into()),
        }
    }
}

/// A stream's state as the format writes it.
#[derive(Debug, Serialize, Deserialize)]
struct StreamLine {
    path: String,
    content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<i64>,
    created_closed: bool,
    #[serde(default, skip_serializing_if = "Retention::is_none")]
    retention: Retention,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compaction: Option<crate::Compaction>,
    closed: bool,
    count: u64,
    bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_stream_seq: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    closed_by: Option<ProducerPosition>,
    #[serde(default)]
    producers: Vec<ProducerLine>,
    /// The position after the highest delete compaction dropped past its
    /// lifetime, and how many it dropped (absent: none, or a backup from
    /// before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletes_dropped_below: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    deletes_dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A producer's state as the format writes it: its position, and since
/// producer states expire, when its last write was accepted (absent in
/// backups from before; those restore with the restore's time).
#[derive(Debug, Serialize, Deserialize)]
struct ProducerLine {
    #[serde(flatten)]
    position: ProducerPosition,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_ms: Option<i64>,
}

impl From<&StreamSnapshot> for StreamLine {
    fn from(s: &StreamSnapshot) -> Self {
        let (ttl_secs, expires_at_ms) = expiry_columns(s.config.expiry);
        StreamLine {
            path: s.path.to_string(),
            content_type: s.config.content_type.clone(),
            ttl_secs,
            expires_at_ms,
            created_closed: s.config.closed,
            retention: s.config.retention,
            compaction: s.config.compaction,
            closed: s.closed,
            count: s.count,
            bytes: s.bytes,
            last_stream_seq: s.last_stream_seq.clone(),
            closed_by: s.closed_by.clone(),
            producers: s
                .producers
                .iter()
                .map(|p| ProducerLine {
                    position: p.position.clone(),
                    last_ms: p.last_ms,
                })
                .collect(),
            deletes_dropped_below: s.dropped_deletes.map(|d| d.before.position()),
            deletes_dropped: s.dropped_deletes.map_or(0, |d| d.count),
        }
    }
}

impl StreamLine {
    fn into_snapshot(self) -> Result<StreamSnapshot, StreamError> {
        Ok(StreamSnapshot {
            path: StreamPath::new(self.path)?,
            // A restore gives the stream a new incarnation.
            incarnation: 0,
            config: StreamConfig {
                content_type: self.content_type,
                expiry: expiry_from_columns(self.ttl_secs, self.expires_at_ms),
                closed: self.created_closed,
                retention: self.retention,
                compaction: self.compaction,
            },
            closed: self.closed,
            count: self.count,
            bytes: self.bytes,
            last_stream_seq: self.last_stream_seq,
            closed_by: self.closed_by,
            producers: self
                .producers
                .into_iter()
                .map(|p| SnapshotProducer {
                    position: p.position,
                    last_ms: p.last_ms,
                })
                .collect(),
            dropped_deletes: self.deletes_dropped_below.map(|below| DroppedDeletes {
                before: crate::Offset::new(0, below),
                count: self.deletes_dropped,
            }),
        })
    }
}

fn write_line(out: &mut dyn Write, line: &Line) -> Result<(), BackupError> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes every live stream whose path starts with `prefix` to `out`. A
/// stream deleted while the export runs is left out.
pub async fn export(
    store: &dyn Storage,
    prefix: &str,
    out: &mut dyn Write,
    progress: &mut dyn BackupProgress,
) -> Result<BackupSummary, BackupError> {
    let listed = store
        .list(prefix)
        .await
        .map_err(|source| BackupError::Store {
            path: prefix.to_owned(),
            source,
        })?;
    progress.start(listed.len() as u64, listed.iter().map(|s| s.bytes).sum());
    write_line(
        out,
        &Line::Header {
            format: BACKUP_FORMAT.into(),
            version: BACKUP_VERSION,
        },
    )?;
    let mut summary = BackupSummary::default();
    for info in listed {
        let path = StreamPath::new(info.path.as_str()).map_err(|source| BackupError::Store {
            path: info.path.clone(),
            source,
        })?;
        let failed = |source| BackupError::Store {
            path: info.path.clone(),
            source,
        };
        let snapshot = match store.snapshot(&path).await {
            Ok(snapshot) => snapshot,
            Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => continue,
            Err(err) => return Err(failed(err)),
        };
        write_line(out, &Line::Stream(Box::new(StreamLine::from(&snapshot))))?;
        // The next position to write, and how many positions were skipped
        // before it (holes compaction left).
        let mut position = 0;
        while position < snapshot.count {
            let chunk = store
                .read(
                    &path,
                    ReadFrom::Offset(crate::Offset::new(snapshot.incarnation, position)),
                    CHUNK_BYTES,
                )
                .await
                .map_err(failed)?;
            let mut bytes = 0;
            for (index, message) in chunk.messages.iter().enumerate() {
                let at = chunk.offset_of(index).position();
                if at >= snapshot.count {
                    break;
                }
                if at > position {
                    write_line(out, &Line::Skip(at - position))?;
                }
                write_line(out, &Line::message(message))?;
                position = at + 1;
                bytes += message.len() as u64;
                summary.messages += 1;
            }
            // Nothing kept up to where the read ended: skip to there.
            let end = chunk.next_offset.position().min(snapshot.count);
            if end > position {
                write_line(out, &Line::Skip(end - position))?;
                position = end;
            } else if chunk.messages.is_empty() {
                return Err(failed(StreamError::internal(
                    "a read before the snapshot's tail returned nothing",
                )));
            }
            progress.copied(&info.path, bytes);
        }
        progress.finished(&info.path);
        summary.streams += 1;
    }
    write_line(out, &Line::End(summary))?;
    out.flush()?;
    Ok(summary)
}

/// A stream being restored: its state and the messages not yet sent.
struct Pending {
    snapshot: StreamSnapshot,
    /// Whether the stream was created (its first restore call).
    created: bool,
    /// The stream's count as restored so far.
    sent: u64,
    /// The position of the next message line.
    next: u64,
    buffer: Vec<Bytes>,
    buffered: usize,
}

impl Pending {
    fn new(snapshot: StreamSnapshot) -> Self {
        Pending {
            snapshot,
            created: false,
            sent: 0,
            next: 0,
            buffer: Vec::new(),
            buffered: 0,
        }
    }

    /// Positions without messages: what is buffered goes first.
    async fn skip(&mut self, store: &dyn Storage, positions: u64) -> Result<(), BackupError> {
        self.flush(store).await?;
        self.next = self.next.saturating_add(positions);
        Ok(())
    }

    /// Restores what is buffered, which ends at `next` (always once, so
    /// that an empty stream is created too; and up to `next`, so that
    /// skipped positions at the end count).
    async fn flush(&mut self, store: &dyn Storage) -> Result<(), BackupError> {
        let first = self.next - self.buffer.len() as u64;
        if !self.created && first > 0 {
            // A stream that starts with a hole is created empty first.
            self.restore(store, 0, Vec::new()).await?;
        }
        if self.created && self.buffer.is_empty() && self.sent == self.next {
            return Ok(());
        }
        let messages = std::mem::take(&mut self.buffer);
        self.restore(store, first, messages).await?;
        self.buffered = 0;
        Ok(())
    }

    async fn restore(
        &mut self,
        store: &dyn Storage,
        first: u64,
        messages: Vec<Bytes>,
    ) -> Result<(), BackupError> {
        let count = messages.len() as u64;
        store
            .restore(&self.snapshot, first, messages)
            .await
            .map_err(|source| BackupError::Store {
                path: self.snapshot.path.to_string(),
                source,
            })?;
        self.created = true;
        self.sent = first + count;
        Ok(())
    }
}

/// Restores a backup from `input` into `store`. A stream that exists in
/// the store stops the import with [`BackupError::Exists`] before anything
/// of it is written, unless `overwrite`, which deletes it first.
pub async fn import(
    store: &dyn Storage,
    input: &mut dyn BufRead,
    overwrite: bool,
    progress: &mut dyn BackupProgress,
) -> Result<BackupSummary, BackupError> {
    let mut summary = BackupSummary::default();
    let mut pending: Option<Pending> = None;
    let mut number = 0u64;
    let mut text = String::new();
    let mut header = false;
    loop {
        text.clear();
        if input.read_line(&mut text)? == 0 {
            return Err(BackupError::Format {
                line: number + 1,
                message: "the backup ends before its end line: it is incomplete".into(),
            });
        }
        number += 1;
        let bad = |message: String| BackupError::Format {
            line: number,
            message,
        };
        let line: Line = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        match line {
            Line::Header { format, version } => {
                if header || format != BACKUP_FORMAT || version > BACKUP_VERSION {
                    return Err(bad(format!(
                        "expected one {BACKUP_FORMAT} header of version {BACKUP_VERSION} or older, found {format} version {version}"
                    )));
                }
                header = true;
            }
            _ if !header => return Err(bad(format!("not an {BACKUP_FORMAT} file"))),
            Line::Stream(stream) => {
                if let Some(mut done) = pending.take() {
                    done.flush(store).await?;
                    progress.finished(done.snapshot.path.as_str());
                }
                let snapshot = stream.into_snapshot().map_err(|e| bad(e.to_string()))?;
                let found = if overwrite {
                    store.delete(&snapshot.path).await
                } else {
                    store.head(&snapshot.path).await.map(|_| ())
                };
                match found {
                    Ok(()) if !overwrite => {
                        return Err(BackupError::Exists {
                            path: snapshot.path.to_string(),
                        })
                    }
                    Ok(()) | Err(StreamError::NotFound { .. } | StreamError::Gone { .. }) => {}
                    Err(source) => {
                        return Err(BackupError::Store {
                            path: snapshot.path.to_string(),
                            source,
                        })
                    }
                }
                summary.streams += 1;
                pending = Some(Pending::new(snapshot));
            }
            Line::Text(_) | Line::Base64(_) => {
                let stream = pending
                    .as_mut()
                    .ok_or_else(|| bad("a message before any stream".into()))?;
                let message = line.into_message().map_err(bad)?;
                stream.buffered += message.len();
                progress.copied(stream.snapshot.path.as_str(), message.len() as u64);
                stream.buffer.push(message);
                stream.next += 1;
                summary.messages += 1;
                if stream.buffered >= CHUNK_BYTES {
                    stream.flush(store).await?;
                }
            }
            Line::Skip(positions) => {
                let stream = pending
                    .as_mut()
                    .ok_or_else(|| bad("a skip before any stream".into()))?;
                stream.skip(store, positions).await?;
            }
            Line::End(expected) => {
                if let Some(mut done) = pending.take() {
                    done.flush(store).await?;
                    progress.finished(done.snapshot.path.as_str());
                }
                if expected != summary {
                    return Err(bad(format!(
                        "the end line counts {expected:?} but the backup held {summary:?}"
                    )));
                }
                return Ok(summary);
            }
        }
    }
}
