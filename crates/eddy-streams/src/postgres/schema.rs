//! The PostgreSQL record layout and its versioned migrations. See
//! `DESIGN-postgres.md`.
//!
//! Migrations are sqlx's: each is applied once, in its own transaction,
//! under sqlx's advisory lock (so two processes starting at once do not
//! race), and recorded with a checksum in `_sqlx_migrations` inside the
//! store's schema. A database that has a migration this build does not
//! know was written by a newer build and is refused.

use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};
use sqlx::{Connection, Executor, PgConnection, SqlSafeStr};

use super::error::pg_error;
use crate::StreamError;

/// The layout this build writes: the last migration's version.
pub(super) const VERSION: i64 = 6;

/// Version 1: streams, messages, producers and tombstones, as the SQLite
/// layout of version 3 (forks found by source). Table names are unqualified:
/// they are created in the store's schema (the migration connection's
/// `search_path`), so the checksums do not depend on the schema's name.
const STREAMS: &str = r#"
CREATE TABLE streams (
    id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    path            TEXT    COLLATE "C" NOT NULL UNIQUE,
    content_type    TEXT    NOT NULL,
    ttl_secs        BIGINT,
    expires_at_ms   BIGINT,
    created_closed  BOOLEAN NOT NULL,
    closed          BOOLEAN NOT NULL,
    count           BIGINT  NOT NULL,
    bytes           BIGINT  NOT NULL,
    last_stream_seq TEXT,
    closed_by_id    TEXT,
    closed_by_epoch BIGINT,
    closed_by_seq   BIGINT,
    accessed_ms     BIGINT  NOT NULL,
    fork_source     TEXT    COLLATE "C",
    fork_position   BIGINT,
    fork_sub        BIGINT,
    soft_deleted    BOOLEAN NOT NULL
);
CREATE INDEX streams_by_fork_source ON streams (fork_source) WHERE fork_source IS NOT NULL;
CREATE TABLE messages (
    stream_id BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    data      BYTEA  NOT NULL,
    PRIMARY KEY (stream_id, seq)
);
CREATE TABLE producers (
    stream_id BIGINT NOT NULL,
    producer  TEXT   NOT NULL,
    epoch     BIGINT NOT NULL,
    seq       BIGINT NOT NULL,
    PRIMARY KEY (stream_id, producer)
);
CREATE TABLE tombstones (
    path       TEXT   COLLATE "C" PRIMARY KEY,
    deleted_ms BIGINT NOT NULL
);
"#;

/// Version 2: the checkpoints of projections that commit in the store's
/// own transactions (`Commit::transaction`), one row per binding, moved by
/// compare-and-set on its save counter. (`IF NOT EXISTS`: builds before
/// this migration created the same table on first use.)
const PROJECTION_CHECKPOINTS: &str = r#"
CREATE TABLE IF NOT EXISTS projection_checkpoints (
    projection TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    params     TEXT   NOT NULL,
    saves      BIGINT NOT NULL,
    checkpoint TEXT,
    PRIMARY KEY (projection, version, params)
);
"#;

/// Version 3: the durable wake-up marks of attached projections, one row
/// per marked binding, written in the transaction of each commit that
/// touches it and deleted by the binding once it caught up.
const WAKE_MARKS: &str = r#"
CREATE TABLE wake_marks (
    projection TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    params     TEXT   NOT NULL,
    path       TEXT   NOT NULL,
    commits    BIGINT NOT NULL,
    attempts   BIGINT NOT NULL,
    due_ms     BIGINT NOT NULL,
    PRIMARY KEY (projection, version, params)
);
"#;

/// Version 4: stream incarnations — each stream's own, its fork source's,
/// and a deleted stream's in its tombstone. Rows from before keep 0, so
/// the offsets they handed out stay valid.
const INCARNATIONS: &str = r#"
ALTER TABLE streams ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 0;
ALTER TABLE streams ADD COLUMN fork_incarnation BIGINT;
ALTER TABLE tombstones ADD COLUMN incarnation BIGINT NOT NULL DEFAULT 0;
"#;

/// Version 5: the shared documents (`Documents`), one row per key,
/// replaced or deleted only by compare-and-set on its version.
const DOCUMENTS: &str = r#"
CREATE TABLE documents (
    key     TEXT   COLLATE "C" PRIMARY KEY,
    version BIGINT NOT NULL,
    body    BYTEA  NOT NULL
);
"#;

/// Version 6: when each producer last had a write accepted (unix ms),
/// indexed so that expired producers are found without reading the
/// others, and each stream's producer count in its row, so that the cap
/// costs no count of a million rows. Producers from before count as
/// written at the upgrade (the database's clock): each keeps a whole
/// expiry window.
const PRODUCER_LAST_WRITE: &str = r#"
ALTER TABLE producers ADD COLUMN last_ms BIGINT NOT NULL DEFAULT 0;
UPDATE producers SET last_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
CREATE INDEX producers_by_last_write ON producers (last_ms);
ALTER TABLE streams ADD COLUMN producer_count BIGINT NOT NULL DEFAULT 0;
UPDATE streams SET producer_count =
    (SELECT count(*) FROM producers WHERE producers.stream_id = streams.id);
"#;

/// Version 7: retention. Each stream's policy with where its kept
/// messages start (JSON, NULL for a stream without a policy), and when
/// the sweep should next drop some of its messages, indexed so that the
/// sweep finds the streams due without reading the others.
const RETENTION: &str = r#"
ALTER TABLE streams ADD COLUMN retention TEXT;
ALTER TABLE streams ADD COLUMN retention_due_ms BIGINT;
CREATE INDEX streams_by_retention_due ON streams (retention_due_ms)
    WHERE retention_due_ms IS NOT NULL;
"#;

/// Every migration, in order.
fn migrations() -> Vec<Migration> {
    let steps = [
        (1, "streams, messages, producers, tombstones", STREAMS),
        (2, "projection checkpoints", PROJECTION_CHECKPOINTS),
        (3, "wake marks", WAKE_MARKS),
        (4, "incarnations", INCARNATIONS),
        (5, "documents", DOCUMENTS),
        (6, "producer last write", PRODUCER_LAST_WRITE),
        (7, "retention", RETENTION),
    ];
    steps
        .into_iter()
        .map(|(version, name, sql)| {
            Migration::new(
                version,
                name.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect()
}

/// Creates the schema and its tables, or upgrades an older layout, on a
/// connection of its own; refuses a database written by a newer build.
pub(super) async fn migrate(conn: &mut PgConnection, schema: &str) -> Result<(), StreamError> {
    let quoted = quote(schema);
    let mut migrator = Migrator::with_migrations(migrations());
    migrator.create_schema(quoted.clone());
    migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
    conn.execute(sqlx::AssertSqlSafe(format!("SET search_path TO {quoted}")))
        .await
        .map_err(|e| pg_error("cannot select the store's schema", e))?;
    match migrator.run_direct(None, conn, false).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => Err(StreamError::internal(format!(
            "schema `{schema}` has eddy layout version {version}, newer than this build's \
             version {VERSION}: run a newer eddy"
        ))),
        Err(MigrateError::Execute(e)) => Err(pg_error("cannot migrate the store's schema", e)),
        Err(e) => Err(StreamError::internal_from(
            format!("cannot migrate schema `{schema}`"),
            e,
        )),
    }
}

/// Closes the migration connection politely.
pub(super) async fn close(conn: PgConnection) {
    if let Err(e) = conn.close().await {
        tracing::debug!(error = %e, "closing the migration connection");
    }
}

/// `schema` as a quoted identifier. Schema names are checked by
/// [`PgOptions`](super::PgOptions) to be plain identifiers; quoting keeps
/// their case.
pub(super) fn quote(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}
