//! Where the tools find a stream store: the SQLite store under `--data`,
//! a PostgreSQL database (`--storage postgres://…`), or a running
//! `eddy serve` (`--server URL`, over the Durable Streams protocol).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use eddy_server::RemoteStorage;
use eddy_streams::{SqliteStorage, Storage};

use crate::serve::StorageKind;

/// The options that name a store.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreArgs {
    /// The data directory of the SQLite store.
    #[arg(long, global = true, default_value = "./eddy-data", env = "EDDY_DATA")]
    pub data: PathBuf,
    /// The stream store: `sqlite` (under `--data`) or a PostgreSQL database
    /// as `postgres://user:password@host/database` (`postgres` alone reads
    /// the URL from `DATABASE_URL`).
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
        if let Some(remote) = self.remote()? {
            return Ok(Arc::new(remote));
        }
        match &self.storage {
            StorageKind::Memory => {
                bail!("a memory store lives only inside `eddy serve`: use --server URL")
            }
            StorageKind::Sqlite => Ok(Arc::new(
                SqliteStorage::open(&self.data)
                    .with_context(|| format!("cannot open the store in {}", self.data.display()))?,
            )),
            StorageKind::Postgres { url } => postgres(url, &self.pg_schema).await,
        }
    }
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str, schema: &str) -> anyhow::Result<Arc<dyn Storage>> {
    let options = eddy_streams::PgOptions::new(url).with_schema(schema);
    let store = eddy_streams::PgStorage::open(options)
        .await
        .with_context(|| format!("opening the store in PostgreSQL schema {schema}"))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _schema: &str) -> anyhow::Result<Arc<dyn Storage>> {
    bail!("this eddy was built without PostgreSQL support: build it with --features postgres")
}
