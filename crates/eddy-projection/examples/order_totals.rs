//! Order totals: an `emit` projection with the producer commit.
//!
//! Each order becomes one `{ orderId, total }` item on `order-totals`.
//! Running it twice writes nothing new.
//!
//! `cargo run -p eddy-projection --example order_totals`

use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, RunOptions};
use eddy_streams::{JsonStream, MemoryStorage, ReadFrom};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct OrderTotal {
    order_id: String,
    total: f64,
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let orders = JsonStream::<Order>::new("Shop/Orders", "orders")?;
    let order_totals = JsonStream::<OrderTotal>::new("Shop/OrderTotals", "order-totals")?;
    let declare = Declare::<()>::new("order-totals");
    let input = declare.input("input", &orders);
    let totals = declare.output("totals", &order_totals);
    let bound = declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(
                totals,
                OrderTotal {
                    order_id: entry.item.order_id.clone(),
                    total: entry.item.amount,
                },
            )
        })
        .at(())?;

    let storage = Arc::new(MemoryStorage::new());
    orders.create(storage.as_ref(), &()).await?;
    orders
        .append(
            storage.as_ref(),
            &(),
            &[
                Order {
                    order_id: "A-1".into(),
                    amount: 12.5,
                },
                Order {
                    order_id: "A-2".into(),
                    amount: 7.0,
                },
            ],
        )
        .await?;

    let host = Host::new(storage.clone());
    let first = host
        .run(&bound, RunOptions::default().with_limit(10))
        .await?;
    let again = host
        .run(&bound, RunOptions::default().with_limit(10))
        .await?;
    println!(
        "first run: {} units, {} items; second run: {} units",
        first.units, first.items, again.units
    );

    let written = order_totals
        .read(storage.as_ref(), &(), ReadFrom::Beginning)
        .await?;
    for total in &written.items {
        println!("{} -> {}", total.order_id, total.total);
    }
    assert_eq!(written.items.len(), 2);
    assert_eq!(again.units, 0);
    Ok(())
}
