//! Amounts: an `emit` projection to a JSON stream of plain numbers, plus
//! a `fold` that sums them with the default checkpoint commit.
//!
//! `cargo run -p eddy-projection --example amounts`

use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, RunOptions};
use eddy_streams::{JsonStream, MemoryStorage};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Order {
    order_id: String,
    amount: f64,
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let orders = JsonStream::<Order>::new("Shop/Orders", "orders")?;
    let amounts = JsonStream::<f64>::new("Shop/Amounts", "amounts")?;

    let declare = Declare::<()>::new("amounts");
    let input = declare.input("input", &orders);
    let output = declare.output("output", &amounts);
    let to_amounts = declare
        .emit(Commit::producer())
        .on(input, move |entry, _, emits| {
            emits.push(output, entry.item.amount)
        })
        .at(())?;

    let declare = Declare::<()>::new("amount-sum");
    let input = declare.input("amounts", &amounts);
    let sum = declare
        .fold(0.0)
        .on(input, |sum, entry, _| sum + entry.item)
        .at(())?;

    let storage = Arc::new(MemoryStorage::new());
    orders.create(storage.as_ref(), &()).await?;
    let batch: Vec<Order> = (1..=4)
        .map(|i| Order {
            order_id: format!("o{i}"),
            amount: f64::from(i) * 2.5,
        })
        .collect();
    orders.append(storage.as_ref(), &(), &batch).await?;

    let host = Host::new(storage.clone());
    host.run(&to_amounts, RunOptions::default()).await?;
    let progress = host.run(&sum, RunOptions::default()).await?;
    println!(
        "sum of amounts: {:?} after {} items",
        progress.state, progress.items
    );
    assert_eq!(progress.state, Some(25.0));
    assert_eq!(host.read(&sum).await?, 25.0);
    Ok(())
}
