//! Live wake-ups across processes: each commit sends one `NOTIFY` (or a
//! few, for a group of many streams: a payload holds at most 8000 bytes)
//! with the path and new tail of each stream it changed, never data. Every
//! store on the database listens on one dedicated connection. Of the
//! notifications of the *other* stores, it reports each commit on its
//! `committed` feed, and for the streams that have waiting readers here
//! it reads their heads in one statement and hands them to the readers:
//! a commit costs each store one notification and at most one query,
//! however many readers wait.
//!
//! Notifications are a fast path, not the guarantee: one sent while the
//! listener reconnects is lost. So the store also reads the heads of every
//! stream with waiting readers after the listener reconnects, and every
//! [`PgOptions::recheck`](super::PgOptions), in one statement.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use super::error::statement_error;
use super::records::{decode, query};
use super::transaction::Wiring;
use crate::{Committed, Notifier, Offset, StreamError, StreamInfo};

/// The most bytes of lines in one notification (PostgreSQL refuses
/// payloads of 8000 bytes or more; a line is at most ~1.1 KB).
pub(super) const NOTICE_BYTES: usize = 6000;

/// What a transaction of this store changed, to announce once committed.
#[derive(Clone, Debug, PartialEq, Eq)]
// Nearly every one is `Committed` (one per write), so boxing it would
// only add an allocation per write.
#[allow(clippy::large_enum_variant)]
pub(super) enum Change {
    /// New data, a new stream or a close: the stream as it is now.
    Committed(StreamInfo),
    /// A deleted stream: its waiters wake up and see it gone.
    Deleted(String),
}

impl Change {
    /// The path of a commit that durable wake-ups mark.
    pub fn committed_path(&self) -> Option<&str> {
        match self {
            Change::Committed(info) => Some(&info.path),
            Change::Deleted(_) => None,
        }
    }

    /// Raises this change on this store's `notifier`.
    pub fn raise(self, notifier: &Notifier) {
        match self {
            Change::Committed(info) => notifier.publish(&info),
            Change::Deleted(path) => notifier.touch(&path),
        }
    }

    /// The change's line in a notification.
    pub fn line(&self) -> String {
        match self {
            Change::Committed(info) => committed_line(&info.path, info.tail, info.closed),
            Change::Deleted(path) => format!("d {} {path}", Offset::ZERO),
        }
    }
}

/// The line of a commit that left the stream at `path` at `tail`:
/// `<kind> <tail> <path>`, where kind is `o` (open) or `c` (closed); a
/// delete is `d`. Paths hold no control characters and are at most 1 KiB.
pub(super) fn committed_line(path: &str, tail: Offset, closed: bool) -> String {
    let kind = if closed { 'c' } else { 'o' };
    format!("{kind} {tail} {path}")
}

/// The start of every notification of the store `instance`: its id and a
/// newline; the lines follow, one per change.
pub(super) fn notice_prefix(instance: u64) -> String {
    format!("{instance:016x}\n")
}

/// `lines` in notifications of at most [`NOTICE_BYTES`] each (after the
/// prefix).
pub(super) fn notices(prefix: &str, lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut notices = Vec::new();
    let mut current = String::new();
    for line in lines {
        if !current.is_empty() && current.len() + line.len() + 1 > NOTICE_BYTES {
            notices.push(format!("{prefix}{current}"));
            current.clear();
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        notices.push(format!("{prefix}{current}"));
    }
    notices
}

/// A change another store announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    Committed(Committed),
    Deleted(String),
}

/// The changes in a notification, unless it was sent by `instance`
/// itself (which raised them at its commit). Lines not understood are
/// skipped.
pub(super) fn parse(payload: &str, instance: u64) -> Vec<Heard> {
    let (sender, lines) = payload.split_once('\n').unwrap_or((payload, ""));
    let Ok(sender) = u64::from_str_radix(sender, 16) else {
        return Vec::new();
    };
    if sender == instance {
        return Vec::new();
    }
    lines.split('\n').filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Heard> {
    let mut parts = line.splitn(3, ' ');
    let (kind, tail, path) = (parts.next()?, parts.next()?, parts.next()?);
    let tail: Offset = tail.parse().ok()?;
    let path = path.to_owned();
    match kind {
        "o" | "c" => Some(Heard::Committed(Committed {
            path,
            tail,
            closed: kind == "c",
        })),
        "d" => Some(Heard::Deleted(path)),
        _ => None,
    }
}

/// The longest pause between two attempts to reach the database again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Raises the other stores' changes on the store's notifier until the
/// task is aborted. `listener` already listens on the store's channel;
/// after any failure the task opens a new one from `pool` and listens
/// again.
pub(super) async fn run(listener: PgListener, pool: PgPool, wiring: Arc<Wiring>) {
    let mut listener = Some(listener);
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(listening) = listener.take() {
            relay(listening, &wiring).await;
        }
        // A failure sqlx does not recover from (the server ended the
        // session, say): start over on a new connection, once the old one
        // is back in the pool.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        match listen(&pool, &wiring.channel).await {
            Ok(fresh) => {
                tracing::info!("the PostgreSQL listener is back");
                listener = Some(fresh);
                backoff = Duration::from_millis(50);
                recheck(&wiring).await;
            }
            Err(err) => tracing::warn!(error = %err, "the PostgreSQL listener cannot reconnect"),
        }
    }
}

/// Raises the changes `listener` hears until it fails.
async fn relay(mut listener: PgListener, wiring: &Wiring) {
    let notifier = &wiring.notifier;
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let mut watched = Vec::new();
                for heard in parse(notification.payload(), wiring.instance) {
                    let (Heard::Committed(Committed { path, .. }) | Heard::Deleted(path)) = &heard;
                    wiring.stale.mark(path);
                    match heard {
                        Heard::Committed(committed) => {
                            if notifier.is_watched(&committed.path) {
                                watched.push(committed.path.clone());
                            }
                            notifier.report(committed);
                        }
                        Heard::Deleted(path) => notifier.touch(&path),
                    }
                }
                if !watched.is_empty() {
                    refresh(wiring, &watched).await;
                }
            }
            // The connection was lost and sqlx opened another: what was
            // sent meanwhile is lost; the waiters' streams are read again.
            Ok(None) => {
                tracing::warn!("the PostgreSQL listener reconnected");
                recheck(wiring).await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "the PostgreSQL listener failed");
                return;
            }
        }
    }
}

/// Reads the heads of every stream with waiting readers and hands them
/// to the readers: what a lost notification would have told them.
pub(super) async fn recheck(wiring: &Wiring) {
    let watched = wiring.notifier.watched();
    for paths in watched.chunks(1000) {
        refresh(wiring, paths).await;
    }
}

/// Reads the heads of the streams at `paths` in one statement and hands
/// each to its waiting readers (a stream that is gone, or not live, makes
/// them look for themselves).
async fn refresh(wiring: &Wiring, paths: &[String]) {
    if let Err(err) = try_refresh(wiring, paths).await {
        // The readers' own timeouts, and the next recheck, still hold.
        tracing::warn!(error = %err, "cannot read the heads of waited-on streams");
    }
}

async fn try_refresh(wiring: &Wiring, paths: &[String]) -> Result<(), StreamError> {
    let mut lease = wiring.reads.acquire().await?;
    let rows = query(&wiring.sql.heads)
        .bind(paths)
        .fetch_all(lease.conn()?)
        .await;
    lease.finished(&rows);
    let rows = rows.map_err(statement_error)?;
    let now = wiring.engine.now_ms();
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        let (key, path, mut record) = decode(row).map_err(statement_error)?;
        record.accessed_ms = wiring.touches.accessed(key, record.accessed_ms);
        if record.is_live(now) {
            wiring.notifier.refresh(&record.head.info(&path));
        } else {
            wiring.notifier.touch(&path);
        }
        seen.insert(path);
    }
    for path in paths.iter().filter(|path| !seen.contains(*path)) {
        wiring.notifier.touch(path);
    }
    Ok(())
}

/// A listener on `channel`, on a connection of `pool`.
pub(super) async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StreamConfig;

    fn info(path: &str, tail: u64, closed: bool) -> StreamInfo {
        StreamInfo {
            path: path.into(),
            config: StreamConfig::json(),
            closed,
            tail: Offset::new(1_764_000_000_000_000, tail),
            bytes: 0,
            earliest: Offset::ZERO,
            dropped_deletes: None,
        }
    }

    #[test]
    fn notices_round_trip_and_skip_their_sender() {
        let changes = [
            Change::Committed(info("a/b c", 7, false)),
            Change::Committed(info("x", 2, true)),
            Change::Deleted("gone/now".into()),
        ];
        let notices = notices(&notice_prefix(0xfeed), changes.iter().map(Change::line));
        assert_eq!(notices.len(), 1);
        assert_eq!(
            parse(&notices[0], 0xbeef),
            vec![
                Heard::Committed(Committed {
                    path: "a/b c".into(),
                    tail: Offset::new(1_764_000_000_000_000, 7),
                    closed: false
                }),
                Heard::Committed(Committed {
                    path: "x".into(),
                    tail: Offset::new(1_764_000_000_000_000, 2),
                    closed: true
                }),
                Heard::Deleted("gone/now".into()),
            ]
        );
        assert!(parse(&notices[0], 0xfeed).is_empty(), "its own");
        assert!(parse("zz\no 1 x", 1).is_empty());
        assert!(parse("0000000000000002\nq 0 x", 1).is_empty());
    }

    #[test]
    fn many_changes_are_cut_into_notices_postgres_takes() {
        let long = "p".repeat(1024);
        let lines =
            (0..100).map(|n| committed_line(&format!("{long}{n}"), Offset::new(1, n), false));
        let notices = notices(&notice_prefix(1), lines);
        assert!(notices.len() > 1);
        assert!(notices.iter().all(|n| n.len() < 8000));
        let heard: usize = notices.iter().map(|n| parse(n, 2).len()).sum();
        assert_eq!(heard, 100, "no line lost");
    }
}
