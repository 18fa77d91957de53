//! A `fold` to a typed state on SQLite, followed while orders arrive.
//! `cargo run -p eddy-projection --example fold_on_sqlite`

use std::sync::Arc;

use eddy_projection::{Declare, FollowOptions, Host};
use eddy_streams::{JsonStream, SqliteStorage};
use futures::StreamExt;

/// How many orders, and their sum.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
struct Totals(u32, f64);

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let orders = JsonStream::<f64>::new("Shop/Orders", "orders")?;
    let declare = Declare::new("totals");
    let input = declare.input("orders", &orders);
    let totals = declare
        .fold(Totals::default())
        .on(input, |Totals(n, sum), order, _| {
            Totals(n + 1, sum + order.item)
        })
        .at(())?;

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStorage::open(dir.path())?);
    orders.create(&*store, &()).await?;
    orders.append(&*store, &(), &[12.5, 7.0]).await?;
    let mut follow = Host::new(store.clone()).follow(&totals, FollowOptions::default());
    let first = follow.next().await.ok_or("the follower ended")??;
    orders.append(&*store, &(), &[5.0]).await?;
    let next = follow.next().await.ok_or("the follower ended")??;
    assert_eq!(first.state, Some(Totals(2, 19.5)));
    assert_eq!(next.state, Some(Totals(3, 24.5)));
    Ok(())
}
