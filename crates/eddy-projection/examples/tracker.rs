//! The tracker: `mapAccumBatch` with a state output (a board of cards)
//! and a JSON output (the running totals), committed by the producer.
//!
//! `cargo run -p eddy-projection --example tracker`

use std::error::Error;
use std::sync::Arc;

use eddy_projection::{Commit, Declare, Host, RunOptions};
use eddy_streams::{JsonStream, MemoryStorage, StateStream};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Card {
    issue_id: String,
    total: f64,
}

pub fn main() -> Result<(), Box<dyn Error>> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Box<dyn Error>> {
    let numbers = JsonStream::<f64>::new("Tracker/Numbers", "numbers")?;
    let board = StateStream::new("Tracker/Board", "board")?.collection::<Card>("card", "issueId");
    let transitions = JsonStream::<f64>::new("Tracker/Transitions", "transitions")?;

    let declare = Declare::<()>::new("tracker");
    let input = declare.input("numbers", &numbers);
    let board_output = declare.state_output("board", &board);
    let cards = declare.collection::<Card>(board_output, "card");
    let totals = declare.output("transitions", &transitions);
    let tracker = declare
        .map_accum_batch(
            Commit::producer(),
            0.0,
            move |state: f64, batch, _, emits| {
                let next = state + batch.items(input).iter().sum::<f64>();
                emits.upsert(
                    cards,
                    Card {
                        issue_id: "total".into(),
                        total: next,
                    },
                );
                emits.remove(cards, "old");
                emits.push(totals, next);
                next
            },
        )?
        .at(())?;

    let storage = Arc::new(MemoryStorage::new());
    numbers.create(storage.as_ref(), &()).await?;
    numbers
        .append(storage.as_ref(), &(), &[1.0, 2.0, 3.0, 4.0, 5.0])
        .await?;

    let host = Host::new(storage.clone());
    let progress = host
        .run(&tracker, RunOptions::default().with_unit_size(2))
        .await?;
    let cards = board
        .materialize(storage.as_ref(), &())
        .await?
        .rows::<Card>("card")?;
    let steps = transitions
        .read(storage.as_ref(), &(), eddy_streams::ReadFrom::Beginning)
        .await?;
    println!(
        "state {:?}; board {cards:?}; transitions {:?}",
        progress.state, steps.items
    );
    assert_eq!(cards["total"].total, 15.0);
    assert_eq!(steps.items, vec![3.0, 10.0, 15.0]);
    Ok(())
}
