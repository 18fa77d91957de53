//! Order rows: a `process` projection committed with
//! `Commit::transaction` on SQLite.
//!
//! Each order becomes one row of `order_totals`, a table the application
//! migrates in the store's database. The rows and the projection's
//! checkpoint commit in one transaction, so a crash leaves both or
//! neither, and running again writes nothing twice.
//!
//! `cargo run -p eddy-projection --example order_rows`

use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, RunOptions, SqliteHost};
use eddy_streams::{JsonStream, SqliteStorage, StreamError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount: i64,
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let orders = JsonStream::<Order>::new("Shop/Orders", "orders")?;
    let declare = Declare::<()>::new("order-rows");
    let input = declare.input("orders", &orders);
    let bound = declare
        .process_sqlite(Commit::transaction(), move |tx, work| {
            for order in work.batch.items(input) {
                tx.execute(
                    "INSERT INTO order_totals (order_id, total) VALUES (?1, ?2)",
                    (&order.order_id, order.amount),
                )?;
            }
            Ok(())
        })?
        .at(())?;

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStorage::open(dir.path())?);
    // The application migrates its own table in the store's database.
    store
        .transaction(|tx| {
            tx.sql().execute_batch(
                "CREATE TABLE IF NOT EXISTS order_totals (order_id TEXT NOT NULL, total INTEGER NOT NULL)",
            )?;
            Ok::<_, StreamError>(())
        })
        .await?;
    orders.create(store.as_ref(), &()).await?;
    let order = |id: &str, amount| Order {
        order_id: id.into(),
        amount,
    };
    orders
        .append(store.as_ref(), &(), &[order("A-1", 12), order("A-2", 7)])
        .await?;

    let host = SqliteHost::new(Arc::clone(&store));
    let first = host.run(&bound, RunOptions::default()).await?;
    orders
        .append(store.as_ref(), &(), &[order("A-3", 5)])
        .await?;
    let second = host.run(&bound, RunOptions::default()).await?;
    let again = host.run(&bound, RunOptions::default()).await?;
    println!(
        "runs: {} items, {} items, {} units",
        first.items, second.items, again.units
    );

    let rows: Vec<(String, i64)> = store
        .transaction(|tx| {
            let mut stmt = tx
                .sql()
                .prepare("SELECT order_id, total FROM order_totals ORDER BY order_id")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok::<_, StreamError>(rows.collect::<Result<_, _>>()?)
        })
        .await?;
    for (id, total) in &rows {
        println!("{id} -> {total}");
    }
    let expected = [("A-1", 12), ("A-2", 7), ("A-3", 5)].map(|(id, t)| (id.to_owned(), t));
    assert_eq!(rows, expected);
    assert_eq!((first.items, second.items, again.units), (2, 1, 0));
    Ok(())
}
