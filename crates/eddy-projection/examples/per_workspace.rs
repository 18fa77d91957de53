//! A parameterised projection per workspace, kept up to date by `follow`.
//!
//! `facts/:workspaceId` → `totals/:workspaceId`. One follower per bound
//! workspace; the follower ends when its input closes.
//!
//! `cargo run -p eddy-projection --example per_workspace`

use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, FollowOptions, Host, Status};
use eddy_streams::{Append, JsonStream, MemoryStorage, Storage};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Workspace {
    workspace_id: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Total {
    order_id: String,
    total: f64,
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let facts = JsonStream::<Order>::new("Shop/Facts", "facts/:workspaceId")?;
    let totals = JsonStream::<Total>::new("Shop/Totals", "totals/:workspaceId")?;
    let declare = Declare::<Workspace>::new("order-totals");
    let input = declare.input("facts", &facts);
    let output = declare.output("output", &totals);
    let by_workspace = declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(
                output,
                Total {
                    order_id: entry.item.order_id.clone(),
                    total: entry.item.amount,
                },
            )
        })
        .build()?;
    assert_eq!(by_workspace.parse("facts/ws-42")?.workspace_id, "ws-42");

    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let host = Host::new(storage.clone());
    let params = Workspace {
        workspace_id: "ws-42".into(),
    };
    // Create every input before starting the follower.
    facts.create(storage.as_ref(), &params).await?;

    let follower = {
        let bound = by_workspace.at(params.clone())?;
        let host = host.clone();
        tokio::spawn(async move {
            let mut elements = Vec::new();
            let mut follow = host.follow(
                &bound,
                FollowOptions::default()
                    .with_repair_interval(std::time::Duration::from_millis(1_000)),
            );
            while let Some(progress) = follow.next().await {
                let progress = progress?;
                println!(
                    "committed {} items, status {:?}",
                    progress.items, progress.status
                );
                elements.push(progress.status);
            }
            Ok::<_, eddy_projection::ProjectionError>(elements)
        })
    };

    for i in 0..3 {
        let order = Order {
            order_id: format!("o{i}"),
            amount: f64::from(i),
        };
        facts.append(storage.as_ref(), &params, &[order]).await?;
    }
    storage
        .append(&facts.path(&params)?, Append::close_only())
        .await?;

    let statuses = follower.await??;
    assert_eq!(statuses.last(), Some(&Status::Closed));
    let written = totals
        .read(storage.as_ref(), &params, eddy_streams::ReadFrom::Beginning)
        .await?;
    println!("totals/ws-42 holds {} items", written.items.len());
    assert_eq!(written.items.len(), 3);
    Ok(())
}
