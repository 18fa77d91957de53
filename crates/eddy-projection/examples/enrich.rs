//! Enrich: an asynchronous `mapAccum` over two inputs of different item
//! types. Each order is priced by an asynchronous lookup that borrows the
//! entry for the duration of the call; refunds are synchronous. Both write
//! to one typed output.
//!
//! `cargo run -p eddy-projection --example enrich`

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, RunOptions};
use eddy_streams::{JsonStream, MemoryStorage, ReadFrom};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Order {
    sku: String,
    quantity: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Refund {
    amount: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Balance {
    change: f64,
    balance: f64,
}

/// A price list behind an asynchronous call, as a service would be.
struct Prices(HashMap<String, f64>);

impl Prices {
    async fn price(&self, sku: &str) -> Result<f64, String> {
        tokio::task::yield_now().await;
        self.0
            .get(sku)
            .copied()
            .ok_or_else(|| format!("no price for `{sku}`"))
    }
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let orders = JsonStream::<Order>::new("Shop/Orders", "orders")?;
    let refunds = JsonStream::<Refund>::new("Shop/Refunds", "refunds")?;
    let balances = JsonStream::<Balance>::new("Shop/Balances", "balances")?;
    let prices = Arc::new(Prices(HashMap::from([
        ("tea".to_owned(), 4.0),
        ("cake".to_owned(), 3.5),
    ])));

    let declare = Declare::<()>::new("balance");
    let order_input = declare.input("orders", &orders);
    let refund_input = declare.input("refunds", &refunds);
    let output = declare.output("balances", &balances);
    let bound = declare
        .map_accum(Commit::producer(), 0.0)
        .on_async(order_input, async move |balance, entry, _unit, emits| {
            // `entry` is borrowed for the whole call: no clone needed.
            let change = prices.price(&entry.item.sku).await? * f64::from(entry.item.quantity);
            let balance = balance + change;
            emits.push(output, Balance { change, balance });
            Ok(balance)
        })
        .on(refund_input, move |balance, entry, _unit, emits| {
            let balance = balance - entry.item.amount;
            emits.push(
                output,
                Balance {
                    change: -entry.item.amount,
                    balance,
                },
            );
            balance
        })
        .at(())?;

    let storage = Arc::new(MemoryStorage::new());
    orders.create(storage.as_ref(), &()).await?;
    refunds.create(storage.as_ref(), &()).await?;
    let order = |sku: &str, quantity| Order {
        sku: sku.into(),
        quantity,
    };
    orders
        .append(storage.as_ref(), &(), &[order("tea", 2), order("cake", 1)])
        .await?;
    refunds
        .append(storage.as_ref(), &(), &[Refund { amount: 1.5 }])
        .await?;

    let host = Host::new(storage.clone());
    let progress = host.run(&bound, RunOptions::default()).await?;
    let written = balances
        .read(storage.as_ref(), &(), ReadFrom::Beginning)
        .await?;
    for line in &written.items {
        println!("{:+} -> {}", line.change, line.balance);
    }
    // The orders' entries come first in a unit, then the refunds'.
    assert_eq!(progress.state, Some(10.0));
    let changes: Vec<f64> = written.items.iter().map(|b| b.change).collect();
    assert_eq!(changes, [8.0, 3.5, -1.5]);
    Ok(())
}
