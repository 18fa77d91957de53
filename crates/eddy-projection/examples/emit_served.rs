//! An `emit` committed by its producer, followed through `RemoteStorage` against `eddy serve`
//! (its server, in process here): `cargo run -p eddy-projection --example emit_served`

use std::sync::Arc;

use eddy_projection::{Commit, Declare, FollowOptions, Host};
use eddy_server::{RemoteStorage, Server, ServerConfig};
use eddy_streams::{JsonStream, MemoryStorage, ReadFrom};
use futures::StreamExt;

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = ServerConfig {
        admin_token: Some("admin".into()), // checkpoints are admin writes
        ..ServerConfig::default()
    };
    let store = Arc::new(MemoryStorage::new());
    let server = Server::bind(([127, 0, 0, 1], 0).into(), store, config);
    let server = server.await?.spawn();
    let remote = Arc::new(RemoteStorage::new(&server.url())?.with_token("admin"));

    let orders = JsonStream::<f64>::new("Shop/Orders", "orders")?;
    let doubled = JsonStream::<f64>::new("Shop/Doubled", "doubled")?;
    let declare = Declare::new("doubled");
    let input = declare.input("orders", &orders);
    let output = declare.output("doubled", &doubled);
    let doubling = declare
        .emit(Commit::producer())
        .on(input, move |o, _, emits| emits.push(output, o.item * 2.0))
        .at(())?;

    orders.create(&*remote, &()).await?;
    orders.append(&*remote, &(), &[1.5, 4.0]).await?;
    let mut follow = Host::new(remote.clone()).follow(&doubling, FollowOptions::default());
    let progress = follow.next().await.ok_or("the follower ended")??;
    let written = doubled.read(&*remote, &(), ReadFrom::Beginning).await?;
    assert_eq!((progress.items, written.items), (2, vec![3.0, 8.0]));
    Ok(server.stop().await?)
}
