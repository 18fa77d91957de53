//! Where the tools find a stream store: the SQLite store under `--data`,
//! a PostgreSQL database (`--storage postgres://…`), a DynamoDB table
//! (`--storage dynamodb://TABLE`), or a running
//! `eddy serve` (`--server URL`, over the Durable Streams protocol).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use eddy_projection::{CheckpointStore, SqliteCheckpoints};
use eddy_server::RemoteStorage;
use eddy_streams::{SqliteStorage, Storage};

use crate::serve::StorageKind;

#[cfg(feature = "aws")]
async fn dynamodb(table: &str) -> anyhow::Result<Arc<dyn Storage>> {
    let connection = eddy_dynamo::DynamoOptions::from_env();
    let options = eddy_streams_dynamodb::options();
    let store = eddy_streams_dynamodb::connect(&connection, table, options)
        .await
        .with_context(|| format!("opening the store in DynamoDB table {table}"))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "aws"))]
async fn dynamodb(_table: &str) -> anyhow::Result<Arc<dyn Storage>> {
    bail!("this eddy was built without DynamoDB support: build it with --features aws")
}

/// The options that name a store.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// The data directory of the SQLite store.
    #[arg(long, global = true, default_value = "./eddy-data", env = "EDDY_DATA")]
    pub data: PathBuf,
    /// The stream store: `sqlite` (under `--data`), a PostgreSQL database
    /// as `postgres://user:password@host/database` (`postgres` alone reads
    /// the URL from `DATABASE_URL`), or a DynamoDB table as
    /// `dynamodb://TABLE`.
    #[arg(
        long,
        global = true,
        default_value = "sqlite",
        env = "EDDY_STORAGE",
        hide_env_values = true
    )]
    pub storage: StorageKind,
    /// The PostgreSQL schema of the store's tables.
    #[arg(long, global = true, default_value = "eddy", env = "EDDY_PG_SCHEMA")]
    pub pg_schema: String,
    /// Ask a running `eddy serve` at this URL instead of opening a store.
    #[arg(long, global = true, env = "EDDY_SERVER")]
    pub server: Option<String>,
    /// The bearer token `--server` wants (its admin token to write under
    /// `__eddy/`).
    #[arg(long, global = true, env = "EDDY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl StoreArgs {
    /// The client of the running server these options name, if they name
    /// one (`--server`).
    pub fn remote(&self) -> anyhow::Result<Option<RemoteStorage>> {
        let Some(url) = &self.server else {
            return Ok(None);
        };
        let mut remote =
            RemoteStorage::new(url).with_context(|| format!("cannot reach the server at {url}"))?;
        if let Some(token) = &self.token {
            remote = remote.with_token(token.clone());
        }
        Ok(Some(remote))
    }

    /// Opens the store these options name.
    pub async fn open(&self) -> anyhow::Result<Arc<dyn Storage>> {
        Ok(self.open_with_checkpoints().await?.0)
    }

    /// Opens the store these options name, with the checkpoint table that
    /// SQL hosts keep in its database (SQLite, PostgreSQL; not through a
    /// server).
    pub async fn open_with_checkpoints(&self) -> anyhow::Result<Opened> {
        if let Some(remote) = self.remote()? {
            return Ok((Arc::new(remote), None));
        }
        match &self.storage {
            StorageKind::Memory => {
                bail!("a memory store lives only inside `eddy serve`: use --server URL")
            }
            StorageKind::Sqlite => {
                let store = Arc::new(SqliteStorage::open(&self.data).with_context(|| {
                    format!("cannot open the store in {}", self.data.display())
                })?);
                let table = Arc::new(SqliteCheckpoints::new(Arc::clone(&store)));
                Ok((store, Some(table)))
            }
            StorageKind::Postgres { url } => postgres(url, &self.pg_schema).await,
            StorageKind::Dynamodb { table } => Ok((dynamodb(table).await?, None)),
        }
    }
}

type Opened = (Arc<dyn Storage>, Option<Arc<dyn CheckpointStore>>);

#[cfg(feature = "postgres")]
async fn postgres(url: &str, schema: &str) -> anyhow::Result<Opened> {
    let options = eddy_streams::PgOptions::new(url).with_schema(schema);
    let store = eddy_streams::PgStorage::open(options)
        .await
        .with_context(|| format!("opening the store in PostgreSQL schema {schema}"))?;
    let table = Arc::new(eddy_projection::PgCheckpoints::open(&store));
    Ok((Arc::new(store), Some(table)))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _schema: &str) -> anyhow::Result<Opened> {
    bail!("this eddy was built without PostgreSQL support: build it with --features postgres")
}
