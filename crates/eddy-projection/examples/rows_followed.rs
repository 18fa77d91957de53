//! A `Commit::transaction` projection keeping a row table on SQLite (the
//! rows and the checkpoint commit together), followed live.
//! `cargo run -p eddy-projection --example rows_followed`

use std::sync::Arc;

use eddy_projection::{Commit, Declare, FollowOptions, SqliteHost};
use eddy_streams::{JsonStream, SqliteStorage, StreamError};
use futures::StreamExt;

#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let orders = JsonStream::<(String, i64)>::new("Shop/Orders", "orders")?;
    let declare = Declare::new("order-rows");
    let input = declare.input("orders", &orders);
    let rows = declare.process_sqlite(Commit::transaction(), move |tx, work| {
        for (id, total) in work.batch.items(input) {
            tx.execute("INSERT INTO order_totals VALUES (?1, ?2)", (id, total))?;
        }
        Ok(())
    })?;

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStorage::open(dir.path())?);
    let table = "CREATE TABLE order_totals (order_id TEXT PRIMARY KEY, total INTEGER)";
    let migrate = store.transaction(|tx| Ok::<_, StreamError>(tx.sql().execute_batch(table)?));
    migrate.await?;
    orders.create(&*store, &()).await?;
    let mut follow = SqliteHost::new(store.clone()).follow(&rows.at(())?, FollowOptions::default());
    follow.next().await.ok_or("the follower ended")??;
    let new_orders = [("A-1".into(), 12), ("A-2".into(), 7)];
    orders.append(&*store, &(), &new_orders).await?;
    let progress = follow.next().await.ok_or("the follower ended")??;
    let sum = "SELECT SUM(total) FROM order_totals";
    let sum =
        store.transaction(|tx| Ok::<i64, StreamError>(tx.sql().query_row(sum, [], |r| r.get(0))?));
    assert_eq!((progress.items, sum.await?), (2, 19));
    Ok(())
}
