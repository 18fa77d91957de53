//! Live wake-ups across processes: each write transaction sends a
//! `NOTIFY` with the stream's path and new tail (never its data), and every
//! store on the database listens on one dedicated connection and raises
//! the notifications of the *other* stores on its own [`Notifier`].
//!
//! Notifications are a fast path, not the guarantee: one sent while the
//! listener reconnects is lost, so [`PgStorage::wait`](super::PgStorage)
//! also re-reads the stream at a bounded interval.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::{Committed, Notifier, Offset};

/// What a write transaction tells the other processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// New data, a new stream or a close.
    Committed(Committed),
    /// A deleted stream: its waiters wake up and see it gone.
    Deleted(String),
}

impl Change {
    /// The path of a commit that durable wake-ups mark.
    pub fn committed_path(&self) -> Option<&str> {
        match self {
            Change::Committed(committed) => Some(&committed.path),
            Change::Deleted(_) => None,
        }
    }

    /// Raises this change on `notifier`.
    pub fn raise(self, notifier: &Notifier) {
        match self {
            Change::Committed(committed) => notifier.commit(committed),
            Change::Deleted(path) => notifier.touch(&path),
        }
    }

    /// The notification payload: `<instance> <kind> <tail> <path>`, where
    /// kind is `o` (open), `c` (closed) or `d` (deleted). Paths hold no
    /// control characters and are at most 1 KiB, well under the 8000-byte
    /// payload limit.
    pub fn payload(&self, instance: u64) -> String {
        match self {
            Change::Committed(c) => {
                let kind = if c.closed { 'c' } else { 'o' };
                format!("{instance:016x} {kind} {} {}", c.tail, c.path)
            }
            Change::Deleted(path) => format!("{instance:016x} d {} {path}", Offset::ZERO),
        }
    }

    /// The change in a payload, unless it was sent by `instance` itself
    /// (which raised it at its commit) or is not understood.
    pub fn parse(payload: &str, instance: u64) -> Option<Change> {
        let mut parts = payload.splitn(4, ' ');
        let sender = u64::from_str_radix(parts.next()?, 16).ok()?;
        if sender == instance {
            return None;
        }
        let (kind, tail, path) = (parts.next()?, parts.next()?, parts.next()?);
        let tail: Offset = tail.parse().ok()?;
        let path = path.to_owned();
        match kind {
            "o" | "c" => Some(Change::Committed(Committed {
                path,
                tail,
                closed: kind == "c",
            })),
            "d" => Some(Change::Deleted(path)),
            _ => None,
        }
    }
}

/// The longest pause between two attempts to reach the database again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Raises the other stores' changes on `notifier` until the task is
/// aborted. `listener` already listens on `channel`; after any failure the
/// task opens a new one from `pool` and listens again.
pub(super) async fn run(
    listener: PgListener,
    pool: PgPool,
    channel: String,
    notifier: Arc<Notifier>,
    instance: u64,
) {
    let mut listener = Some(listener);
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(listening) = listener.take() {
            relay(listening, &notifier, instance).await;
        }
        // A failure sqlx does not recover from (the server ended the
        // session, say): start over on a new connection, once the old one
        // is back in the pool.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        match listen(&pool, &channel).await {
            Ok(fresh) => {
                tracing::info!("the PostgreSQL listener is back");
                listener = Some(fresh);
                backoff = Duration::from_millis(50);
            }
            Err(err) => tracing::warn!(error = %err, "the PostgreSQL listener cannot reconnect"),
        }
    }
}

/// Raises the changes `listener` hears until it fails.
async fn relay(mut listener: PgListener, notifier: &Notifier, instance: u64) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                if let Some(change) = Change::parse(notification.payload(), instance) {
                    change.raise(notifier);
                }
            }
            // The connection was lost and sqlx opened another: what was
            // sent meanwhile is lost, and the waiters' re-checks repair it.
            Ok(None) => tracing::warn!("the PostgreSQL listener reconnected"),
            Err(err) => {
                tracing::warn!(error = %err, "the PostgreSQL listener failed");
                return;
            }
        }
    }
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

    #[test]
    fn payloads_round_trip_and_skip_their_sender() {
        let changes = [
            Change::Committed(Committed {
                path: "a/b c".into(),
                tail: Offset::at(7),
                closed: false,
            }),
            Change::Committed(Committed {
                path: "x".into(),
                tail: Offset::at(2),
                closed: true,
            }),
            Change::Deleted("gone/now".into()),
        ];
        for change in changes {
            let payload = change.payload(0xfeed);
            assert_eq!(Change::parse(&payload, 0xbeef), Some(change));
            assert_eq!(Change::parse(&payload, 0xfeed), None);
        }
        assert_eq!(Change::parse("zz o 1 x", 1), None);
        assert_eq!(Change::parse("0000000000000002 q 0 x", 1), None);
    }
}
